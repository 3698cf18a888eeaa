"""Actor: the policy being trained. Computes response log-probs and runs the policy update.

`actor.model` is a plain Hugging Face causal LM (the seed calls `.generate` on it), or a
peft PeftModel of one with `model.lora.rank > 0` (`.generate` works the same).
Parameters are fp32 master weights; `model.dtype: bfloat16` runs forwards under autocast,
or with `model.mixed_precision: param_copy` on a bf16 copy of them (`verl.workers.param_copy`).
With LoRA the frozen base stays in `model.dtype` and only the float32 adapters train.
Memory/speed switches (each with a plain fallback): `training.use_packed_samples`
(`verl.workers.packing`), `training.max_tokens_per_micro_batch`, `training.offload_optimizer`
(`verl.workers.offload`), `model.enable_gradient_checkpointing`, `model.torch_compile`
(`verl.workers.compile`).
"""

from __future__ import annotations

import contextlib
from collections import defaultdict

import torch

from verl.algorithms.aggregation import aggregate_loss
from verl.algorithms.kl import kl_penalty
from verl.algorithms.policy_losses import compute_policy_loss
from verl.algorithms.masked import count_tokens_and_seqs
from verl.batch import Batch
from verl.models.loading import load_causal_lm, torch_dtype
from verl.models.lora import apply_lora, lora_enabled
from verl.workers.compile import CompiledLayers
from verl.algorithms.value_loss import compute_value_loss, explained_variance
from verl.workers.logprobs import head_log_probs, lm_head, response_hidden
from verl.workers.offload import OptimizerOffload
from verl.workers.packing import causal_lm_trunk, pack_batch, prepare_packing
from verl.workers.param_copy import ParamCopy
from verl.workers.micro_batches import batch_to_device, make_micro_batches, pad_response_columns, trim_padding
from verl.workers.optim import autocast_context, build_optimizer, build_scheduler, guarded_joint_step


