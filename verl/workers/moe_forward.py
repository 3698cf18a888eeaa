"""What an MoE actor's forward adds to a micro-batch's loss and metrics (verl/models/moe.py has the routers).

    moe = MoeForward.of(routing, recording, attention_mask, packed, aux=True)   # after the trunk pass
    micro_loss = moe.into(micro_loss, mb, counts, coef)                          # + coef x aux x share

The router's load-balancing loss is computed per micro-batch over its real tokens (transformers' function,
as the model computes it) and enters the mini-batch's loss weighted by the micro-batch's share of response
tokens, so a coefficient of 0 changes nothing and micro-batching changes the term only through which tokens
each f_e and P_e are taken over (as Megatron's per-micro-batch auxiliary loss does). Expert load is logged
per micro-batch, weighted the same way: moe/expert_load/<e> and moe/load_max_over_mean.

Shapes: routed_experts (b, T, L, k) int16 on a micro-batch (the columns of input_ids; -1 where the router
chooses itself), (N, L, k) for the forward's N tokens: all b x T positions of a padded micro-batch in
row-major order, or its real tokens (attention_mask == 1, row-major) when packed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from verl.batch import Batch
from verl.models.moe import EXPERT_DTYPE, MoeRouting, Recording, expert_load, load_metrics
from verl.workers.update_loop import MicroLoss


def token_experts(routed: Optional[torch.Tensor], attention_mask: torch.Tensor, packed) -> Optional[torch.Tensor]:
    """A micro-batch's routed_experts (b, T, L, k) in the forward's token order (N, L, k), or None."""
    if routed is None:
        return None
    routed = routed.to(attention_mask.device)
    if packed is not None:
        return routed[attention_mask.bool()]
    return routed.reshape(-1, *routed.shape[2:])


@dataclass
class MoeForward:
    experts: torch.Tensor  # (N, L, k) the experts the forward's tokens went to
    real: torch.Tensor  # (N,) bool: real tokens among them
    load: torch.Tensor  # (L, E) share of the real tokens' routed slots per expert
    aux: Optional[torch.Tensor]  # the load-balancing loss (with its graph), when asked for

    @classmethod
    def of(cls, routing: MoeRouting, rec: Optional[Recording], attention_mask: torch.Tensor, packed,
           aux: bool) -> Optional["MoeForward"]:
        if not routing or rec is None:
            return None
        experts = torch.stack(rec.experts, dim=1)  # (N, L, k)
        real = (torch.ones(experts.shape[0], dtype=torch.bool, device=experts.device) if packed is not None
                else attention_mask.reshape(-1).bool().to(experts.device))
        mask = None if packed is not None else attention_mask
        return cls(experts=experts, real=real, load=expert_load(rec.experts, routing.num_experts, real),
                   aux=routing.aux_loss(rec, mask) if aux else None)

    def experts_like(self, mb: Batch) -> torch.Tensor:
        """The experts as routed_experts of the (untrimmed) micro-batch `mb`: (b, T, L, k) int16 on the CPU,
        -1 at padding."""
        b, t = mb.input_ids.shape
        out = torch.full((b, t, *self.experts.shape[1:]), -1, dtype=EXPERT_DTYPE)
        out[mb.attention_mask.bool()] = self.experts[self.real].to(EXPERT_DTYPE).cpu()
        return out

    def into(self, out: MicroLoss, mb: Batch, counts: dict, coef: float) -> MicroLoss:
        """`out` with coef x aux (weighted by the micro-batch's response-token share) and the load metrics."""
        share = float(mb.response_mask.sum()) / max(counts["num_tokens"], 1.0)
        loss, sums = out.loss, dict(out.sums)
        if self.aux is not None:
            loss = loss + coef * self.aux * share
            sums["moe/aux_loss"] = self.aux.detach() * share
        return MicroLoss(loss, sums, {**out.means, **load_metrics(self.load)}, out.keep)
