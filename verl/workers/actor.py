"""Actor: the policy being trained. Computes response log-probs and runs the policy update.

`actor.model` is a plain Hugging Face causal LM (the seed calls `.generate` on it), or a
peft PeftModel of one with `model.lora.rank > 0` (`.generate` works the same).
Parameters are fp32 master weights; `model.dtype: bfloat16` runs forwards under autocast,
or with `model.mixed_precision: param_copy` on a bf16 copy of them (`verl.workers.param_copy`);
`model.mixed_precision: pure` holds and steps the weights in bf16 with no fp32 master.
With LoRA the frozen base stays in `model.dtype` and only the float32 adapters train.
Memory/speed switches (each with a plain fallback): `training.use_packed_samples`
(`verl.workers.packing`), `training.max_tokens_per_micro_batch`, `training.offload_optimizer`
(`verl.workers.offload`), `model.enable_gradient_checkpointing`, `model.torch_compile`
(`verl.workers.compile`). On a CUDA device without `training.max_tokens_per_micro_batch`
micro-batches are sized to the free memory (`verl.workers.memory_budget`).

What the trainer calls (a `critic.share_actor` run gets an `ActorWithValueHead`,
`verl.workers.shared_critic`, with the same methods):

    Actor.from_config(config, device)               the sections it needs, picked from Config
    actor.defers_old_log_probs(batch, may_defer)     True: pi_old will come from the update
    actor.compute_old_log_probs(batch, may_defer)    PiOld(log_probs, entropy, ...) (B, R); None deferred
    actor.update(batch) -> metrics                   fills batch.old_log_probs when it was deferred
    actor.update_taking_pi_old(batch)                (metrics, PiOld) when pi_old was deferred
    actor.model / state_dict() / load_state_dict()   weights; optimizer, scheduler, shuffler
(the ActorRole protocol of verl/roles.py)
"""

from __future__ import annotations

import contextlib
from typing import Optional

import torch

from verl.algorithms.advantages import ESTIMATORS
from verl.algorithms.aggregation import aggregate_loss
from verl.algorithms.distillation import distillation_token_losses
from verl.algorithms.kl import kl_penalty
from verl.algorithms.off_policy import CorrectionSpec, correct, correction_spec
from verl.algorithms.policy_losses import compute_policy_loss
from verl.batch import Batch
from verl.roles import PiOld
from verl.models.loading import load_causal_lm, torch_dtype
from verl.models.lora import apply_lora, base_model, lora_enabled
from verl.models.moe import MoeRouting
from verl.models.vision import freeze_vision_tower
from verl.workers.compile import CompiledLayers, note_compiled_peft_layers
from verl.workers.logprobs import head_log_probs, head_sum_pi_squared, lm_head, response_hidden
from verl.workers.memory_budget import TokenBudget, pending_bytes
from verl.workers.micro_batches import MicroBatching, on_device, pad_response_columns
from verl.workers.offload import OptimizerOffload
from verl.workers.optim import TrainingState, build_optimizer, build_scheduler
from verl.workers.moe_forward import MoeForward, token_experts
from verl.workers.packing import causal_lm_trunk
from verl.workers.param_copy import ParamCopy
from verl.workers.update_loop import MicroLoss, UpdateResult, run_update