class Actor:
    param_copy_supported = True  # model.mixed_precision: param_copy (single-process only)

    def __init__(self, config, device: torch.device, model: torch.nn.Module | None = None):
        self.config = config
        self.device = device
        self.compute_dtype = torch_dtype(config.model.dtype)
        lora = lora_enabled(config.model)
        # Full fine-tuning keeps float32 master weights; a LoRA base is frozen, so model.dtype.
        load_dtype = self.compute_dtype if lora else torch.float32
        self.model = model if model is not None else load_causal_lm(config.model, load_dtype, device_type=device.type)
        if lora:
            self.model = apply_lora(self.model, config.model.lora)
        if config.model.enable_gradient_checkpointing:
            self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.model.to(device)
        t = config.training
        self.packed = t.use_packed_samples
        self.packing_mode = prepare_packing(causal_lm_trunk(self.model)) if self.packed else None
        # model.mixed_precision: param_copy -- forwards and backwards run on a model.dtype copy
        # of the float32 master weights (verl.workers.param_copy); the optimizer keeps the master.
        use_copy = (self.param_copy_supported and config.model.mixed_precision == "param_copy" and not lora
                    and self.compute_dtype != torch.float32)
        self.param_copy = ParamCopy(self.model, self.compute_dtype) if use_copy else None
        self.compiled = CompiledLayers(self.param_copy.module if use_copy else self.model, config.model.torch_compile)
        self.optimizer = build_optimizer(self.model.parameters(), t.lr, t.weight_decay, device)
        if self.param_copy is not None:
            self.param_copy.watch(self.optimizer)
        self.optimizer_offload = OptimizerOffload(self.optimizer, t.offload_optimizer and device.type != "cpu")
        self.scheduler = build_scheduler(self.optimizer, t)
        self.temperature = config.rollout.temperature or 1.0
        self.generator = torch.Generator().manual_seed(config.seed)  # mini-batch shuffling
        self.value_critic = None  # a SharedCritic when critic.share_actor (value head on this trunk)
        self._pi_old = None  # per-micro-batch (log-probs, entropy) (b, r') while an update keeps pi_old
        self.last_pi_old = None  # (log-probs, entropy) (B, R) of the last update that kept pi_old

    def forward_model(self) -> torch.nn.Module:
        """The module forwards run on: the master model, or its up-to-date model.dtype copy."""
        return self.param_copy.synced() if self.param_copy is not None else self.model

    def trainable_parameters(self):
        return [p for p in self.model.parameters() if p.requires_grad]

    def attach_value_head(self, shared_critic) -> None:
        """`critic.share_actor`: a value head on this trunk (`verl.workers.shared_critic`); from
        now on the update minimises the combined loss and `compute_values` works."""
        self.value_critic = shared_critic

    # ------------------------------------------------------------------ forward
    def _forward(self, mb: Batch, with_entropy: bool, with_logp: bool = True, values: str | None = None):
        """One trunk pass over a micro-batch -> (mb on the device, log-probs, entropy, values),
        each (B, R) or None. `values`: None (no value head), "train" (the value loss reaches the
        trunk), "head" (hidden states detached: only the head learns)."""
        mb = trim_padding(mb)
        # Packing and copies happen on the CPU side without waiting for the GPU.
        packed = pack_batch(mb.input_ids, mb.attention_mask, mb.response_length).to(self.device) if self.packed \
            else False
        mb = batch_to_device(mb, self.device)
        model = self.forward_model()
        logp = ent = v = None
        # A value-head-only pass needs no graph through the trunk; otherwise the caller's grad mode.
        trunk_grad = contextlib.nullcontext() if with_logp or values == "train" else torch.no_grad()
        with autocast_context(self.device, self.compute_dtype), self.compiled.active():
            with trunk_grad:
                rh = response_hidden(model, mb.input_ids, mb.attention_mask, mb.position_ids, mb.response_length,
                                     packed=packed, packing_mode=self.packing_mode)
            if with_logp:
                t = self.config.training
                lp, e = head_log_probs(rh.hidden, lm_head(model), rh.targets, self.temperature,
                                       t.logprob_chunk_size, with_entropy, fused=self.config.model.torch_compile,
                                       keep_logits=t.logprob_keep_logits)
                logp, ent = rh.unpack(lp), rh.unpack(e)
            if values is not None:
                hidden = rh.hidden.detach() if values == "head" else rh.hidden
                v = rh.unpack(self.value_critic.model(hidden).squeeze(-1).float())
        return mb, logp, ent, v

    @torch.no_grad()
    def compute_log_probs(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """(log_probs (B, R), entropy (B, R)) of the sampled response tokens, on CPU."""
        t = self.config.training
        logps, ents = [], []
        for mb in make_micro_batches(batch, t.micro_batch_size, t.max_tokens_per_micro_batch, self.packed):
            _, lp, ent, _ = self._forward(mb, with_entropy=True)
            logps.append(pad_response_columns(lp.float(), batch.response_length))
            ents.append(pad_response_columns(ent.float(), batch.response_length))
        # One device->host copy at the end: no sync between micro-batches; row order kept.
        return torch.cat(logps).cpu(), torch.cat(ents).cpu()

    @torch.no_grad()
    def compute_values(self, batch: Batch) -> torch.Tensor:
        """Values (B, R) from the attached value head (`critic.share_actor`), zero on masked
        positions; the trunk runs without the LM head."""
        t = self.config.training
        out = []
        for mb in make_micro_batches(batch, t.micro_batch_size, t.max_tokens_per_micro_batch, self.packed):
            mb, _, _, v = self._forward(mb, with_entropy=False, with_logp=False, values="head")
            out.append(pad_response_columns(v * mb.response_mask, batch.response_length))
        return torch.cat(out).cpu()

    # ------------------------------------------------------------------- update
    def update(self, batch: Batch, train_policy: bool = True) -> dict:
        """PPO-style update: `num_epochs` passes, shuffled mini-batches, one optimizer step
        per mini-batch, gradients accumulated over micro-batches.

        Loss per mini-batch:  L = L_pg - entropy_coeff * H + kl_loss_coef * KL(pi || pi_ref)
        with every term aggregated by `loss_agg_mode` over the mini-batch's global counts.
        With a shared value head (`critic.share_actor`) the loss gains + vf_coef * L_value and
        the head's optimizer steps with the actor's; `train_policy=False` (critic warm-up)
        trains the head alone.
        """
        t, r = self.config.training, self.config.rollout
        vc = self.value_critic
        if not train_policy and vc is None:
            raise ValueError("Actor.update(train_policy=False) needs a shared value head")
        # batch.old_log_probs None: pi_old is the policy this update starts from (one optimizer
        # step per batch); the first forward's detached log-probs serve as pi_old, and are kept.
        self._pi_old = [] if train_policy and batch.old_log_probs is None else None
        if self._pi_old is not None and (t.num_epochs != 1 or t.mini_batch_size < len(batch)):
            raise ValueError("Actor.update without old_log_probs needs one optimizer step per batch "
                             f"(num_epochs 1, mini_batch_size >= {len(batch)})")
        self.model.train()
        if train_policy:
            self.optimizer_offload.load()
        sums: dict = defaultdict(float)  # per-micro-batch metrics stay on the device until the end
        n_updates, n_bad = 0, 0
        for _ in range(t.num_epochs):
            for mini in batch.iter_minibatches(t.mini_batch_size, self.generator, shuffle=t.num_epochs > 1 or
                                               t.mini_batch_size < len(batch)):
                num_tokens, num_seqs = count_tokens_and_seqs(mini.response_mask)
                counts = dict(num_tokens=num_tokens, num_seqs=num_seqs, max_response_len=r.max_new_tokens)
                for mb in make_micro_batches(self.rank_share(mini), t.micro_batch_size,
                                             t.max_tokens_per_micro_batch, self.packed):
                    weight = float(mb.response_mask.sum()) / max(counts["num_tokens"], 1.0)
                    for k, v in self._micro_step(mb, counts, train_policy).items():
                        sums[k] += v * weight
                pairs = {"actor": (self.optimizer, self.trainable_parameters())} if train_policy else {}
                if vc is not None:
                    pairs["critic"] = (vc.optimizer, list(vc.model.parameters()))
                norms, ok = guarded_joint_step(list(pairs.values()), t.grad_clip)
                n_updates += 1
                n_bad += not ok
                for name, norm in zip(pairs, norms):
                    sums[f"{name}/grad_norm"] += norm if ok else 0.0
        metrics = {k: float(v) / n_updates for k, v in sums.items()}
        for name in ("actor",) * train_policy + ("critic",) * (vc is not None):
            metrics[f"{name}/grad_norm"] = sums[f"{name}/grad_norm"] / max(1, n_updates - n_bad)
            metrics[f"{name}/nonfinite_updates"] = float(n_bad)
        if train_policy:
            self.scheduler.step()
            self.optimizer_offload.offload()  # AdamW moments wait in host memory until the next update
            metrics["actor/lr"] = self.scheduler.get_last_lr()[0]
        if self._pi_old is not None:  # (log-probs, entropy) (B, R) on CPU, the batch's row order
            kept, width = self._pi_old, batch.response_length
            self.last_pi_old = tuple(torch.cat([pad_response_columns(k[i], width) for k in kept]).cpu()
                                     for i in (0, 1))
            self._pi_old = None
        if vc is not None:
            vc.scheduler.step()
            metrics["critic/explained_var"] = float(explained_variance(batch.values, batch.returns,
                                                                       batch.response_mask))
        return metrics

    def rank_share(self, mini: Batch) -> Batch:
        """The rows of mini-batch `mini` this process runs forward/backward on: all of them.
        A data-parallel rank (verl.distributed) returns its share instead; the loss counts
        above stay those of the whole mini-batch, so the ranks' gradients sum to this one."""
        return mini

    def _micro_step(self, mb: Batch, counts: dict, train_policy: bool = True) -> dict:
        """Forward + backward of one micro-batch; metrics as detached 0-dim tensors (read once
        per update, so the host never waits for the GPU between micro-batches)."""
        a = self.config.algorithm
        vc = self.value_critic
        share = float(mb.response_mask.sum()) / max(counts["num_tokens"], 1.0)  # host-side mask
        # Entropy costs a pass over each chunk's logits: only when it is in the loss.
        keep_pi_old = self._pi_old is not None
        mb, logp, ent, values = self._forward(
            mb, with_entropy=train_policy and (a.entropy_coeff > 0 or keep_pi_old), with_logp=train_policy,
            values=None if vc is None else ("train" if train_policy else "head"))
        if keep_pi_old:  # this forward is pi_old's: keep it (and the entropy metric) for the trainer
            mb = mb.replace(old_log_probs=logp.detach())
            self._pi_old.append((logp.detach().float(), ent.detach().float()))
        loss, sums, means = 0.0, {}, {}  # sums: contributions to mini-batch totals; means: per micro-batch
        if train_policy:
            loss, sums, means = self._policy_loss(mb, logp, ent, counts)
        if vc is not None:
            vf_loss, vf_metrics = compute_value_loss(values, mb.values, mb.returns, mb.response_mask,
                                                     a.cliprange_value, loss_agg_mode="token-mean", **counts)
            loss = loss + self.config.critic.vf_coef * vf_loss
            sums["critic/vf_loss"] = vf_loss.detach()
            means.update({f"critic/{k}": v for k, v in vf_metrics.items()})
        loss.backward()
        # Contributions become per-micro-batch values (the caller weights by token share).
        out = {k: v / max(share, 1e-12) for k, v in sums.items()}
        for k, v in means.items():
            out[k] = v.detach().float() if isinstance(v, torch.Tensor) else float(v)
        return out

    def _policy_loss(self, mb: Batch, logp, ent, counts: dict) -> tuple[torch.Tensor, dict, dict]:
        """L_pg - entropy_coeff * H + kl_loss_coef * KL of one micro-batch -> (loss,
        {metric: contribution to the mini-batch total}, {metric: micro-batch mean})."""
        a = self.config.algorithm
        mask = mb.response_mask
        is_weights = None
        if self.config.rollout.tis_cap > 0 and mb.rollout_log_probs is not None:
            # Truncated importance sampling: correct for engine/actor mismatch, capped.
            is_weights = torch.exp(mb.old_log_probs - mb.rollout_log_probs).clamp(max=self.config.rollout.tis_cap)
        pg_loss, pg_metrics = compute_policy_loss(
            a.policy_loss, logp, mb.old_log_probs, mb.advantages, mask,
            clip_ratio_low=a.clip_ratio_low, clip_ratio_high=a.clip_ratio_high, clip_ratio_c=a.clip_ratio_c,
            loss_agg_mode=a.loss_agg_mode, is_weights=is_weights, **counts)
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
        return loss, sums, {f"actor/{k}": v for k, v in pg_metrics.items()}
