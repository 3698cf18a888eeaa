"""The update loop of every trainable worker (Actor, Critic, the shared value head).

    for each of training.num_epochs epochs:
        for each mini-batch of training.mini_batch_size rows (shuffled by the worker's own
                generator, unless one epoch takes the whole batch at once or
                training.shuffle_minibatches is false: then contiguous slices in batch order):
            counts = the mini-batch's valid tokens and sequences: every micro-batch's loss is
                     its share of the mini-batch loss, so the shares sum to it
            for each micro-batch of this process's rows (`rank_share`):
                loss_fn(micro-batch, counts) -> loss; loss.backward()
            one guarded step of the worker's optimizers (dropped when a norm is NaN/Inf)

Metrics: a loss function's `sums` (contributions to a mini-batch total) add up over its
micro-batches, its `means` (micro-batch means) are weighted by the micro-batch's share of
the mini-batch's tokens; both are then averaged over the optimizer steps. `<role>/grad_norm`
is the mean over the finite steps, `<role>/nonfinite_updates` counts the others; `<role>/first_minibatch_*`
are the first mini-batch's own values of FIRST_MINIBATCH_KEYS. Metrics stay
device tensors until the end: the host never waits for the GPU between micro-batches.

Out of memory (`torch.OutOfMemoryError`) in a micro-batch's forward or backward: the
mini-batch's gradients are zeroed and it is redone once with micro-batches of half the size
or token budget (`MicroBatching.halved`), with a warning and `<role>/oom_retries` counted;
the halved micro-batching is kept for the rest of the update (the caller keeps it after).
A second out-of-memory error on the same mini-batch raises, naming the settings that help.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any, Callable, NamedTuple, Optional

import torch

from verl.algorithms.masked import count_tokens_and_seqs
from verl.batch import Batch
from verl.workers.micro_batches import MicroBatching
from verl.workers.optim import guarded_step, role_grad_clip

logger = logging.getLogger(__name__)

# Metrics also reported for the first mini-batch alone, as `<role>/first_minibatch_<name>`: before the
# first optimizer step of an update the policy is pi_old, so its log-ratio must be 0 (verl/trainer/invariants.py).
FIRST_MINIBATCH_KEYS = ("/log_ratio_abs", "/ppo_kl")

OOM_ADVICE = ("set training.micro_batch_size or training.max_tokens_per_micro_batch lower, or "
              "model.enable_gradient_checkpointing: true")


class MicroLoss(NamedTuple):
    """What a loss function returns for one micro-batch."""

    loss: torch.Tensor  # its share of the mini-batch loss (0-dim, with graph)
    sums: dict  # metric -> contribution to the mini-batch total (detached)
    means: dict  # metric -> micro-batch mean (detached tensor or float)
    keep: Any = None  # handed back in order (UpdateResult.kept): e.g. the first forward's log-probs


class UpdateResult(NamedTuple):
    metrics: dict
    kept: list  # MicroLoss.keep of every micro-batch that counted, in the order they ran
    micro: MicroBatching  # the micro-batching the update ended with (halved after an OOM)


def run_update(batch: Batch, training_cfg, generator: torch.Generator, micro: MicroBatching,
               loss_fn: Callable[[Batch, dict], MicroLoss], optimizers: dict, *,
               rank_share: Callable[[Batch, MicroBatching], Batch] = lambda mini, micro: mini,
               max_response_len: Optional[int] = None, retry_oom: bool = True) -> UpdateResult:
    """One update over `batch` (see the module docstring).

    optimizers: {role: (optimizer, params)}, stepped together; the first role names
        `<role>/oom_retries`. rank_share(mini, micro): the rows this process trains on (all of
        them; a data-parallel rank's share). max_response_len: the constant of
        seq-mean-token-sum-norm, passed on in `counts`. retry_oom: False where the micro-batch
        count must not change (FSDP ranks run their collectives in lockstep)."""
    t = training_cfg
    sums: dict = defaultdict(float)
    kept: list = []
    n_updates = n_bad = retries = passes = 0
    first: dict = {}  # metrics of the first mini-batch of the first epoch alone (before any step)
    shuffle = t.shuffle_minibatches and (t.num_epochs > 1 or t.mini_batch_size < len(batch))
    for _ in range(t.num_epochs):
        for mini in batch.iter_minibatches(t.mini_batch_size, generator, shuffle=shuffle):
            num_tokens, num_seqs = count_tokens_and_seqs(mini.response_mask)
            counts = dict(num_tokens=num_tokens, num_seqs=num_seqs, max_response_len=max_response_len)
            for attempt in (0, 1):
                try:
                    part, part_kept, n = _accumulate(rank_share(mini, micro), counts, micro, loss_fn)
                    passes += n
                    break
                except torch.OutOfMemoryError as exc:
                    for optimizer, _ in optimizers.values():
                        optimizer.zero_grad(set_to_none=True)
                    smaller = micro.halved()
                    if not retry_oom or attempt or smaller == micro:
                        raise torch.OutOfMemoryError(
                            f"out of memory in the update with micro-batches of {_describe(micro)}: "
                            f"{OOM_ADVICE}") from exc
                # The failed pass's activations are freed with its exception, above.
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
                logger.warning("verl: out of memory in a micro-batch (%s); redoing the mini-batch with %s",
                               _describe(micro), _describe(smaller))
                micro, retries = smaller, retries + 1
            for k, v in part.items():
                sums[k] += v
                if n_updates == 0 and k.endswith(FIRST_MINIBATCH_KEYS):  # pi = pi_old here: the on-policy check
                    first[k.replace("/", "/first_minibatch_", 1)] = v
            kept.extend(part_kept)
            norms, ok = guarded_step(optimizers, {role: role_grad_clip(t, role) for role in optimizers})
            n_updates += 1
            n_bad += not ok
            for role, norm in norms.items():
                sums[f"{role}/grad_norm"] += norm if ok else 0.0
    metrics = {k: float(v) / n_updates for k, v in sums.items()}
    metrics.update({k: float(v) for k, v in first.items()})
    for role in optimizers:
        metrics[f"{role}/grad_norm"] = sums[f"{role}/grad_norm"] / max(1, n_updates - n_bad)
        metrics[f"{role}/nonfinite_updates"] = float(n_bad)
    metrics[f"{next(iter(optimizers))}/oom_retries"] = float(retries)
    metrics[f"{next(iter(optimizers))}/micro_batches"] = float(passes)  # forward/backward passes, all mini-batches
    return UpdateResult(metrics, kept, micro)


def _accumulate(rows: Batch, counts: dict, micro: MicroBatching, loss_fn) -> tuple[dict, list, int]:
    """Forward + backward of every micro-batch of one mini-batch -> (metric sums, kept, micro-batches)."""
    sums: dict = defaultdict(float)
    kept = []
    parts = micro.split(rows)
    for mb in parts:
        share = float(mb.response_mask.sum()) / max(counts["num_tokens"], 1.0)  # host-side mask
        out = loss_fn(mb, counts)
        out.loss.backward()
        for k, v in out.sums.items():
            sums[k] += v
        for k, v in out.means.items():
            sums[k] += (v.detach().float() if isinstance(v, torch.Tensor) else float(v)) * share
        if out.keep is not None:
            kept.append(out.keep)
    return sums, kept, len(parts)


def _describe(micro: MicroBatching) -> str:
    return f"{micro.max_tokens} tokens" if micro.max_tokens else f"{micro.size} sequences"
