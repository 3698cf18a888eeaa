"""Actor: the policy being trained. Computes response log-probs and runs the policy update.

`actor.model` is a plain Hugging Face causal LM (the seed calls `.generate` on it).
Parameters are fp32 master weights; `model.dtype: bfloat16` runs forwards under autocast.
"""

from __future__ import annotations

from collections import defaultdict

import torch

from verl.algorithms.aggregation import aggregate_loss
from verl.algorithms.kl import kl_penalty
from verl.algorithms.policy_losses import compute_policy_loss
from verl.algorithms.masked import count_tokens_and_seqs
from verl.batch import Batch
from verl.models.loading import load_causal_lm, torch_dtype
from verl.workers.logprobs import response_log_probs
from verl.workers.micro_batches import make_micro_batches, pad_response_columns, trim_padding
from verl.workers.optim import autocast_context, build_optimizer, build_scheduler, guarded_step


class Actor:
    def __init__(self, config, device: torch.device, model: torch.nn.Module | None = None):
        self.config = config
        self.device = device
        self.compute_dtype = torch_dtype(config.model.dtype)
        self.model = model if model is not None else load_causal_lm(config.model, torch.float32)
        if config.model.enable_gradient_checkpointing:
            self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.model.to(device)
        t = config.training
        self.optimizer = build_optimizer(self.model.parameters(), t.lr, t.weight_decay, device)
        self.scheduler = build_scheduler(self.optimizer, t)
        self.temperature = config.rollout.temperature or 1.0
        self.generator = torch.Generator().manual_seed(config.seed)  # mini-batch shuffling

    def trainable_parameters(self):
        return [p for p in self.model.parameters() if p.requires_grad]

    # ------------------------------------------------------------------ forward
    def _forward(self, mb: Batch, with_entropy: bool):
        mb = trim_padding(mb).to(self.device)
        with autocast_context(self.device, self.compute_dtype):
            logp, ent = response_log_probs(
                self.model, mb.input_ids, mb.attention_mask, mb.position_ids, mb.response_length,
                temperature=self.temperature, chunk_size=self.config.training.logprob_chunk_size,
                with_entropy=with_entropy)
        return mb, logp, ent

    @torch.no_grad()
    def compute_log_probs(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """(log_probs (B, R), entropy (B, R)) of the sampled response tokens, on CPU."""
        t = self.config.training
        logps, ents = [], []
        for mb in make_micro_batches(batch, t.micro_batch_size, t.max_tokens_per_micro_batch):
            _, lp, ent = self._forward(mb, with_entropy=True)
            logps.append(pad_response_columns(lp.float().cpu(), batch.response_length))
            ents.append(pad_response_columns(ent.float().cpu(), batch.response_length))
        return torch.cat(logps), torch.cat(ents)  # micro-batches keep row order

    # ------------------------------------------------------------------- update
    def update(self, batch: Batch) -> dict:
        """PPO-style update: `num_epochs` passes, shuffled mini-batches, one optimizer step
        per mini-batch, gradients accumulated over micro-batches.

        Loss per mini-batch:  L = L_pg - entropy_coeff * H + kl_loss_coef * KL(pi || pi_ref)
        with every term aggregated by `loss_agg_mode` over the mini-batch's global counts.
        """
        t, r = self.config.training, self.config.rollout
        self.model.train()
        sums: dict[str, float] = defaultdict(float)
        n_updates, n_bad = 0, 0
        for _ in range(t.num_epochs):
            for mini in batch.iter_minibatches(t.mini_batch_size, self.generator, shuffle=t.num_epochs > 1 or
                                               t.mini_batch_size < len(batch)):
                num_tokens, num_seqs = count_tokens_and_seqs(mini.response_mask)
                counts = dict(num_tokens=num_tokens, num_seqs=num_seqs, max_response_len=r.max_new_tokens)
                for mb in make_micro_batches(mini, t.micro_batch_size, t.max_tokens_per_micro_batch):
                    weight = float(mb.response_mask.sum()) / max(counts["num_tokens"], 1.0)
                    for k, v in self._micro_step(mb, counts).items():
                        sums[k] += v * weight
                grad_norm, ok = guarded_step(self.optimizer, self.trainable_parameters(), t.grad_clip)
                n_updates += 1
                n_bad += not ok
                sums["actor/grad_norm"] += grad_norm if ok else 0.0
        self.scheduler.step()
        metrics = {k: v / n_updates for k, v in sums.items()}
        metrics["actor/grad_norm"] = sums["actor/grad_norm"] / max(1, n_updates - n_bad)
        metrics["actor/nonfinite_updates"] = float(n_bad)
        metrics["actor/lr"] = self.scheduler.get_last_lr()[0]
        return metrics

    def _micro_step(self, mb: Batch, counts: dict) -> dict:
        a = self.config.algorithm
        mb, logp, ent = self._forward(mb, with_entropy=True)
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
        ent_term = aggregate_loss(ent, mask, a.loss_agg_mode, **counts)
        if a.entropy_coeff > 0:
            loss = loss - a.entropy_coeff * ent_term
        metrics = {"actor/pg_loss": pg_loss.item(), "actor/entropy_loss": ent_term.item()}
        if a.use_kl_loss:
            kl = kl_penalty(logp, mb.ref_log_probs, a.kl_estimator)
            kl_term = aggregate_loss(kl, mask, a.loss_agg_mode, **counts)
            loss = loss + a.kl_loss_coef * kl_term
            metrics["actor/kl_loss"] = kl_term.item()
        loss.backward()
        # pg_loss and friends are contributions to the mini-batch sum; rescale the
        # per-micro-batch means (clip fractions) by token share in the caller.
        share = float(mask.sum()) / max(counts["num_tokens"], 1.0)
        out = {k: v / max(share, 1e-12) for k, v in metrics.items()}
        for k, v in pg_metrics.items():
            out[f"actor/{k}"] = float(v)
        return out

