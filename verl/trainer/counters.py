"""The trainer's own counters, saved with every full checkpoint (trainer_state.json)."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class RunCounters:
    global_step: int = 0  # optimizer steps completed (the step being trained is global_step + 1)
    bad_steps: int = 0  # consecutive steps with a non-finite loss or gradient
    skipped_steps: int = 0  # all such steps in the run (logged as training/skipped_steps)
    last_good_step: int = 0

    def state_dict(self) -> dict:
        return {k: int(v) for k, v in asdict(self).items()}

    def load_state_dict(self, state: dict) -> None:
        self.global_step = int(state.get("global_step", 0))
        self.bad_steps = int(state.get("bad_steps", 0))
        self.skipped_steps = int(state.get("skipped_steps", 0))
        self.last_good_step = int(state.get("last_good_step", self.global_step))
