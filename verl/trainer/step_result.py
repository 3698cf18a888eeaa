"""What one `Trainer.step()` returns: the step's metrics and the batch it trained on.

    result = trainer.step()
    result["reward/mean"], result["reward"]     # a read-only mapping: the metrics and their short names
    result.metrics                              # the metrics alone, as the tracker logs them
    result.batch                                # the Batch of the update (pf_ppo: the resampled one)
    result.samples(4)                           # a few (prompt, response, reward[, turns]) rows, for the sample log
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

from verl.batch import Batch
from verl.tracking.metrics import short_metrics


@dataclass(frozen=True, eq=False)
class StepResult(Mapping):
    metrics: dict
    batch: Batch

    @cached_property
    def _view(self) -> dict:  # the canonical names and the seed's short ones (reward, kl, ...)
        return {**self.metrics, **short_metrics(self.metrics)}

    def __getitem__(self, key: str) -> float:
        return self._view[key]

    def __iter__(self):
        return iter(self._view)

    def __len__(self) -> int:
        return len(self._view)

    def samples(self, k: int) -> list[dict]:
        """The first k (prompt, response, reward) rows of the batch; multi-turn rows add their turns."""
        b = self.batch
        rows = [{"prompt": b.prompt_text[i], "response": b.response_text[i], "reward": float(b.scores[i])}
                for i in range(min(k, len(b)))]
        for i, row in enumerate(rows):
            turns = (b.extra[i] or {}).get("turns") if b.extra else None
            if turns:
                row["turns"] = turns
        return rows

    def sequence_lengths(self) -> tuple[list[int], list[int]]:
        """(prompt tokens, response tokens) of each sequence, as the update's FLOPs count them."""
        b = self.batch
        return (b.attention_mask[:, :b.prompt_length].sum(dim=1).tolist(),
                b.attention_mask[:, b.prompt_length:].sum(dim=1).tolist())
