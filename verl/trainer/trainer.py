"""The RL algorithm. One `step()`:

    rollout -> reward -> old/reference log-probs, values -> advantages
            -> critic update -> actor update -> sync weights into the rollout engine

Each stage is a method timed by @stage; what only some algorithms do (ReMax's greedy
rollout, DAPO's group filtering, truncation masking) is decided by AlgorithmHooks; where the
roles run is the backend's business (verl/backends). `algorithm_step()` runs them and returns a
StepResult, and does nothing else. The loop around it (logging, validation, health checks,
checkpoints, stops, the restore of where a run starts) is the Run (verl/trainer/run.py), built at
the end of __init__ from this Trainer's parts; the Run knows the step only as a callable.

`step()` and `train()` are the Run's: the seed's own loop, `for _ in range(total_steps): metrics =
trainer.step()`, logs every step and saves the final actor, so the user's handle must reach the Run.
"""

from __future__ import annotations

import os
import threading
from typing import Optional

import torch

from verl.algorithms.advantages import ESTIMATORS
from verl.algorithms.kl import build_kl_controller
from verl.algorithms.off_policy import engine_kl, ratio_quantile
from verl.algorithms.masked import masked_mean
from verl.algorithms.off_policy import correct, correction_spec
from verl.algorithms.pf_ppo import pf_ppo_indices
from verl.backends import build_backend
from verl.batch import Batch
from verl.checkpoint.full_state import RunState
from verl.checkpoint.run_saver import RunSaver
from verl.checkpoint.resume import ResumePoint, resolve_resume
from verl.config import Config
from verl.data.prompts import build_prompt_loaders
from verl.models.loading import check_context_length, load_tokenizer, resolve_device
from verl.rewards import build_reward_manager
from verl.roles import PiOld
from verl.rollout.agent_parts import build_multi_turn, load_agent_parts
from verl.trainer.advantage_math import advantage_values, policy_kl
from verl.trainer.algorithm_hooks import AlgorithmHooks
from verl.trainer.counters import RunCounters
from verl.trainer.experience_source import build_experience_source, run_engines
from verl.trainer.inputs import attach_inputs
from verl.trainer.rollout_stage import RolloutStage
from verl.trainer.sleep_policy import SleepPolicy
from verl.trainer.stage_memory import CudaCounters, StageMemory
from verl.trainer.step_sampling import StepSampling
from verl.trainer.stage_fields import check_filled
from verl.trainer.step_result import StepResult
from verl.trainer.step_seed import step_seed
from verl.trainer.timer import StageTimer, stage
from verl.trainer.validation import Validator


