"""Optimizer, learning-rate schedule and the guarded optimizer step shared by actor and critic."""

from __future__ import annotations

import contextlib
import math

import torch

from verl.errors import ConfigError
from verl.workers.awake_budget import AwakeBudget


def build_optimizer(params, lr: float, weight_decay: float, device: torch.device,
                    decay_1d: bool = True) -> torch.optim.Optimizer:
    """AdamW over the trainable parameters; the fused kernel (one pass over params, grads and
    both moments) on CUDA and CPU (about 5x faster than the per-tensor loop on a CPU),
    the default implementation where fused is unavailable.
    decay_1d=False: no weight decay on 1-D weights (biases, norm scales), as Megatron's optimizer
    groups them (wd_mult 0 for `*.bias` and every parameter of one dimension); a DTensor's ndim is
    its full tensor's, so FSDP2's shards group as the whole weights do."""
    params = [p for p in params if p.requires_grad]
    groups = params
    if not decay_1d:
        groups = [{"params": [p for p in params if p.ndim != 1]},
                  {"params": [p for p in params if p.ndim == 1], "weight_decay": 0.0}]
        groups = [g for g in groups if g["params"]]
    kwargs = dict(lr=lr, weight_decay=weight_decay, betas=(0.9, 0.999))
    if device.type in ("cuda", "cpu"):
        try:
            return torch.optim.AdamW(groups, fused=True, **kwargs)
        except (RuntimeError, TypeError, ValueError):
            pass
    return torch.optim.AdamW(groups, **kwargs)


def lr_multiplier(step: int, warmup_steps: int, total_steps: int, kind: str, min_ratio: float = 0.0,
                  start_ratio: float = 0.0, decay_steps: int | None = None, from_first_step: bool = False) -> float:
    """The learning rate of step `step` (0-based) over training.lr:

        step < W:  a + (1 - a) (step + o) / W                  (linear warm-up from a)
        after:     1 (constant), or m + (1 - m) c with         p = (step - W) / max(1, D - W), m = min_ratio
                   c = 1 - p (linear), 1 - sqrt(p) (sqrt), (1 + cos(pi p)) / 2 (cosine);
                   inverse_sqrt: max(m, sqrt(max(W, 1) / step))
        step > D:  m (every kind but constant)

    W = warmup_steps, T = total_steps, D = decay_steps (the step the decay ends at; None: T),
    a = start_ratio, o = 1 if from_first_step else 0. With a = 0, o = 0 the first step runs at lr 0, as
    with transformers' get_constant_schedule_with_warmup / get_cosine_schedule_with_warmup and real
    verl's copies of them (W = 4: 0, 0.25, 0.5, 0.75, then 1). Real verl's FSDP cosine with
    min_lr_ratio m is max(m, c (1 - m) + m) = the same m + (1 - m) c; Megatron's OptimizerParamScheduler
    (real verl's Megatron engine) is min_lr + c (lr - min_lr) for linear/cosine, and lr sqrt(max(W, 1)) /
    sqrt(max(s, 1)) floored at min_lr for inverse-square-root: the same over lr with m = min_lr / lr (its
    warm-up, init + (lr - init) s / W for s <= W, is ours at init 0: equal at s = W).

    VeOmni's build_lr_scheduler (real verl's VeOmni engine; lr L, lr_start, lr_min, W = int(T x
    lr_warmup_steps_ratio), D = int(T x lr_decay_ratio)): (lr_start + (L - lr_start) s / max(1, W)) / L
    for s < W, then 1 (constant) or, cosine, lr_min / L for s > D, else
    m + (1 - m) (1 + cos(pi p)) / 2 with p = (s - W) / max(1, D - W): ours with a = lr_start / L,
    m = lr_min / L, o = 0. TorchTitan's linear_warmup_stable_decay (real verl's TorchTitan engine, total
    steps N = TorchTitan's training.steps, decay_ratio None: D = N - W decay steps after one stable step):
    (s + 1) / W for s < W, 1 at s = W, then m + (1 - m) c with p = (s + 1 - (W + 1)) / (N - W) =
    (s - W) / (N - W), c linear / sqrt / cosine as above, m = min_lr_factor: ours with o = 1, a = 0,
    D = N (equal up to step N; past it TorchTitan's p > 1 goes below m)."""
    if warmup_steps and step < warmup_steps:
        return start_ratio + (1.0 - start_ratio) * (step + (1 if from_first_step else 0)) / warmup_steps
    if kind == "constant":
        return 1.0
    end = total_steps if decay_steps is None else decay_steps
    if step > end:
        return min_ratio
    if kind == "inverse_sqrt":
        return max(min_ratio, math.sqrt(max(warmup_steps, 1)) / math.sqrt(max(step, 1)))
    progress = min(1.0, (step - warmup_steps) / max(1, end - warmup_steps))
    if kind == "linear":
        coeff = 1.0 - progress
    elif kind == "sqrt":
        coeff = 1.0 - math.sqrt(progress)
    else:
        coeff = 0.5 * (1.0 + math.cos(math.pi * progress))
    return min_ratio + (1.0 - min_ratio) * coeff


