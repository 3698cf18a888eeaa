"""The RL loop. One `step()`:

    rollout -> reward -> old/reference log-probs, values -> advantages
            -> critic update -> actor update -> sync weights into the rollout engine

Everything else (timing, logging, health warnings, checkpoints) happens around the
step in `_after_step`, so `step()` reads like the algorithm.
"""

from __future__ import annotations

import os

import torch

from verl.algorithms.dapo import dynamic_sampling_keep
from verl.algorithms.kl import build_kl_controller
from verl.algorithms.masked import masked_mean
from verl.batch import Batch
from verl.config import Config
from verl.data.prompts import build_prompt_loaders
from verl.models.loading import check_context_length, load_tokenizer, resolve_device, torch_dtype
from verl.rewards import build_reward_manager
from verl.rollout.base import SamplingParams
from verl.trainer.experience import add_advantages, policy_kl, shape_scores
from verl.trainer.inputs import attach_inputs
from verl.checkpoint.resume import resolve_resume
from verl.signals import Interrupted
from verl.trainer.timer import StageTimer
from verl.workers.actor import Actor
from verl.workers.critic import Critic
from verl.workers.reference import Reference


def build_rollout(config: Config, actor: Actor, tokenizer):
    """The generation engine named by `rollout.name` (no silent fallback between them)."""
    if config.rollout.name == "vllm":
        from verl.rollout.vllm_rollout import VLLMRollout

        return VLLMRollout.from_actor(actor.model, tokenizer, config)
    from verl.rollout.hf_rollout import HFRollout

    dtype = torch_dtype(config.model.dtype)
    return HFRollout(actor.model, tokenizer, config.rollout, compute_dtype=None if dtype == torch.float32 else dtype)


def build_critic(config: Config, device, actor: Actor, actor_tokenizer):
    """A value model on its own backbone (one with a different tokenizer works on text), or a
    value head on the actor's trunk (`critic.share_actor`)."""
    c = config.critic
    if c.share_actor:
        from verl.workers.shared_critic import SharedCritic

        return SharedCritic(config, actor)
    if c.name:
        critic_tok = load_tokenizer(c.name, "critic.name", c.trust_remote_code)
        if critic_tok.get_vocab() != actor_tokenizer.get_vocab():
            from verl.workers.text_critic import TextCritic

            return TextCritic(config, device, actor_tokenizer)
    return Critic(config, device)