class Actor(TrainingState):
    param_copy_supported = True  # model.mixed_precision: param_copy (single-process only)

    def __init__(self, model_cfg, training_cfg, algorithm_cfg, device: torch.device, micro: MicroBatching, *,
                 seed: int, max_response_len: int, temperature: float = 1.0,
                 correction: CorrectionSpec | None = None, distillation=None,
                 model: torch.nn.Module | None = None, adapt_to_memory: bool = True, record_routing: bool = False):
        """model_cfg, training_cfg, algorithm_cfg: the config's model, training and algorithm
        sections; max_response_len, temperature: rollout.max_new_tokens, the sampling temperature;
        correction: the rollout correction (verl.algorithms.off_policy; None: off); seed: the
        mini-batch shuffler's. adapt_to_memory: a token budget from the free GPU memory and the
        out-of-memory retry (off on FSDP ranks). distillation: the config's distillation section (its
        loss joins the update's when enabled). record_routing: the pi_old pass keeps each token's experts in
        batch.routed_experts, for the update to replay (rollout.routing_replay: pi_old; verl/models/moe.py)."""
        self.training, self.algorithm = training_cfg, algorithm_cfg
        self.distillation = distillation if distillation is not None and distillation.enable else None
        self.device = device
        self.micro = micro
        self.compute_dtype = torch_dtype(model_cfg.dtype)
        lora = lora_enabled(model_cfg)
        # Full fine-tuning keeps float32 master weights (model.mixed_precision: pure does not: the trained
        # weights are model.dtype); a LoRA base is frozen, so model.dtype.
        load_dtype = self.compute_dtype if lora or model_cfg.mixed_precision == "pure" else torch.float32
        self.model = model if model is not None else load_causal_lm(model_cfg, load_dtype, device_type=device.type)
        if model_cfg.freeze_vision_tower:  # before LoRA and the optimizer: the tower trains nowhere
            freeze_vision_tower(self.model)
        if lora:
            self.model = apply_lora(self.model, model_cfg.lora)
        if model_cfg.enable_gradient_checkpointing:
            self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.model.to(device)
        t = training_cfg
        self.packing_mode, self.micro = micro.with_packing(causal_lm_trunk(self.model), "actor")
        # model.mixed_precision: param_copy -- forwards and backwards run on a model.dtype copy
        # of the float32 master weights (verl.workers.param_copy); the optimizer keeps the master.
        use_copy = (self.param_copy_supported and model_cfg.mixed_precision == "param_copy" and not lora
                    and self.compute_dtype != torch.float32)
        self.param_copy = ParamCopy(self.model, self.compute_dtype) if use_copy else None
        self.fused = model_cfg.torch_compile
        self.compiled = CompiledLayers(self.param_copy.module if use_copy else self.model, model_cfg.torch_compile)
        if lora and self.compiled.enabled:
            note_compiled_peft_layers(self.model)
        # A frozen vision tower is left out of the optimizer (otherwise all parameters: the layout the
        # optimizer state of existing checkpoints has)
        params = self.trainable_parameters() if model_cfg.freeze_vision_tower else self.model.parameters()
        self.optimizer = build_optimizer(params, t.lr, t.weight_decay, device, t.weight_decay_1d)
        if self.param_copy is not None:
            self.param_copy.watch(self.optimizer)
        self.optimizer_offload = OptimizerOffload(self.optimizer, t.offload_optimizer and device.type != "cpu")
        self.scheduler = build_scheduler(self.optimizer, t)
        self.max_response_len, self.temperature = max_response_len, temperature
        self.correction = correction or CorrectionSpec()
        self.generator = torch.Generator().manual_seed(seed)  # mini-batch shuffling
        self.adapt_to_memory = adapt_to_memory
        self.budget = TokenBudget.maybe(
            "actor", device, micro, adapt_to_memory, base_model(self.model).config,
            lambda: pending_bytes(self.forward_model(), self.trainable_parameters(), self.optimizer,
                                  self.compute_dtype, training=True),
            training=True, lm_head=True, compute_dtype=self.compute_dtype, checkpointing=model_cfg.enable_gradient_checkpointing,
            chunk_size=t.logprob_chunk_size, keep_logits=t.logprob_keep_logits)
        self.record_routing = record_routing
        self._keep_pi_old = False  # during an update whose first forward yields pi_old

    @staticmethod
    def config_kwargs(config) -> dict:
        """The constructor's arguments from a whole Config (less device and model)."""
        r = config.rollout
        return dict(model_cfg=config.model, training_cfg=config.training, algorithm_cfg=config.algorithm,
                    micro=MicroBatching.from_training(config.training), seed=config.seed,
                    max_response_len=r.max_new_tokens, temperature=r.temperature or 1.0,
                    correction=correction_spec(r, config.algorithm.rollout_correction),
                    distillation=config.distillation, record_routing=r.routing_replay == "pi_old")

    @classmethod
    def from_config(cls, config, device: torch.device, model: torch.nn.Module | None = None, **kwargs) -> "Actor":
        """The actor `config` asks for: with critic.share_actor an `ActorWithValueHead`.
        kwargs: a subclass's own (rank, world_size) or adapt_to_memory."""
        if cls is Actor and config.critic.share_actor:
            from verl.workers.shared_critic import ActorWithValueHead

            return ActorWithValueHead.from_config(config, device, model, **kwargs)
        return cls(device=device, model=model, **cls.config_kwargs(config), **kwargs)

    def forward_model(self) -> torch.nn.Module:
        """The module forwards run on: the master model, or its up-to-date model.dtype copy."""
        return self.param_copy.synced() if self.param_copy is not None else self.model

    def trainable_parameters(self):
        return [p for p in self.model.parameters() if p.requires_grad]

    def _micro_batching(self) -> MicroBatching:
        """self.micro, with a token budget from the free GPU memory where the defaults leave it
        open (`verl.workers.memory_budget`)."""
        return self.micro if self.budget is None else self.budget.apply(self.micro)

    # ------------------------------------------------------------------ forward
    def _forward(self, mb: Batch, with_entropy: bool, with_sum_pi_squared: bool = False):
        """One trunk + LM head pass over a micro-batch -> (mb on the device, log-probs (b, r'),
        entropy (b, r'), zeros unless `with_entropy`, sum_v pi(v)^2 (b, r') or None unless
        `with_sum_pi_squared`: one more pass over the head, no-grad; the MoE layers' routing of the pass,
        a MoeForward, or None for a dense model), in the caller's grad mode. An MoE micro-batch with
        routed_experts is routed to them (routing replay, verl/models/moe.py)."""
        model = self.forward_model()
        routing = self._routing(model)
        with on_device(mb, self.device, self.micro.packed, self.compute_dtype, self.compiled) as (mb, packed):
            if routing:
                routing.replay(token_experts(mb.routed_experts, mb.attention_mask, packed))
            with routing.recording() if routing else contextlib.nullcontext() as rec:
                rh = response_hidden(model, mb.input_ids, mb.attention_mask, mb.position_ids, mb.response_length,
                                     packed=packed, packing_mode=self.packing_mode, multi_modal=mb.multi_modal)
            logp, ent = self._head_log_probs(model, rh, with_entropy)
            sq = None
            if with_sum_pi_squared:
                sq = rh.unpack(head_sum_pi_squared(rh.hidden, lm_head(model), self.temperature,
                                                   self.training.logprob_chunk_size))
            moe = MoeForward.of(routing, rec, mb.attention_mask, packed,
                                aux=self.training.router_aux_loss_coef > 0 and torch.is_grad_enabled())
        return mb, logp, ent, sq, moe

    def _end_replay(self) -> None:
        """The routers choose for themselves again (generation with the actor's module comes next). A
        replay stays set through each micro-batch's backward, so it ends after the pass, not the forward."""
        routing = getattr(self, "_routing_of_model", None)
        if routing:
            routing.replay(None)

    def _routing(self, model) -> MoeRouting:
        """The MoE routers of the module forwards run on (empty for a dense model), found once."""
        if getattr(self, "_routing_model", None) is not model:
            self._routing_model, self._routing_of_model = model, MoeRouting(model)
        return self._routing_of_model

    def _head_log_probs(self, model, rh, with_entropy: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """The chunked LM head over a trunk pass's response positions -> (b, r') each."""
        t = self.training
        lp, e = head_log_probs(rh.hidden, lm_head(model), rh.targets, self.temperature, t.logprob_chunk_size,
                               with_entropy, fused=self.fused, keep_logits=t.logprob_keep_logits)
        return rh.unpack(lp), rh.unpack(e)

    @torch.no_grad()
    def compute_log_probs(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """(log_probs (B, R), entropy (B, R)) of the sampled response tokens, on CPU."""
        logp, ent, _ = self._log_prob_pass(batch, with_sum_pi_squared=False)
        return logp, ent

    @torch.no_grad()
    def compute_log_probs_and_sum_pi_squared(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(log_probs, entropy, sum_v pi(v)^2), each (B, R) on CPU: the pi_old pass of the optimal token baseline
        (a Ray actor rank answers it for its rows)."""
        return self._log_prob_pass(batch, with_sum_pi_squared=True)

    @torch.no_grad()
    def _log_prob_pass(self, batch: Batch, with_sum_pi_squared: bool):
        """(log_probs, entropy, sum_v pi(v)^2 or None), each (B, R) on CPU, micro-batch by micro-batch."""
        columns: list = [[], [], []]
        routed = []
        for mb in self._micro_batching().split(batch):
            full = mb
            _, *parts, moe = self._forward(mb, with_entropy=True, with_sum_pi_squared=with_sum_pi_squared)
            for out, part in zip(columns, parts):
                if part is not None:
                    out.append(pad_response_columns(part.float(), batch.response_length))
            if self.record_routing and moe is not None:  # this pass's routing, for the update to replay
                routed.append(moe.experts_like(full))
        self._end_replay()
        if routed:
            batch.routed_experts = torch.cat(routed)
        # One device->host copy at the end: no sync between micro-batches; row order kept.
        return tuple(torch.cat(c).cpu() if c else None for c in columns)

    # --------------------------------------------------------------------- pi_old
    def defers_old_log_probs(self, batch: Batch, may_defer: bool) -> bool:
        """`training.old_log_probs_from_update`: with one optimizer step per batch, pi_old is the
        policy the update starts from, so the update's first forward yields log pi_old
        (detached: ratio 1, the same gradient) and the separate no-grad pass is skipped.
        `may_defer`: the caller's word that nothing needs pi_old before this step's update
        (no KL in the reward) and that the update runs (not in critic warm-up)."""
        return may_defer and self.training.old_log_probs_from_update and self._one_step_per_batch(batch)

    def compute_old_log_probs(self, batch: Batch, may_defer: bool) -> Optional[PiOld]:
        """The pi_old pass, (B, R) on CPU; None where `defers_old_log_probs` (update_taking_pi_old gives it)."""
        if self.defers_old_log_probs(batch, may_defer):
            return None
        return pi_old_pass(self, batch, self.algorithm.adv_estimator)

    def packs_sequences(self) -> bool:
        return self.micro.packed

    def _one_step_per_batch(self, batch: Batch) -> bool:
        return self.training.num_epochs == 1 and self.training.mini_batch_size >= len(batch)

    # ------------------------------------------------------------------- update
    def update(self, batch: Batch) -> dict:
        """PPO-style update (`verl.workers.update_loop`): `num_epochs` passes, shuffled
        mini-batches, one optimizer step per mini-batch, gradients accumulated over
        micro-batches. Loss per mini-batch:

            L = L_pg - entropy_coeff * H + kl_loss_coef * KL(pi || pi_ref)

        with every term aggregated by `loss_agg_mode` over the mini-batch's global counts.
        batch.old_log_probs None (deferred): the first forward's detached log-probs serve as pi_old and
        fill batch.old_log_probs afterwards (update_taking_pi_old returns them, with the entropy)."""
        metrics, pi_old = self._update(batch)
        if pi_old is not None:
            batch.old_log_probs = pi_old.log_probs
        return metrics

    def update_taking_pi_old(self, batch: Batch) -> tuple[dict, PiOld]:
        """The update with pi_old deferred to it: the first forward's detached log-probs serve as pi_old
        (ratio 1, the same gradient); (metrics, that PiOld, (B, R) on CPU in the batch's row order)."""
        if batch.old_log_probs is not None:
            raise ValueError("Actor.update_taking_pi_old: the batch already holds old_log_probs")
        metrics, pi_old = self._update(batch)
        return metrics, pi_old

    def _update(self, batch: Batch) -> tuple[dict, Optional[PiOld]]:
        deferred = batch.old_log_probs is None
        if deferred and not self._one_step_per_batch(batch):
            raise ValueError("Actor.update without old_log_probs needs one optimizer step per batch "
                             f"(num_epochs 1, mini_batch_size >= {len(batch)})")
        self._keep_pi_old = deferred
        self.model.train()
        self.optimizer_offload.load()
        result = self._run_update(batch, self._micro_loss, self._optimizers())
        self._end_replay()
        self._keep_pi_old = False
        self.scheduler.step()
        self.optimizer_offload.offload()  # AdamW moments wait in host memory until the next update
        metrics = result.metrics
        metrics["actor/lr"] = self.scheduler.get_last_lr()[0]
        if not deferred:
            return metrics, None
        width = batch.response_length  # (log-probs, entropy) (B, R) on CPU, the batch's row order
        log_probs, entropy = (torch.cat([pad_response_columns(k[i], width) for k in result.kept]).cpu() for i in (0, 1))
        return metrics, PiOld(log_probs, entropy)

    def _optimizers(self) -> dict:
        """{role: (optimizer, params)} stepped together by the update."""
        return {"actor": (self.optimizer, self.trainable_parameters())}

    def _run_update(self, batch: Batch, loss_fn, optimizers: dict) -> UpdateResult:
        """`run_update` with this actor's settings; a micro-batching halved after an
        out-of-memory error stays for later passes."""
        micro = self._micro_batching()
        with self.compiled.active():  # the backward too: gradient checkpointing recomputes compiled layers
            result = run_update(batch, self.training, self.generator, micro, loss_fn, optimizers,
                                rank_share=self.rank_share, max_response_len=self.max_response_len,
                                retry_oom=self.adapt_to_memory)
        if result.micro != micro:
            self.micro = result.micro
        return result

    def rank_share(self, mini: Batch, micro: MicroBatching) -> Batch:
        """The rows of mini-batch `mini` this process runs forward/backward on: all of them.
        A data-parallel rank (verl.distributed) returns its share instead; the loss counts
        stay those of the whole mini-batch, so the ranks' gradients sum to this one."""
        return mini

    def _micro_loss(self, mb: Batch, counts: dict) -> MicroLoss:
        """Forward + policy loss of one micro-batch (the update loop runs the backward).
        Entropy costs a pass over each chunk's logits: only when the loss or pi_old needs it."""
        mb, logp, ent, _, moe = self._forward(mb, with_entropy=self.algorithm.entropy_coeff > 0 or self._keep_pi_old)
        out = self._policy_micro_loss(mb, logp, ent, counts)
        return out if moe is None else moe.into(out, mb, counts, self.training.router_aux_loss_coef)

    def _policy_micro_loss(self, mb: Batch, logp, ent, counts: dict) -> MicroLoss:
        keep = None
        if self._keep_pi_old:  # this forward is pi_old's: kept (with the entropy metric) for the trainer
            mb = mb.replace(old_log_probs=logp.detach())
            keep = (logp.detach().float(), ent.detach().float())
        loss, sums, means = self._policy_loss(mb, logp, ent, counts)
        return MicroLoss(loss, sums, means, keep)

    def _policy_loss(self, mb: Batch, logp, ent, counts: dict) -> tuple[torch.Tensor, dict, dict]:
        """L_pg - entropy_coeff * H + kl_loss_coef * KL of one micro-batch -> (loss,
        {metric: contribution to the mini-batch total}, {metric: micro-batch mean})."""
        a = self.algorithm
        mask = mb.response_mask
        pg_mask, is_weights, corr_stats = self._rollout_correction(mb, logp, mask)
        pg_loss, pg_metrics = compute_policy_loss(
            a.policy_loss, logp, mb.old_log_probs, mb.advantages, pg_mask,
            clip_ratio_low=a.clip_ratio_low, clip_ratio_high=a.clip_ratio_high, clip_ratio_c=a.clip_ratio_c,
            loss_agg_mode=a.loss_agg_mode, is_weights=is_weights, params=a.loss_params, **counts)
        loss = pg_loss
        sums = {"actor/pg_loss": pg_loss.detach()}
        if a.entropy_coeff > 0:
            ent_term = aggregate_loss(ent, mask, a.loss_agg_mode, **counts)
            loss = loss - a.entropy_coeff * ent_term
            sums["actor/entropy_loss"] = ent_term.detach()
        if a.use_kl_loss:
            kl = kl_penalty(logp, mb.ref_log_probs, a.kl_estimator)
            kl_term = aggregate_loss(kl, mask, a.loss_agg_mode, **counts)
            loss = loss + a.kl_loss_coef * kl_term
            sums["actor/kl_loss"] = kl_term.detach()
        if self.distillation is not None:
            loss = self._with_distillation(loss, mb, logp, counts, sums)
        return loss, sums, {**{f"actor/{k}": v for k, v in pg_metrics.items()}, **corr_stats}

    def _rollout_correction(self, mb: Batch, logp, mask):
        """(the policy-gradient term's mask (b, r'), importance weights (b, r') or None, metrics) of one
        micro-batch (verl.algorithms.off_policy). Decoupled: the weights the trainer computed for the
        batch (its rejection is already in the mask), or, where pi_old comes from this update's first
        forward, token/sequence weights of pi_old here. Bypass: pi_theta (detached) against the
        engine, per micro-batch; rejected tokens leave the numerator, counts keep the denominator."""
        spec = self.correction
        if mb.is_weights is not None:
            return mask, mb.is_weights, {}
        if not spec.enabled or mb.rollout_log_probs is None:
            return mask, None, {}
        if spec.bypass:
            weights, pg_mask, stats = correct(logp.detach(), mb.rollout_log_probs, mask, spec)
            return pg_mask, weights if spec.applies_weights else None, stats
        if spec.is_level and not spec.needs_batch_pass:
            weights, _, stats = correct(mb.old_log_probs, mb.rollout_log_probs, mask, spec)
            return mask, weights, stats
        return mask, None, {}

    def _with_distillation(self, task_loss, mb: Batch, logp, counts: dict, sums: dict) -> torch.Tensor:
        """L_task + coef x L_distill, or L_distill alone without the task reward (verl/algorithms/distillation.py)."""
        d, a = self.distillation, self.algorithm
        mask = mb.response_mask
        per_token = distillation_token_losses(logp, mb.teacher_log_probs, d.loss_mode, d.loss_max_clamp)
        if d.use_policy_gradient:  # the loss as a reward: advantage -d_t through the clipped policy gradient
            term, _ = compute_policy_loss("ppo", logp, mb.old_log_probs, -per_token.detach(), mask,
                                          clip_ratio_low=d.clip_ratio_low, clip_ratio_high=d.clip_ratio_high,
                                          loss_agg_mode=a.loss_agg_mode, params=a.loss_params, **counts)
        else:
            term = aggregate_loss(per_token, mask, a.loss_agg_mode, **counts)
        # the estimate of KL(student || teacher) itself, whatever the loss mode (k3: non-negative)
        sums["distillation/loss"] = term.detach()
        sums["distillation/kl_k3"] = aggregate_loss(
            distillation_token_losses(logp.detach(), mb.teacher_log_probs, "k3"), mask, a.loss_agg_mode,
            **counts).detach()
        if not d.use_task_rewards:  # the task's policy gradient (actor/pg_loss, logged) is left out
            return term
        return task_loss + d.loss_coef * term


def pi_old_pass(role, batch: Batch, adv_estimator: str) -> PiOld:
    """The no-grad pi_old pass of `role` (an Actor, or verl.distributed's ActorGroup over its ranks): log-probs
    and entropy, (B, R), and sum_pi_squared (B, R) where the advantage estimator reads it (the optimal
    token baseline)."""
    if ESTIMATORS[adv_estimator].needs_sum_pi_squared:
        return PiOld(*role.compute_log_probs_and_sum_pi_squared(batch))
    return PiOld(*role.compute_log_probs(batch))
