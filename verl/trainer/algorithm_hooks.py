"""An algorithm's special cases around the common step, decided by the `algorithm` section so
that `Trainer.step()` names only the stages.

    hooks = AlgorithmHooks(config.algorithm, sampling)
    hooks.extra_rollouts(prompts, batch, rollout, score)   # ReMax: the greedy answer's reward as baseline
    batch, m = hooks.filter_groups(batch, sample_more)     # DAPO: drop groups whose rewards are all equal
    hooks.mask_responses(batch)                             # algorithm.mask_truncated
    hooks.shape_scores(batch, max_new_tokens)               # DAPO: soft overlong punishment
    hooks.may_defer_pi_old(global_step)                     # log pi_old from the update's own forward?
"""

from __future__ import annotations

import copy

import torch

from verl.algorithms.advantages import ESTIMATORS
from verl.algorithms.dapo import dynamic_sampling_keep, overlong_penalty
from verl.algorithms.requirements import needs_greedy_baseline
from verl.batch import Batch


class AlgorithmHooks:
    def __init__(self, algorithm_cfg, sampling, correction=None):
        """correction: the run's rollout correction (verl.algorithms.off_policy.CorrectionSpec; None: off)."""
        self.cfg = algorithm_cfg
        self.correction = correction
        self.sampling = sampling
        self.greedy = copy.copy(sampling)
        self.greedy.greedy, self.greedy.n = True, 1

    def extra_rollouts(self, prompts: Batch, batch: Batch, rollout, score) -> None:
        """Generations besides the sampled ones. ReMax (Li et al. 2023): the baseline of each
        sample is the reward of the greedy answer to its prompt, in batch.baseline_scores (B,)."""
        if needs_greedy_baseline(self.cfg):
            greedy = rollout.generate(prompts, self.greedy)
            base, _ = score(greedy)
            batch.baseline_scores = base.repeat_interleave(self.sampling.n)

    def filter_groups(self, batch: Batch, sample_more) -> tuple[Batch, dict]:
        """DAPO dynamic sampling (algorithm.dynamic_sampling): groups whose rewards are all equal
        carry no signal; drop them and call `sample_more()` (a scored batch of new prompts) until
        the batch is full or `max_rounds` extra rounds were spent. Whole groups only."""
        ds = self.cfg.dynamic_sampling
        if not ds.enable:
            return batch, {}
        want = len(batch)
        keep = dynamic_sampling_keep(batch.scores, batch.group_id)
        kept, dropped, rounds = [batch.select(keep)], int((~keep).sum()), 0
        while sum(len(b) for b in kept) < want and rounds < ds.max_rounds:
            rounds += 1
            more = sample_more()
            keep = dynamic_sampling_keep(more.scores, more.group_id)
            kept.append(more.select(keep))
            dropped += int((~keep).sum())
        merged = Batch.concat(kept)
        if len(merged) >= want:
            batch = merged.select(range(want))
        elif len(merged) > 0:
            batch = merged  # out of rounds: train on the informative groups there are
        return batch, {"rollout/dynamic_dropped": float(dropped), "rollout/dynamic_rounds": float(rounds)}

    def mask_responses(self, batch: Batch) -> None:
        """algorithm.mask_truncated: responses that hit max_new_tokens leave the loss (mask 0)."""
        if self.cfg.mask_truncated:
            keep_rows = torch.tensor([0.0 if t else 1.0 for t in batch.truncated]).unsqueeze(1)
            batch.response_mask = batch.response_mask * keep_rows

    def shape_scores(self, batch: Batch, max_new_tokens: int) -> dict:
        """DAPO's soft overlong punishment added to batch.scores (algorithm.overlong_penalty)."""
        op = self.cfg.overlong_penalty
        if not op.enable:
            return {}
        lengths = batch.response_mask.sum(dim=1)
        penalty = overlong_penalty(lengths, max_new_tokens, op.buffer_len, op.penalty_factor)
        batch.scores = batch.scores + penalty
        return {"reward/overlong_penalty": float(penalty.mean())}

    def may_defer_pi_old(self, global_step: int) -> bool:
        """log pi_old may come from the actor update's first forward (the actor decides whether
        its own settings allow it): not when the reward needs pi_old before the update (KL in the
        reward), nor when the advantages read pi_old (the optimal token baseline), nor when the actor
        does not update this step (critic warm-up), nor when the rollout correction needs the whole
        batch with pi_old before the update (rejection, batch-normalised weights)."""
        reads_pi_old = ESTIMATORS[self.cfg.adv_estimator].needs_sum_pi_squared
        batch_pass = self.correction is not None and self.correction.needs_batch_pass
        return (not self.cfg.use_kl_in_reward and not reads_pi_old and not batch_pass
                and global_step >= self.cfg.critic_warmup)

    def updates_actor(self, global_step: int) -> bool:
        return global_step >= self.cfg.critic_warmup