class Trainer:
    def __init__(self, config: Config, *, reward_funcs=None, reward_weights=None, train_dataset=None,
                 eval_dataset=None):
        """`config`: a finished Config. The keywords (docs/python_api.md): Python reward callables and
        in-memory datasets, recorded in self.config by name / description (verl.trainer.inputs)."""
        config, self.inputs = attach_inputs(config, reward_funcs=reward_funcs, reward_weights=reward_weights,
                                            train_dataset=train_dataset, eval_dataset=eval_dataset)
        self.config = cfg = config
        torch.manual_seed(cfg.seed)
        self.device = resolve_device(cfg.device)
        # Where the run starts (checkpoint.resume), settled before any model loads so that a bad
        # path or a changed config fails in a second; RunHooks restores the state at the end.
        self.resume_point = resolve_resume(cfg)
        m = cfg.model
        self.tokenizer = load_tokenizer(m.tokenizer or m.name, "model.tokenizer" if m.tokenizer else "model.name",
                                        m.trust_remote_code, m.gguf_file)
        check_context_length(cfg)  # prompt + response tokens fit the model's positions (before weights load)
        # Data and reward functions before the models: a bad row or reward fails in seconds.
        self.train_data, self.val_rows = build_prompt_loaders(cfg, self.tokenizer, self.inputs.train_rows,
                                                              self.inputs.val_rows)
        self.reward = build_reward_manager(cfg.reward_fn, max_response_length=cfg.rollout.max_new_tokens,
                                           functions=self.inputs.functions)
        a = cfg.algorithm
        self.distributed = None
        if cfg.distributed.backend == "ray":  # the same roles, run by Ray worker groups (verl.distributed)
            from verl.distributed import build_distributed_workers

            self.distributed = build_distributed_workers(cfg, self.tokenizer)
            self.actor, self.reference, self.critic = (self.distributed.actor, self.distributed.reference,
                                                       self.distributed.critic)
            self.reward = self.distributed.reward or self.reward
        else:
            self.actor = Actor(cfg, self.device)
            self.reference = Reference(cfg, self.device, self.actor.model) if (a.use_kl_in_reward or a.use_kl_loss) else None
            self.critic = build_critic(cfg, self.device, self.actor, self.tokenizer) if a.adv_estimator == "gae" else None
        self.rollout = (self.distributed and self.distributed.rollout) or build_rollout(cfg, self.actor, self.tokenizer)
        self.kl_ctrl = build_kl_controller(a)
        self.sampling = SamplingParams.from_config(cfg.rollout)
        self.timer = StageTimer()
        self.global_step = 0
        self.output_dir = cfg.checkpoint.save_dir
        from verl.trainer.hooks import RunHooks

        self.hooks = RunHooks(self)  # logging, checkpoints, and the restore of resume_point

    # ------------------------------------------------------------------ the step
    def step(self) -> dict:
        """One iteration of the algorithm; returns metrics (seed's short keys + canonical names)."""
        self.hooks.before_step()
        self.timer.reset()
        self._seed_step()
        prompts = self.train_data.next_batch()
        batch, gen_metrics = self.timer("rollout", self.generate_experience, prompts)        # 1-2. sample, score
        self.rollout.sleep()  # hybrid engine: generation memory is freed while the models train
        pi_old_from_update = self._pi_old_from_update(batch)
        if not pi_old_from_update:
            batch.old_log_probs, entropy = self.timer("old_log_prob", self.actor.compute_log_probs, batch)  # 3.
        if self.reference is not None:
            batch.ref_log_probs = self.timer("ref_log_prob", self.reference.compute_log_probs, batch)
        if self.critic is not None:
            batch.values = self.timer("values", self.critic.compute_values, batch)
        batch, adv_metrics = self.timer("advantages", add_advantages, batch, self.config.algorithm,
                                        self.kl_ctrl.value)                                       # 4.
        critic_metrics = self.timer("update_critic", self.critic.update, batch) if self.critic else {}  # 5.
        actor_metrics = (self.timer("update_actor", self.actor.update, batch)                    # 6.
                         if self.global_step >= self.config.algorithm.critic_warmup else {})
        if pi_old_from_update:  # 3'. log pi_old (and the entropy) came from the update's own forward
            batch.old_log_probs, entropy = self.actor.last_pi_old
        sync_metrics = self.timer("update_weights", self.rollout.sync_weights, self.actor.model)  # 7.
        self.kl_ctrl.update(policy_kl(batch), n_steps=len(batch))
        self.global_step += 1
        self._last_batch = batch
        metrics = self._summarize(batch, entropy, gen_metrics, adv_metrics, critic_metrics, actor_metrics,
                                  sync_metrics)
        return self.hooks.after_step(metrics)

    def train(self) -> dict:
        """Run the remaining steps to `training.total_steps` with a progress bar."""
        metrics = {}
        self.hooks.before_training()
        while self.global_step < self.config.training.total_steps and not self.hooks.finished:
            try:
                metrics = self.step()  # stops early when training.max_minutes is spent
            except Interrupted as exc:  # a stop request cut a wait short (verl/signals.py)
                self.hooks.stop_mid_step(exc)  # saves the last completed step, raises StopTraining
        return metrics

    # ----------------------------------------------------------------- stages
    def generate_experience(self, prompts: Batch) -> tuple[Batch, dict]:
        """Sample n responses per prompt and score them. With dynamic sampling (DAPO),
        groups whose rewards are all equal carry no signal: drop them and sample more
        prompts until the batch is full or `max_rounds` extra rounds were spent."""
        ds = self.config.algorithm.dynamic_sampling
        batch = self._sample_and_score(prompts)
        metrics = {}
        if ds.enable:
            want = len(batch)
            keep = dynamic_sampling_keep(batch.scores, batch.group_id)
            kept, dropped, rounds = [batch.select(keep)], int((~keep).sum()), 0
            while sum(len(b) for b in kept) < want and rounds < ds.max_rounds:
                rounds += 1
                more = self._sample_and_score(self.train_data.next_batch())
                keep = dynamic_sampling_keep(more.scores, more.group_id)
                kept.append(more.select(keep))
                dropped += int((~keep).sum())
            merged = Batch.concat(kept)
            if len(merged) >= want:
                batch = merged.select(range(want))
            elif len(merged) > 0:
                # Out of rounds: train on the informative groups we have (whole groups only).
                batch = merged
            metrics.update({"rollout/dynamic_dropped": float(dropped), "rollout/dynamic_rounds": float(rounds)})
        if self.config.algorithm.mask_truncated:
            keep_rows = torch.tensor([0.0 if t else 1.0 for t in batch.truncated]).unsqueeze(1)
            batch.response_mask = batch.response_mask * keep_rows
        return batch, metrics

    def _sample_and_score(self, prompts: Batch) -> Batch:
        batch = self.rollout.generate(prompts, self.sampling)
        batch.scores, self._reward_metrics = self.timer("reward", self.reward.score, batch)
        if self.config.algorithm.adv_estimator == "remax":
            # ReMax baseline: the reward of the greedy answer to the same prompt.
            greedy = self.rollout.generate(prompts, self._greedy_sampling())
            base, _ = self.timer("reward", self.reward.score, greedy)
            batch.baseline_scores = base.repeat_interleave(self.sampling.n)
        batch.scores, shaping = shape_scores(batch, self.config.algorithm, self.sampling.max_new_tokens)
        self._reward_metrics.update(shaping)
        return batch

    def _greedy_sampling(self) -> SamplingParams:
        s = SamplingParams.from_config(self.config.rollout)
        s.greedy, s.n = True, 1
        return s

    def _pi_old_from_update(self, batch: Batch) -> bool:
        """`training.old_log_probs_from_update`: with one optimizer step per batch, pi_old is the
        policy the actor update starts from, so that update's first forward yields log pi_old
        (detached: ratio 1, the same gradient) and the separate no-grad pass is skipped. Not when
        something needs pi_old before the update (KL in the reward), the update is skipped
        (critic warm-up), or the actor is sharded across processes."""
        t, a = self.config.training, self.config.algorithm
        return (t.old_log_probs_from_update and t.num_epochs == 1 and t.mini_batch_size >= len(batch)
                and not a.use_kl_in_reward and self.global_step >= a.critic_warmup and self.distributed is None)

    def _seed_step(self) -> None:
        """Each step's randomness derives from (seed, step): reruns and resumes sample alike."""
        torch.manual_seed(self.config.seed * 1_000_003 + self.global_step)

    # ---------------------------------------------------------------- metrics
    def _summarize(self, batch, entropy, *parts) -> dict:
        mask = batch.response_mask
        lengths = batch.attention_mask[:, batch.prompt_length:].sum(dim=1).float()
        n_tokens = float(batch.attention_mask.sum())
        m = {
            "reward/mean": float(batch.scores.mean()),
            "reward/max": float(batch.scores.max()),
            "reward/min": float(batch.scores.min()),
            "actor/kl": policy_kl(batch),
            "actor/entropy": float(masked_mean(entropy, mask)) if mask.sum() > 0 else 0.0,
            "response_length/mean": float(lengths.mean()),
            "response_length/max": float(lengths.max()),
            "response_length/clip_ratio": float(sum(batch.truncated) / max(1, len(batch))),
        }
        if batch.rollout_log_probs is not None:
            # Engine vs actor log-probs on the sampled tokens: large means stale weights.
            diff = (batch.rollout_log_probs - batch.old_log_probs).abs()
            m["rollout/logprob_diff"] = float(masked_mean(diff, mask)) if mask.sum() > 0 else 0.0
        m.update(self._reward_metrics)
        for part in parts:
            m.update(part)
        m.update(self.timer.metrics())
        m["perf/tokens_per_s"] = n_tokens / max(m["timing_s/step"], 1e-9)
        m["perf/total_tokens"] = n_tokens
        m["training/global_step"] = float(self.global_step)
        return m

    def last_samples(self, k: int) -> list[dict]:
        """A few (prompt, response, reward) triples of the last step, for the sample log."""
        b = self._last_batch
        return [{"prompt": b.prompt_text[i], "response": b.response_text[i], "reward": float(b.scores[i])}
                for i in range(min(k, len(b)))]

    # ------------------------------------------------------------------ saving
    def save_actor(self, path: str) -> str:
        """Hugging Face folder (safetensors + tokenizer) loadable by AutoModelForCausalLM and vLLM."""
        from verl.checkpoint.model_files import save_hf_model

        return save_hf_model(self.actor.model, self.tokenizer, path)


def create_trainer(config: Config | str, *, reward_funcs=None, reward_weights=None, train_dataset=None,
                   eval_dataset=None) -> Trainer:
    """`create_trainer(load_config("config.yaml"))`; a path is loaded for you. The keywords are
    Trainer's (docs/python_api.md)."""
    if isinstance(config, (str, os.PathLike)):
        from verl.config import load_config

        config = load_config(str(config))
    return Trainer(config, reward_funcs=reward_funcs, reward_weights=reward_weights, train_dataset=train_dataset,
                   eval_dataset=eval_dataset)
