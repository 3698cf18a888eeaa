"""Reference policy: frozen log-probs of the starting policy, for the KL term.

Built only when the algorithm uses KL (in the reward or as a loss). Without LoRA it is a
frozen copy of the actor at step 0, stored in `model.dtype` (no master weights, no
gradients), kept on the CPU between uses with `training.offload_idle_models`. With LoRA
the starting policy is the actor's base model, so the reference is the actor's own module
with its adapters disabled: no second copy in memory.
"""

from __future__ import annotations

import torch

from verl.batch import Batch
from verl.models.loading import torch_dtype
from verl.models.lora import adapters_disabled, is_peft_model
from verl.workers.compile import CompiledLayers
from verl.workers.logprobs import response_log_probs
from verl.workers.micro_batches import batch_to_device, make_micro_batches, pad_response_columns, trim_padding
from verl.workers.offload import IdleOffload
from verl.workers.param_copy import cast_module_copy
from verl.workers.optim import autocast_context
from verl.workers.packing import causal_lm_trunk, pack_batch, prepare_packing


def frozen_copy(model: torch.nn.Module, device: torch.device, dtype: torch.dtype) -> torch.nn.Module:
    """A deep copy in eval mode without gradients whose parameters are created directly on
    `device` in `dtype` (never two full-precision copies on one device); buffers keep
    their dtype (`verl.workers.param_copy.cast_module_copy`)."""
    return cast_module_copy(model, device, dtype, trainable=False).eval()


class Reference:
    def __init__(self, config, device: torch.device, actor_model: torch.nn.Module):
        self.config = config
        self.device = device
        self.compute_dtype = torch_dtype(config.model.dtype)
        self.shares_actor = is_peft_model(actor_model)
        t = config.training
        offload = t.offload_idle_models and not self.shares_actor
        if self.shares_actor:
            self.model = actor_model
        else:  # straight to host memory when it idles there (no transient second copy on the GPU)
            self.model = frozen_copy(actor_model, torch.device("cpu") if offload else device, self.compute_dtype)
        self.temperature = config.rollout.temperature or 1.0
        self.packed = t.use_packed_samples
        self.packing_mode = prepare_packing(causal_lm_trunk(self.model)) if self.packed else None
        self.offload = IdleOffload(self.model, device, offload)
        self.compiled = CompiledLayers(self.model, config.model.torch_compile)

    @torch.no_grad()
    def compute_log_probs(self, batch: Batch) -> torch.Tensor:
        """ref_log_probs (B, R) on CPU."""
        t = self.config.training
        out = []
        with self.offload.active(), adapters_disabled(self.model):
            for mb in make_micro_batches(batch, t.micro_batch_size, t.max_tokens_per_micro_batch, self.packed):
                mb = trim_padding(mb)
                packed = pack_batch(mb.input_ids, mb.attention_mask, mb.response_length).to(self.device) \
                    if self.packed else False
                mb = batch_to_device(mb, self.device)
                with autocast_context(self.device, self.compute_dtype), self.compiled.active():
                    lp, _ = response_log_probs(self.model, mb.input_ids, mb.attention_mask, mb.position_ids,
                                               mb.response_length, temperature=self.temperature,
                                               chunk_size=t.logprob_chunk_size, with_entropy=False,
                                               packed=packed, packing_mode=self.packing_mode,
                                               fused=self.config.model.torch_compile)
                out.append(pad_response_columns(lp.float(), batch.response_length))
            result = torch.cat(out).cpu()  # one copy back, before the model goes idle
        return result
