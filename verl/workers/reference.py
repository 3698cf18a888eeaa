"""Reference policy: frozen log-probs of the starting policy, for the KL term.

Built only when the algorithm uses KL (in the reward or as a loss). It is a frozen copy
of the actor at step 0, stored in `model.dtype` (no master weights, no gradients).
"""

from __future__ import annotations

import copy

import torch

from verl.batch import Batch
from verl.models.loading import torch_dtype
from verl.workers.logprobs import response_log_probs
from verl.workers.micro_batches import make_micro_batches, pad_response_columns, trim_padding


class Reference:
    def __init__(self, config, device: torch.device, actor_model: torch.nn.Module):
        self.config = config
        self.device = device
        self.model = copy.deepcopy(actor_model).to(device=device, dtype=torch_dtype(config.model.dtype))
        self.model.eval()
        self.model.requires_grad_(False)
        self.temperature = config.rollout.temperature or 1.0

    @torch.no_grad()
    def compute_log_probs(self, batch: Batch) -> torch.Tensor:
        """ref_log_probs (B, R) on CPU."""
        t = self.config.training
        out = []
        for mb in make_micro_batches(batch, t.micro_batch_size, t.max_tokens_per_micro_batch):
            mb = trim_padding(mb).to(self.device)
            lp, _ = response_log_probs(self.model, mb.input_ids, mb.attention_mask, mb.position_ids,
                                       mb.response_length, temperature=self.temperature,
                                       chunk_size=t.logprob_chunk_size, with_entropy=False)
            out.append(pad_response_columns(lp.float().cpu(), batch.response_length))
        return torch.cat(out)
