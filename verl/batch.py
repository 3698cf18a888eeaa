"""Batch: the one container passed between rollout, reward, reference, critic and actor.

Layout (B sequences, P prompt positions, R response positions, T = P + R):

    input_ids        (B, T) long   prompt left-padded to P, then response right-padded to R
    attention_mask   (B, T) long   1 on real prompt and response tokens, 0 on padding
    position_ids     (B, T) long   0.. along the real tokens (padding gets 0)
    responses        (B, R) long   = input_ids[:, P:]
    response_mask    (B, R) float  1 where a response token counts in losses; 0 on padding and
                                   on tokens the policy did not choose (e.g. tool output), so
                                   a response may have interior zeros
    rollout_log_probs(B, R) float  log pi_engine(token) reported by the generation engine
    old_log_probs    (B, R) float  log pi_old(token) recomputed by the actor before the update
    ref_log_probs    (B, R) float  log pi_ref(token) from the frozen reference policy
    teacher_log_probs (B, R) float log p_teacher(token): the distillation teacher's (distillation.*)
    values           (B, R) float  V(s_t) from the critic
    token_level_scores  (B, R)     reward-function score placed on each response's last token
    token_level_rewards (B, R)     scores minus the KL penalty (when KL is in the reward)
    advantages       (B, R) float
    returns          (B, R) float  critic regression targets
    scores           (B,)   float  scalar reward per sequence (sum of components, weighted)
    baseline_scores  (B,)   float  ReMax: reward of the greedy response to the same prompt
    reward_parts     (B, K) float  each reward component's unweighted score (kept for GDPO only)
    sum_pi_squared   (B, R) float  sum_v pi_old(v)^2 at each response position (kept for OTB only)
    is_weights       (B, R) float  the rollout correction's importance weights, where the trainer computes
                                   them for the whole batch (verl/algorithms/off_policy.py); else None
    routed_experts   (B, P+R, L, k) int16  an MoE model's experts per token and layer to replay in the update
                                   (rollout.routing_replay; -1: the router's own choice); else None

Which of them exist after which stage of a training step: verl/trainer/stage_fields.py (FILLS: always,
MAY_FILL: where an algorithm, role or option asks), checked by the stages and by tests/trainer/test_stage_fields.py.

Per-sample non-tensor fields are lists of length B: prompt/response text, ground truth,
data source, group id (samples of one prompt share it), and free-form extra info.
`raw_prompt` is the data row's prompt as given (text or chat messages): a multi-turn rollout
starts each trajectory's conversation (the messages tools and interactions see) from it.

    multi_modal  one `verl.data.multimodal.MultiModalInputs` (images, the processor's tensors for
                 them, the engine's unexpanded prompt ids) or None per sequence; empty for a
                 text-only batch. Rows of a batch with images hold the processor's EXPANDED prompt
                 ids in input_ids (one placeholder per image feature). The entries are immutable,
                 so repeat (rollout.n) shares one object between a prompt's samples.

Every operation (select/split/concat/repeat/to) treats all fields the same way, so a
field added here travels everywhere without further code.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional, Sequence

import torch

Tensor = torch.Tensor

# List fields whose rows default to None (concat of a batch that has them with one that does not)
_NONE_WHEN_ABSENT = ("multi_modal",)


@dataclass
class Batch:
    input_ids: Optional[Tensor] = None
    attention_mask: Optional[Tensor] = None
    position_ids: Optional[Tensor] = None
    responses: Optional[Tensor] = None
    response_mask: Optional[Tensor] = None
    rollout_log_probs: Optional[Tensor] = None
    old_log_probs: Optional[Tensor] = None
    ref_log_probs: Optional[Tensor] = None
    teacher_log_probs: Optional[Tensor] = None
    values: Optional[Tensor] = None
    token_level_scores: Optional[Tensor] = None
    token_level_rewards: Optional[Tensor] = None
    advantages: Optional[Tensor] = None
    returns: Optional[Tensor] = None
    scores: Optional[Tensor] = None
    baseline_scores: Optional[Tensor] = None
    reward_parts: Optional[Tensor] = None
    sum_pi_squared: Optional[Tensor] = None
    is_weights: Optional[Tensor] = None
    routed_experts: Optional[Tensor] = None
    # Non-tensor, one entry per sequence
    prompt_text: list = field(default_factory=list)
    raw_prompt: list = field(default_factory=list)  # the row's prompt as given: text or chat messages
    response_text: list = field(default_factory=list)
    ground_truth: list = field(default_factory=list)
    data_source: list = field(default_factory=list)
    group_id: list = field(default_factory=list)
    extra: list = field(default_factory=list)  # dicts
    truncated: list = field(default_factory=list)  # bool: response hit max_new_tokens
    multi_modal: list = field(default_factory=list)  # MultiModalInputs | None (see the module doc)

    # ------------------------------------------------------------------ basics
    @classmethod
    def tensor_fields(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls) if f.default_factory is dataclasses.MISSING]

    @classmethod
    def list_fields(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls) if f.default_factory is not dataclasses.MISSING]

    def __len__(self) -> int:
        for name in self.tensor_fields():
            value = getattr(self, name)
            if value is not None:
                return value.shape[0]
        for name in self.list_fields():
            value = getattr(self, name)
            if value:
                return len(value)
        return 0

    def __post_init__(self):
        self.check()

    def check(self) -> None:
        """Every present field has the same leading size B."""
        sizes = {}
        for name in self.tensor_fields():
            value = getattr(self, name)
            if value is not None:
                sizes[name] = value.shape[0]
        for name in self.list_fields():
            value = getattr(self, name)
            if value:
                sizes[name] = len(value)
        if len(set(sizes.values())) > 1:
            raise ValueError(f"Batch fields disagree on batch size: {sizes}")

    @property
    def prompt_length(self) -> int:
        """P: prompt positions (left-padded) before the response block."""
        return self.input_ids.shape[1] - self.responses.shape[1]

    @property
    def response_length(self) -> int:
        return self.responses.shape[1]

    @property
    def device(self) -> torch.device:
        return self.input_ids.device

    def replace(self, **changes) -> "Batch":
        return dataclasses.replace(self, **changes)

    # ------------------------------------------------------------- reshaping
    def select(self, index: Sequence[int] | Tensor) -> "Batch":
        """Rows `index` (list of ints, long tensor or bool mask) of every field."""
        if isinstance(index, Tensor) and index.dtype == torch.bool:
            index = index.nonzero(as_tuple=True)[0]
        idx_list = index.tolist() if isinstance(index, Tensor) else list(index)
        idx_t = torch.as_tensor(idx_list, dtype=torch.long)
        out = {}
        for name in self.tensor_fields():
            value = getattr(self, name)
            out[name] = None if value is None else value[idx_t.to(value.device)]
        for name in self.list_fields():
            value = getattr(self, name)
            out[name] = [value[i] for i in idx_list] if value else []
        return Batch(**out)

    def split(self, size: int) -> list["Batch"]:
        """Consecutive chunks of `size` rows (the last may be shorter)."""
        n = len(self)
        return [self.select(range(i, min(i + size, n))) for i in range(0, n, size)]

    def chunk(self, parts: int) -> list["Batch"]:
        """`parts` nearly equal consecutive chunks (for data-parallel ranks)."""
        n = len(self)
        bounds = [round(i * n / parts) for i in range(parts + 1)]
        return [self.select(range(bounds[i], bounds[i + 1])) for i in range(parts)]

    @staticmethod
    def concat(batches: Sequence["Batch"]) -> "Batch":
        """Stack batches row-wise. Fields must be present in all or none; tensors with
        different sequence lengths are right-padded (responses) / left-padded (prompts)
        to the longest before stacking."""
        batches = [b for b in batches if len(b)]
        if not batches:
            return Batch()
        if len(batches) == 1:
            return batches[0]
        batches = _align_lengths(batches)
        out = {}
        for name in Batch.tensor_fields():
            values = [getattr(b, name) for b in batches]
            present = [v is not None for v in values]
            if all(present):
                out[name] = torch.cat(values, dim=0)
            elif any(present):
                raise ValueError(f"Batch.concat: field '{name}' is missing in some batches")
        for name in Batch.list_fields():
            values = [getattr(b, name) for b in batches]
            if name in _NONE_WHEN_ABSENT and any(values):  # a text-only batch's rows: None each
                values = [v or [None] * len(b) for v, b in zip(values, batches)]
            out[name] = [x for v in values for x in v] if all(values) else []
        return Batch(**out)

    def repeat(self, n: int) -> "Batch":
        """Each row n times in a row (row i -> rows i*n .. i*n+n-1): n samples per prompt."""
        index = [i for i in range(len(self)) for _ in range(n)]
        return self.select(index)

    def to(self, device) -> "Batch":
        out = {}
        for name in self.tensor_fields():
            value = getattr(self, name)
            out[name] = None if value is None else value.to(device)
        for name in self.list_fields():
            out[name] = list(getattr(self, name))
        return Batch(**out)

    def iter_minibatches(self, size: int, generator: Optional[torch.Generator] = None,
                         shuffle: bool = False) -> Iterator["Batch"]:
        order = torch.randperm(len(self), generator=generator) if shuffle else torch.arange(len(self))
        for i in range(0, len(self), size):
            yield self.select(order[i:i + size])


def _align_lengths(batches: Sequence[Batch]) -> list[Batch]:
    """Pad prompt blocks on the left and response blocks on the right to common sizes."""
    if batches[0].responses is None:
        return list(batches)
    max_p = max(b.prompt_length for b in batches)
    max_r = max(b.response_length for b in batches)
    out = []
    for b in batches:
        dp, dr = max_p - b.prompt_length, max_r - b.response_length
        if dp == 0 and dr == 0:
            out.append(b)
            continue
        changes: dict[str, Any] = {}
        for name in ("input_ids", "attention_mask", "position_ids"):
            value = getattr(b, name)
            if value is not None:
                pad_value = 0
                changes[name] = torch.nn.functional.pad(value, (dp, dr), value=pad_value)
        for name in Batch.tensor_fields():
            value = getattr(b, name)
            if name in changes or value is None or value.dim() != 2:
                continue
            if value.shape[1] == b.response_length:
                changes[name] = torch.nn.functional.pad(value, (0, dr), value=0)
        out.append(b.replace(**changes))
    return out
