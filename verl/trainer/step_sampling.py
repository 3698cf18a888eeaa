"""The sampling parameters of one training step's rollout: the config's, with the engine's log-probs left
out on the steps `rollout.logprob_check_every` skips (where the loss does not read them).

    sampling = StepSampling(config.rollout, config.async_training.enable)
    params = sampling.for_step(global_step)    # SamplingParams; `sampling.base` is the config's own

One decision per step (DAPO's extra draws concatenate with the first): steps 1, k + 1, 2k + 1, ... and the
first step of each process (after a resume) check the engine's weights.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from verl.rollout.base import SamplingParams
from verl.trainer.step_seed import draw_seed


class StepSampling:
    def __init__(self, rollout_cfg, async_enabled: bool, correction: bool = False, seed: int = 0):
        """correction: algorithm.rollout_correction is on (the loss reads the engine's log-probs); seed: the
        run's, from which each step's draw_seed derives (verl/trainer/step_seed.py)."""
        self.base = SamplingParams.from_config(rollout_cfg)
        self.seed = seed
        self.check_every = rollout_cfg.logprob_check_every
        self.every_step = self.check_every == 1 or rollout_cfg.engine_log_probs_every_step(async_enabled, correction)
        self._first_step: Optional[int] = None  # the first step this process generated for

    def for_step(self, step: int) -> SamplingParams:
        """The parameters of the rollout of step `step` (the completed steps before it)."""
        draws = draw_seed(self.seed, step)
        if self.every_step:
            return dataclasses.replace(self.base, draw_seed=draws)
        if self._first_step is None:
            self._first_step = step
        check = step == self._first_step or step % self.check_every == 0
        return dataclasses.replace(self.base, log_probs=check, draw_seed=draws)
