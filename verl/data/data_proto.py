"""`DataProto`: real verl's name for a step's batch, as a curriculum sampler's update(batch) reads it.

    batch.batch["token_level_scores"]        # (B, R) tensors, real verl's names
    batch.non_tensor_batch["index"]          # (B,) numpy object arrays: the rows the samples came from
    len(batch), batch.meta_info

`from_batch(batch, rows)` builds one from our Batch (verl/batch.py) and each sample's row index (the index the
sampler yielded). Tensors under real verl's names: input_ids, attention_mask, position_ids, prompts (B, P),
responses (B, R), response_mask, old_log_probs, ref_log_prob, values, rollout_log_probs, token_level_scores,
token_level_rewards, advantages, returns (those the step computed). Non-tensors: data_source, reward_model
({"ground_truth": ...}), extra_info, index, uid (the prompt's group: a prompt's samples share it). It is a
read-only view for samplers, not real verl's class (no concat, chunk or union).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# real verl's tensor name -> ours (verl.batch.Batch)
TENSORS = {"input_ids": "input_ids", "attention_mask": "attention_mask", "position_ids": "position_ids",
           "responses": "responses", "response_mask": "response_mask", "old_log_probs": "old_log_probs",
           "ref_log_prob": "ref_log_probs", "values": "values", "rollout_log_probs": "rollout_log_probs",
           "token_level_scores": "token_level_scores", "token_level_rewards": "token_level_rewards",
           "advantages": "advantages", "returns": "returns"}


def _objects(values) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out


@dataclass
class DataProto:
    batch: dict = field(default_factory=dict)
    non_tensor_batch: dict = field(default_factory=dict)
    meta_info: dict = field(default_factory=dict)

    def __len__(self) -> int:
        for value in self.batch.values():
            return value.shape[0]
        for value in self.non_tensor_batch.values():
            return len(value)
        return 0

    @classmethod
    def from_batch(cls, batch, rows: list, meta_info: dict | None = None) -> "DataProto":
        """`rows`: the row index of each sample of `batch` (B ints)."""
        tensors = {real: getattr(batch, ours) for real, ours in TENSORS.items() if getattr(batch, ours) is not None}
        if batch.input_ids is not None and batch.responses is not None:
            tensors["prompts"] = batch.input_ids[:, : batch.input_ids.shape[1] - batch.responses.shape[1]]
        non_tensor = {"data_source": _objects(batch.data_source),
                      "reward_model": _objects([{"ground_truth": g} for g in batch.ground_truth]),
                      "extra_info": _objects([dict(e) for e in batch.extra]),
                      "index": _objects(rows), "uid": _objects([str(g) for g in batch.group_id])}
        return cls(batch=tensors, non_tensor_batch=non_tensor, meta_info=dict(meta_info or {}))