class Trainer:
    def __init__(self, config: Config, *, reward_funcs=None, reward_weights=None, train_dataset=None,
                 eval_dataset=None, resume_point: ResumePoint | None = None):
        """`config`: a finished Config. The keywords (docs/python_api.md): Python reward callables and
        in-memory datasets, recorded in self.config by name / description (verl.trainer.inputs);
        `resume_point`: where the run starts, as the launcher resolved it (None: resolved here)."""
        config, self.inputs = attach_inputs(config, reward_funcs=reward_funcs, reward_weights=reward_weights,
                                            train_dataset=train_dataset, eval_dataset=eval_dataset)
        self.config = cfg = config
        torch.manual_seed(cfg.seed)
        self.device = resolve_device(cfg.device)
        # Where the run starts (checkpoint.resume), settled before any model loads so that a bad
        # path or a changed config fails in a second; the Run restores the state.
        self.resume_point = resume_point if resume_point is not None else resolve_resume(cfg)
        m = cfg.model
        self.tokenizer = load_tokenizer(m.tokenizer or m.name, "model.tokenizer" if m.tokenizer else "model.name",
                                        m.trust_remote_code, m.gguf_file)
        check_context_length(cfg)  # prompt + response tokens fit the model's positions (before weights load)
        # Tools, data and reward functions before the models: a bad tool, row or reward fails in seconds.
        self.agent_parts = load_agent_parts(cfg.rollout)  # multi-turn: tools and environment, loaded once
        self.tool_schemas = self.agent_parts.tool_schemas if self.agent_parts else None
        self.train_data, self.val_rows = build_prompt_loaders(cfg, self.tokenizer, self.inputs.train_rows,
                                                              self.inputs.val_rows, tools=self.tool_schemas)
        self.reward = build_reward_manager(cfg.reward_fn, max_response_length=cfg.rollout.response_budget,
                                           functions=self.inputs.functions)
        self.reward_weights = self.reward.weights  # the components' weights (GDPO combines its parts with them)
        # the rollout correction (algorithm.rollout_correction or rollout.tis_cap): verl/algorithms/off_policy.py
        self.correction = correction_spec(cfg.rollout, cfg.algorithm.rollout_correction)
        self.sampling = StepSampling(cfg.rollout, cfg.async_training.enable,  # with or without engine log-probs
                                     correction=self.correction.enabled, seed=cfg.seed)
        self.algorithm = AlgorithmHooks(cfg.algorithm, self.sampling.base, self.correction)  # special cases
        # The roles, in this process or as Ray worker groups: the same methods either way.
        self.backend = build_backend(cfg)
        roles = self.backend.build_roles(cfg, self.tokenizer, self.device, self.reward)
        self.actor, self.reference, self.critic, self.teacher = roles.actor, roles.reference, roles.critic, roles.teacher
        self.reward = roles.reward
        self.kl_ctrl = build_kl_controller(cfg.algorithm)
        # The asynchronous producer's generation and syncs, and this thread's validation, one at a time.
        engine_lock = threading.RLock()
        if self.agent_parts:  # the engine any backend built, in this process or as vLLM replicas
            roles.rollout = build_multi_turn(roles.rollout, self.tokenizer, cfg, self.agent_parts)
        self.rollout_engine = roles.rollout  # the engine itself, under any wrapper of the asynchronous sources
        stage_engine, self.rollout = run_engines(roles.rollout, cfg.async_training, engine_lock)
        self.timer = StageTimer(StageMemory(CudaCounters(self.device, unbacked=self.rollout.unbacked_bytes))
                                if self.device.type == "cuda" else None)
        self.counters = RunCounters()
        self.rollout_stage = RolloutStage(
            stage_engine, self.reward, self.sampling, self.algorithm, self.train_data, timer=self.timer,
            keeps_reward_parts=ESTIMATORS[cfg.algorithm.adv_estimator].reads_reward_parts)
        workers = [w for w in (self.actor, self.reference, self.critic, self.teacher) if w is not None]
        self.experience = build_experience_source(  # now, or a producer thread ahead (async_training)
            cfg, self.rollout_stage, engine_lock, model=self.actor.model, counters=self.counters,
            sleep=SleepPolicy.for_run(cfg, workers, stage_engine), device=self.device, tokenizer=self.tokenizer)
        self._parts: dict = {}  # the current step's metrics, by stage
        # What a full checkpoint holds, each part saving its own state (verl/checkpoint/full_state.py).
        self.run_state = RunState(self.actor, self.critic, self.rollout, self.experience.data, self.kl_ctrl,
                                  self.counters, self.tokenizer, cfg)
        self.output_dir = cfg.checkpoint.save_dir
        self.saver = RunSaver(self.output_dir, self.run_state, self.backend.state_io, cfg.checkpoint.keep_last)
        from verl.trainer.run import say

        self.validator = Validator(self.rollout, self.reward, self.tokenizer, cfg, self.val_rows, self.tool_schemas,
                                   say=say)
        self.run = self._new_run()  # the restore of resume_point, the held folder, the logs

    @property
    def global_step(self) -> int:
        return self.counters.global_step

    def close(self) -> None:
        """The end of this trainer: its run closes (the asynchronous producer, the logs, the folder) and the
        backend releases what it started (Ray's worker processes and their devices), so that another trainer
        in this process can take them. Calling it again does nothing more. `with create_trainer(cfg) as t:`
        closes on leaving the block."""
        self.run.close()
        self.backend.shutdown()

    def __enter__(self) -> "Trainer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ the step
    def step(self) -> dict:
        """One step with the run's cadence around it (logs, validation, checkpoints, the final save at
        training.total_steps); its metrics, canonical names and the seed's short ones."""
        return self.run.step()

    def train(self) -> dict:
        """The remaining steps to `training.total_steps` with a progress bar, logs and checkpoints;
        the last step's metrics ({} when there was nothing to train)."""
        return self.run.train()

    def algorithm_step(self) -> StepResult:
        """One iteration of the algorithm: its metrics and the batch it trained on. Nothing is logged or
        saved here: the Run calls this and does that."""
        self.timer.reset()
        self._seed_step()
        experience = self.experience.next()                               # 1-2. sample, score (now or ahead)
        batch = experience.batch
        first = self.compute_old_log_probs(batch)                         # 3. log pi_old, log pi_ref, V
        pass_mask = batch.response_mask  # the rows of that pass: this batch, before pf_ppo resamples it
        self.compute_ref_log_probs(batch)
        self.compute_teacher_log_probs(batch)
        self.compute_values(batch)
        score_mask = self.correct_rollout(batch)                          # rejection, importance weights
        batch = self.compute_advantages(batch, score_mask)                # 4. (pf_ppo: a resampled batch)
        experience.batch = batch  # the step's metrics are of the batch trained on, as real verl's
        self.update_critic(batch)                                         # 5.
        pi_old = self.update_actor(batch, first)                          # 6. (a deferred pi_old: from it)
        self.train_data.after_step(batch, self.global_step + 1)           # a curriculum sampler's update(batch)
        self._parts["sync"] = self.experience.after_update()              # 7. new weights -> engine
        # the adaptive coefficient steers the KL the reward was penalised with (when it is)
        measured = self._parts.get("advantages", {}).get("actor/kl_in_reward")
        self.kl_ctrl.update(policy_kl(batch) if measured is None else measured, n_steps=len(batch))
        self.counters.global_step += 1
        entropy_mask = pass_mask if pi_old is first else batch.response_mask  # deferred: the trained rows'
        return StepResult(self._summarize(experience, pi_old.entropy if pi_old else None, entropy_mask), batch)

    def _new_run(self):
        """The Run of this Trainer's parts (verl/trainer/run.py): it restores where the run starts, holds the
        run folder, logs, validates, checkpoints and stops around each algorithm_step()."""
        from verl.trainer.run import Run

        return Run(self.algorithm_step, config=self.config, output_dir=self.output_dir, counters=self.counters,
                   run_state=self.run_state, saver=self.saver, validator=self.validator, experience=self.experience,
                   resume_point=self.resume_point, device=self.device, memory=self.timer.memory)

    # ----------------------------------------------------------------- stages
    def compute_old_log_probs(self, batch: Batch) -> Optional[PiOld]:
        """log pi_old now (batch.old_log_probs, and sum_pi_squared where the estimator reads it; the record
        returned holds the entropy too), unless (the algorithm allowing, the actor deciding) it comes from
        the update's own first forward: then None, and there is no stage to time."""
        if self.correction.bypass:  # the engine's log-probs are pi_old: nothing to compute
            if batch.rollout_log_probs is None:
                raise RuntimeError("algorithm.rollout_correction.bypass_mode: the engine returned no log-probs "
                                   "of the sampled tokens")
            batch.old_log_probs = batch.rollout_log_probs
            return PiOld(batch.rollout_log_probs, None)
        may_defer = self.algorithm.may_defer_pi_old(self.global_step)
        if self.actor.defers_old_log_probs(batch, may_defer):
            return None
        return self._old_log_probs(batch, may_defer)

    @stage("old_log_prob")
    def _old_log_probs(self, batch: Batch, may_defer: bool) -> PiOld:
        pi_old = self.actor.compute_old_log_probs(batch, may_defer)
        batch.old_log_probs, batch.sum_pi_squared = pi_old.log_probs, pi_old.sum_pi_squared
        return pi_old

    @stage("ref_log_prob")
    def compute_ref_log_probs(self, batch: Batch) -> None:
        if self.reference is not None:
            batch.ref_log_probs = self.reference.compute_log_probs(batch)

    @stage("teacher_log_prob")
    def compute_teacher_log_probs(self, batch: Batch) -> None:
        if self.teacher is not None:
            batch.teacher_log_probs = self.teacher.compute_log_probs(batch)

    @stage("values")
    def compute_values(self, batch: Batch) -> None:
        if self.critic is not None:
            batch.values = self.critic.compute_values(batch)

    def correct_rollout(self, batch: Batch):
        """Decoupled rollout correction of the whole batch, pi_old against the engine: rejected tokens leave
        batch.response_mask, the weights go to batch.is_weights (verl/algorithms/off_policy.py). Returns the
        mask before the rejection (the rewards are placed on it), or None when nothing was done: bypass mode
        corrects per micro-batch in the update, and pi_old taken from the update's first forward is only
        allowed for weights the actor then computes per micro-batch."""
        spec = self.correction
        if (not spec.enabled or spec.bypass or batch.old_log_probs is None
                or batch.rollout_log_probs is None):
            return None
        return self._correct_rollout(batch)

    @stage("rollout_correction")
    def _correct_rollout(self, batch: Batch):
        before = batch.response_mask
        weights, batch.response_mask, self._parts["rollout_correction"] = correct(
            batch.old_log_probs, batch.rollout_log_probs, before, self.correction)
        batch.is_weights = weights
        return before

    @stage("advantages")
    def compute_advantages(self, batch: Batch, score_mask=None) -> Batch:
        """Fills the batch's rewards, advantages and returns; returns the batch the update trains on: this one,
        or with algorithm.pf_ppo its rows resampled by their scores (verl/algorithms/pf_ppo.py)."""
        a = self.config.algorithm
        v = advantage_values(batch, a, self.kl_ctrl.value, self.reward_weights, score_mask=score_mask)
        batch.token_level_scores, batch.token_level_rewards = v.token_level_scores, v.token_level_rewards
        batch.advantages, batch.returns, self._parts["advantages"] = v.advantages, v.returns, v.metrics
        check_filled(batch, "advantages")
        if not a.pf_ppo.enable:
            return batch
        index = pf_ppo_indices(batch.token_level_scores.sum(dim=1), a.pf_ppo.reweight_method, a.pf_ppo.weight_pow)
        self._parts["advantages"]["pf_ppo/unique_samples"] = float(len(set(index.tolist())))
        return batch.select(index)

    @stage("update_critic")
    def update_critic(self, batch: Batch) -> None:
        self._parts["critic"] = self.critic.update(batch) if self.critic is not None else {}

    @stage("update_actor")
    def update_actor(self, batch: Batch, pi_old: Optional[PiOld]) -> Optional[PiOld]:
        """The policy update (none in critic warm-up); returns pi_old: the one given, or with pi_old
        deferred (None given) the one the update's first forward took (batch.old_log_probs then set)."""
        with self.experience.updating():  # an asynchronous rollout does not read the weights meanwhile
            if not self.algorithm.updates_actor(self.global_step):
                self._parts["actor"] = {}
            elif pi_old is None:
                self._parts["actor"], pi_old = self.actor.update_taking_pi_old(batch)
                batch.old_log_probs = pi_old.log_probs
            else:
                self._parts["actor"] = self.actor.update(batch)
        if pi_old is not None:  # critic warm-up with pi_old deferred: none was taken (nothing reads it)
            check_filled(batch, "old_log_prob")
        return pi_old

    def _seed_step(self) -> None:
        """Each step's randomness derives from (seed, step): reruns and resumes sample alike."""
        step_seed(self.config.seed, self.global_step)
        self._parts = {}  # metrics of the stages, by stage

    # ---------------------------------------------------------------- metrics
    def _summarize(self, experience, entropy, entropy_mask) -> dict:
        """The step's metrics; entropy: the policy's (B, R) from the pi_old pass (None in bypass mode), over
        `entropy_mask`, that pass's rows (the batch before algorithm.pf_ppo resamples it, as real verl logs it)."""
        batch = experience.batch
        mask = batch.response_mask
        lengths = batch.attention_mask[:, batch.prompt_length:].sum(dim=1).float()
        n_tokens = float(batch.attention_mask.sum())
        m = {
            "reward/mean": float(batch.scores.mean()),
            "reward/max": float(batch.scores.max()),
            "reward/min": float(batch.scores.min()),
            "actor/kl": policy_kl(batch),
            "response_length/mean": float(lengths.mean()),
            "response_length/max": float(lengths.max()),
            "response_length/clip_ratio": float(sum(batch.truncated) / max(1, len(batch))),
        }
        if entropy is not None:  # none in bypass mode (no pi_old pass)
            m["actor/entropy"] = float(masked_mean(entropy, entropy_mask)) if entropy_mask.sum() > 0 else 0.0
        if batch.rollout_log_probs is not None and not self.correction.bypass:  # bypass: pi_old is the engine's
            # Engine vs actor log-probs on the sampled tokens: large means stale weights.
            diff = (batch.rollout_log_probs - batch.old_log_probs).abs()
            m["rollout/logprob_diff"] = float(masked_mean(diff, mask)) if mask.sum() > 0 else 0.0
            m["rollout/engine_kl"] = engine_kl(batch.old_log_probs, batch.rollout_log_probs, mask)
            m["rollout/is_ratio_p999"] = ratio_quantile(batch.old_log_probs, batch.rollout_log_probs, mask)
        m.update(experience.metrics)
        for name in ("rollout_correction", "advantages", "critic", "actor", "sync"):
            m.update(self._parts.get(name) or {})
        m.update(self.timer.metrics())
        m["perf/tokens_per_s"] = n_tokens / max(m["timing_s/step"], 1e-9)
        m["perf/total_tokens"] = n_tokens
        m["training/global_step"] = float(self.global_step)
        return m

    # ------------------------------------------------------------------ saving
    def save_actor(self, path: str) -> str:
        """Hugging Face folder (safetensors + tokenizer) loadable by AutoModelForCausalLM and vLLM."""
        from verl.checkpoint.model_files import save_hf_model

        return save_hf_model(self.actor.model, self.tokenizer, path)


def create_trainer(config: Config | str, *, reward_funcs=None, reward_weights=None, train_dataset=None,
                   eval_dataset=None, resume_point: ResumePoint | None = None) -> Trainer:
    """`create_trainer(load_config("config.yaml"))`; a path is loaded for you. The keywords are
    Trainer's (docs/python_api.md); the launcher passes the resume_point it resolved."""
    if isinstance(config, (str, os.PathLike)):
        from verl.config import load_config

        config = load_config(str(config))
    return Trainer(config, reward_funcs=reward_funcs, reward_weights=reward_weights, train_dataset=train_dataset,
                   eval_dataset=eval_dataset, resume_point=resume_point)