def critic_setting(training_cfg, name: str):
    """training.critic_<name> when set, else training.<name> (the actor's): warmup_steps,
    weight_decay, grad_clip, lr_scheduler, min_lr_ratio, warmup_start_ratio, lr_decay_steps."""
    own = getattr(training_cfg, f"critic_{name}", None)
    return getattr(training_cfg, name) if own is None else own


def role_grad_clip(training_cfg, role: str) -> float:
    """The gradient-norm bound of an optimizer role: the critic's own for "critic"."""
    return critic_setting(training_cfg, "grad_clip") if role == "critic" else training_cfg.grad_clip


def build_scheduler(optimizer, training_cfg, critic: bool = False) -> torch.optim.lr_scheduler.LambdaLR:
    """Stepped once per trainer step (not per mini-batch), so the schedule follows total_steps.
    critic: the warm-up, the schedule, its floor, the warm-up's start and the decay's end are
    training.critic_warmup_steps / critic_lr_scheduler / critic_min_lr_ratio / critic_warmup_start_ratio /
    critic_lr_decay_steps when set."""
    t = training_cfg
    names = ("warmup_steps", "lr_scheduler", "min_lr_ratio", "warmup_start_ratio", "lr_decay_steps")
    warmup, kind, floor, start, decay = (critic_setting(t, n) if critic else getattr(t, n) for n in names)
    first = t.warmup_from_first_step
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: lr_multiplier(s, warmup, t.total_steps, kind, floor, start, decay, first))


def guarded_step(pairs: dict, grad_clip) -> tuple[dict, bool]:
    """Clip and step {role: (optimizer, params)} trained by one loss, unless a gradient norm is
    NaN/Inf: then the update is dropped for all (gradients zeroed) and reported, so one bad
    batch cannot poison the weights. Each role's gradients are clipped on their own, at
    `grad_clip` (a number, or {role: number}; 0 = no clipping).
    Returns ({role: grad norm}, ok)."""
    norms = {}
    for role, (_, params) in pairs.items():
        clip = grad_clip[role] if isinstance(grad_clip, dict) else grad_clip
        max_norm = clip if clip > 0 else float("inf")
        params = [p for p in params if p.requires_grad]
        norms[role] = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
    ok = all(math.isfinite(n) for n in norms.values())
    for optimizer, _ in pairs.values():
        if ok:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    if ok:
        check_weights_finite(pairs, norms)
    return norms, ok


LR_KEYS = {"actor": "training.lr", "critic": "training.critic_lr (10 x training.lr unless set)"}


def check_weights_finite(pairs: dict, norms: dict) -> None:
    """Stop with one line when a step with finite gradients made the weights NaN/Inf (a step size
    such as lr=1e308 overflows them): those weights cannot be undone, so the run ends before they
    reach a checkpoint, the engine or another step. One fused max-abs pass over each role's weights
    (the inf-norm: finite exactly when every weight is, where a 2-norm of large finite weights overflows)."""
    for role, (optimizer, params) in pairs.items():
        # this process's shard of each weight (FSDP: a DTensor's local part, which may be empty)
        local = [p.detach().to_local() if hasattr(p, "to_local") else p.detach() for p in params if p.requires_grad]
        local = [t for t in local if t.numel()]
        finite = (torch.nn.utils.get_total_norm(local, norm_type=math.inf).isfinite().float() if local
                  else torch.ones((), device=params[0].device if params else "cpu"))
        mesh = next((p.device_mesh for p in params if hasattr(p, "device_mesh")), None)
        if mesh is not None:  # FSDP: the ranks sharing these weights decide alike (not any other group, such
            # as the one an in-process vLLM engine initialises for itself)
            group = mesh.get_group() if mesh.ndim == 1 else None
            finite = finite.to(params[0].device)
            torch.distributed.all_reduce(finite, op=torch.distributed.ReduceOp.MIN, group=group)
        if bool(finite):
            continue
        lr = optimizer.param_groups[0].get("lr")
        raise NonFiniteWeights(f"{LR_KEYS.get(role, 'training.lr')}: the {role}'s update at lr {lr:g} made its "
                               f"weights NaN/Inf although the gradients were finite (norm {norms[role]:.3g}): the "
                               "step is too large; lower the learning rate. The run stopped before saving them "
                               "(earlier checkpoints are as they were)")


class NonFiniteWeights(ConfigError):
    """A finite update overflowed the weights: a learning rate out of range (exit 2, one line)."""


class TrainingState(AwakeBudget):
    """`state_dict()` / `load_state_dict()` of a trainable worker's non-weight state: AdamW
    moments, learning-rate schedule and the mini-batch shuffler (`self.optimizer`,
    `self.scheduler`, `self.generator`; the generator may be None). The weights are
    `self.model`'s own, saved as Hugging Face folders."""

    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    generator: torch.Generator | None

    def state_dict(self) -> dict:
        state = {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()}
        if self.generator is not None:
            state["generator"] = self.generator.get_state()
        return state

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        if self.generator is not None:
            self.generator.set_state(state["generator"])


def autocast_context(device: torch.device, dtype: torch.dtype):
    """bf16/fp16 autocast over fp32 master weights; plain fp32 runs without it."""
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)
