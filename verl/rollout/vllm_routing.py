"""vLLM's routed experts in the rollout Batch's columns, for `rollout.routing_replay: engine` on vLLM.

vLLM (0.26 and later) records the experts each MoE layer chose for every token a forward saw when the engine
starts with `enable_return_routed_experts=True`: each finished sample's `CompletionOutput.routed_experts` is an
array (S, L, k), row j the j-th token of the request (the prompt's tokens from `routed_experts_prompt_start`,
0 here, then the generated ones; the last sampled token is never fed back, so S is at most prompt + response
- 1). In vLLM 0.26 the V1 model runner records it (its V2 runner lists "routed experts capture" as
unsupported and vLLM falls back to V1); vLLM 0.32 records it in the V2 runner only, which needs Triton.

The Batch's columns are the left-padded prompt (width P) and then the response: token j of row r sits at
column pad_r + j, pad_r the row's left padding. Columns with nothing recorded (padding, the last token) hold
-1, which the replay reads as "the router's own choice" (verl/models/moe.py).
"""

from __future__ import annotations

import torch

from verl.models.moe import EXPERT_DTYPE


class MissingRouting(RuntimeError):
    pass


def routed_columns_from_engine(routed: list, prompt_mask: torch.Tensor, width: int) -> torch.Tensor:
    """(N, width, L, k) int16 from the samples' routed_experts arrays (S_r, L, k), in the Batch's row order;
    `prompt_mask` (N, P): the rows' left-padded prompt mask; `width` = P + R, the Batch's columns."""
    if any(r is None for r in routed):
        raise MissingRouting("rollout.routing_replay: engine: vLLM returned no routed experts for a sample (it "
                             "records them with enable_return_routed_experts on its V1 model runner, vLLM >= 0.26)")
    first = torch.as_tensor(routed[0])
    out = torch.full((len(routed), width, *first.shape[1:]), -1, dtype=EXPERT_DTYPE)
    pads = (prompt_mask.shape[1] - prompt_mask.sum(dim=1)).tolist()
    for row, (arr, pad) in enumerate(zip(routed, pads)):
        experts = torch.as_tensor(arr)
        n = max(0, min(experts.shape[0], width - int(pad)))
        out[row, int(pad):int(pad) + n] = experts[:n].to(EXPERT_DTYPE)
    return out
