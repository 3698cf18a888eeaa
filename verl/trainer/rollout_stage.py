"""The rollout stage: a step's prompts -> its scored batch and the rollout metrics. It knows the engine,
the reward, the sampling, the algorithm's special cases and the prompt loader, and nothing of the Trainer,
so the synchronous source calls it on the trainer's thread and the asynchronous producer on its own.

    stage = RolloutStage(engine, reward, StepSampling(...), AlgorithmHooks(...), prompt_loader, timer=timer)
    batch, metrics = stage.run(prompts, step)      # timed as timing_s/rollout (reward: timing_s/reward)
    producer_stage = stage.with_engine(engine)     # the same stage over another engine (the producer's)

One run: sample n responses per prompt (engine.generate) and score them (reward.score); the algorithm
may add rollouts (ReMax's greedy baseline), filter groups (DAPO, drawing more prompts from the loader) and
mask responses (algorithm.mask_truncated). Batch layout: verl.batch (B prompts x n samples rows).
"""

from __future__ import annotations

import copy

from verl.batch import Batch
from verl.trainer.stage_fields import check_filled
from verl.trainer.timer import stage


class RolloutStage:
    def __init__(self, engine, reward, sampling, hooks, prompts, *, keeps_reward_parts: bool = False, timer):
        """sampling: a StepSampling (verl/trainer/step_sampling.py); hooks: the AlgorithmHooks; prompts: the
        train PromptLoader (DAPO's extra draws); keeps_reward_parts: the estimator reads batch.reward_parts
        (gdpo); timer: the StageTimer the stages are charged to (calls from other threads run untimed)."""
        self.engine, self.reward, self.sampling, self.hooks, self.prompts = engine, reward, sampling, hooks, prompts
        self.keeps_reward_parts = keeps_reward_parts
        self.timer = timer

    def with_engine(self, engine) -> "RolloutStage":
        other = copy.copy(self)
        other.engine = engine
        return other

    @stage("rollout")
    def run(self, prompts: Batch, step: int) -> tuple[Batch, dict]:
        """Batch `prompts` of step `step` sampled and scored: (batch, rollout metrics)."""
        sampling = self.sampling.for_step(step)
        reward_metrics: dict = {}
        batch = self._sample_and_score(prompts, sampling, reward_metrics)
        batch, metrics = self.hooks.filter_groups(
            batch, lambda: self._sample_and_score(self.prompts.next_batch(), sampling, reward_metrics))
        self.hooks.mask_responses(batch)
        metrics.update(self.engine.metrics())  # e.g. agent/* for multi-turn rollouts
        metrics.update(reward_metrics)
        check_filled(batch, "rollout")
        return batch, metrics

    def _sample_and_score(self, prompts: Batch, sampling, reward_metrics: dict) -> Batch:
        """One generation and its scores; the reward metrics of the last call land in `reward_metrics`."""
        batch = self._generate(prompts, sampling)
        batch.scores, scored = self.score(batch)
        self.hooks.extra_rollouts(prompts, batch, self.engine, self.score)
        scored.update(self.hooks.shape_scores(batch, sampling.max_new_tokens))
        reward_metrics.clear()
        reward_metrics.update(scored)
        return batch

    def _generate(self, prompts: Batch, sampling) -> Batch:
        try:
            return self.engine.generate(prompts, sampling)
        except RuntimeError as exc:
            if "probability tensor contains" not in str(exc):
                raise
            from verl.workers.optim import NonFiniteWeights

            # torch.multinomial's check: the logits are NaN/Inf. With finite weights (the update checks
            # them) that is an overflow in the forward: weights grown too large by too big a step.
            raise NonFiniteWeights("training.lr: the policy's sampling probabilities are NaN/Inf (its logits "
                                   "overflowed: the weights grew too large in the updates so far); lower the "
                                   "learning rate (with model.dtype float16, use bfloat16)") from None

    @stage("reward")
    def score(self, batch: Batch):
        """(scores (B,), metrics); batch.reward_parts too where the estimator reads them (gdpo)."""
        if not self.keeps_reward_parts:
            return self.reward.score(batch)
        scores, batch.reward_parts, metrics = self.reward.score_parts(batch)
        return scores, metrics
