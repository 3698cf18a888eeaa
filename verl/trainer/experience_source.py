"""Where a step's experience comes from: generated now (synchronous), or by a producer thread that
runs ahead of the update by at most `async_training.max_staleness` policy versions (docs/async.md).

    stage_engine, trainer_engine = run_engines(raw_engine, config.async_training, lock)
    source = build_experience_source(config, stage, lock, model=..., counters=..., ...)
    experience = source.next()           # 1-2. Experience(batch, metrics, version): a scored batch
    with source.updating(): ...          # 6. the actor update (the producer never syncs mid-update)
    metrics = source.after_update()      # 7. the new weights reach the engine: now, or before its next batch

Every source runs a RolloutStage (verl/trainer/rollout_stage.py); the asynchronous one
(verl/trainer/async_experience.py) is composed with a generation mode (whole batches, segments, stream).

Synchronous: generate with the last update's weights, put the engine to sleep for the update
(verl/trainer/sleep_policy.py), sync after it (the hybrid engine).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from verl.batch import Batch
from verl.trainer.locked_engine import LockedEngine
from verl.trainer.timer import stage


@dataclass
class Experience:
    """One step's scored batch, its rollout metrics, and the weights version that generated it (the
    updates its weights had seen; per sample extra["policy_version"] in asynchronous mode)."""

    batch: Batch
    metrics: dict
    version: int


class SyncExperience:
    def __init__(self, stage, counters, sleep, model, verify_every: int = 0):
        """stage: the RolloutStage; counters: the run's RunCounters (the step being trained); sleep: the
        SleepPolicy; model: the actor's module (synced into the engine after each update); verify_every:
        rollout.verify_sync_every (the first sync and every that many steps: verl/rollout/sync_check.py)."""
        self.stage, self.counters, self.sleep, self.model = stage, counters, sleep, model
        self.verify_every, self._verified_once, self._said_unverifiable = verify_every, False, False
        self.data = stage.prompts  # what a checkpoint saves of the prompt stream
        self.timer = stage.timer  # after_update is the timed stage update_weights

    def next(self) -> Experience:
        step = self.counters.global_step
        batch, metrics = self.stage.run(self.stage.prompts.next_batch(), step)
        if self.sleep.wanted(batch):
            self.stage.engine.sleep()  # hybrid engine: generation memory is freed while the models train
        return Experience(batch, metrics, step)

    def updating(self):
        return contextlib.nullcontext()

    @stage("update_weights")
    def after_update(self) -> dict:
        """The actor's new weights into the engine; the sync's metrics (and the check's, on its steps)."""
        metrics = self.stage.engine.sync_weights(self.model)
        step = self.counters.global_step + 1  # the step whose update was just synced
        if self.verify_every and (not self._verified_once or step % self.verify_every == 0):
            metrics.update(self._verify(step))
        return metrics

    def _verify(self, step: int) -> dict:
        from verl.rollout.sync_check import verify_sync
        from verl.trainer.invariants import InvariantBroken

        problem, compared = verify_sync(self.stage.engine, self.model)
        self._verified_once = True
        if problem:
            raise InvariantBroken(f"step {step}: after the weight sync, {problem}: the engine does not generate with "
                                  "the actor's weights (a LoRA delta not merged into the sync, a weight the engine's "
                                  "loader ignored); rollout.verify_sync_every=0 runs anyway")
        if not compared and not self._said_unverifiable and hasattr(self.stage.engine, "read_weights"):
            self._said_unverifiable = True
            if getattr(self.stage.engine, "weight_copy", True):  # an HF engine without a copy has nothing to check
                print("note: rollout.verify_sync_every: the engine's weights could not be read back by their names; "
                      "the weight sync is not verified", flush=True)
        return {"rollout/sync_verified_elements": float(compared)}

    def close(self) -> None:
        pass


def run_engines(engine, async_cfg, lock) -> tuple:
    """(the rollout stage's engine, the engine the trainer's thread calls: validation, the final actor's
    load, the run state). Synchronous: the engine, both. Asynchronous: the stage's is the engine (with
    streaming, the step-by-step vLLM driver over it, which validation then submits to beside the producer's
    batches), the trainer's the same behind `lock`, which the producer takes too."""
    if not async_cfg.enable:
        return engine, engine
    if async_cfg.streaming:
        from verl.rollout.vllm_stream import VLLMStream

        engine = VLLMStream(engine)
    return engine, LockedEngine(engine, lock, async_cfg.timeout_s)


def build_experience_source(config, stage, lock, *, model, counters, sleep, device, tokenizer):
    """The source of config.async_training over `stage` (its engine: run_engines', whose `lock` the
    asynchronous producer takes)."""
    a = config.async_training
    if not a.enable:
        return SyncExperience(stage, counters, sleep, model, config.rollout.verify_sync_every)
    from verl.trainer.async_experience import AsyncExperience

    return AsyncExperience(stage, lock, model=model, counters=counters, cfg=a, device=device, tokenizer=tokenizer)
