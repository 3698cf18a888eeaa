"""`training` section: steps, batch arithmetic, optimizer, and the memory/speed switches of the update."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from verl.config.keys import Section, derived, key

DEFAULT_DIFF_WARN = 0.1  # training.logprob_diff_warn: bf16 engine vs actor is ~0.03 on a GPU
FP8_DIFF_WARN = 0.25  # under rollout.quantization: fp8 (block-FP8 weights move each log-prob further)
SCHEDULES = ("constant", "linear", "cosine", "inverse_sqrt", "sqrt")


@dataclass
class TrainingConfig(Section):
    SECTION = "training"
    total_steps: int = key(20, ge=1, resume_safe=True)
    batch_size: int = key(8, ge=1)  # prompts per step
    num_epochs: int = key(1, ge=1)  # passes over each rollout batch (PPO epochs)
    mini_batch_size: Optional[int] = key(None, ge=1)  # sequences per optimizer step; None = whole batch
    # Draw each epoch's mini-batches at random (when there are several, or several epochs); false:
    # contiguous slices in batch order, the same every epoch (real verl's actor.shuffle: false)
    shuffle_minibatches: bool = True
    # sequences per forward/backward; None = auto: 4, or the largest divisor of mini_batch_size below 4
    # (micro-batching splits the same update, so only memory and speed depend on it; a note says so)
    micro_batch_size: Optional[int] = key(None, ge=1, resume_safe=True)
    max_tokens_per_micro_batch: Optional[int] = key(None, ge=1, resume_safe=True)  # token-budget micro-batching
    # Padding-free micro-batches (verl.workers.packing). None = auto: packed on a CUDA device (the
    # single-process backend), padded on the CPU and under Ray; a model that cannot be packed then
    # runs padded, with one log line. true asks for packing and fails when the model cannot.
    use_packed_samples: Optional[bool] = key(None, resume_safe=True)
    packed_by_default: bool = derived(False)  # packing chosen by auto, not asked for (verl/config/auto.py)
    grad_clip: float = key(1.0, ge=0)
    # Mixture-of-experts models: the router's load-balancing loss (the family's own, as transformers computes
    # it) joins the actor's loss times this, per micro-batch (docs/moe.md); 0: not added (real verl's FSDP
    # actor adds none; Megatron's moe_aux_loss_coeff maps here). Expert load is logged either way.
    router_aux_loss_coef: float = key(0.0, ge=0)
    lr: float = key(1e-5, gt=0)
    critic_lr: Optional[float] = key(None, gt=0)  # None -> 10 x lr
    weight_decay: float = key(0.0, ge=0)
    # false: no weight decay on 1-D weights (biases, norm scales), as Megatron's optimizer (actor and critic)
    weight_decay_1d: bool = True
    # after the warm-up: constant, or a decay over the remaining steps to min_lr_ratio x lr (linear, cosine;
    # sqrt: 1 - sqrt(progress), TorchTitan's; inverse_sqrt: lr sqrt(warmup_steps / step), floored there);
    # verl/workers/optim.py lr_multiplier
    lr_scheduler: str = key("constant", choices=SCHEDULES)
    min_lr_ratio: float = key(0.0, ge=0, unit="[0, 1]")
    warmup_steps: int = key(0, ge=0)
    # the warm-up starts at warmup_start_ratio x lr instead of 0 (VeOmni's lr_start / lr)
    warmup_start_ratio: float = key(0.0, ge=0, unit="[0, 1]")
    # true: the warm-up's first step already runs at lr / warmup_steps, full lr from step warmup_steps - 1
    # (TorchTitan's); false: at 0, full lr from step warmup_steps (transformers', Megatron's, VeOmni's)
    warmup_from_first_step: bool = False
    # the step the decay ends at, min_lr_ratio x lr after it; None: total_steps (VeOmni's
    # int(lr_decay_ratio x steps); TorchTitan's own training.steps under real verl)
    lr_decay_steps: Optional[int] = key(None, ge=0)
    critic_warmup_steps: Optional[int] = key(None, ge=0)  # the critic's own warm-up; None -> warmup_steps
    # the critic's own optimizer settings (real verl's critic.optim has its own); None -> the actor's above
    critic_weight_decay: Optional[float] = key(None, ge=0)
    critic_grad_clip: Optional[float] = key(None, ge=0)
    critic_lr_scheduler: Optional[str] = key(None, choices=SCHEDULES)
    critic_min_lr_ratio: Optional[float] = key(None, ge=0, unit="[0, 1]")
    critic_warmup_start_ratio: Optional[float] = key(None, ge=0, unit="[0, 1]")
    critic_lr_decay_steps: Optional[int] = key(None, ge=0)
    val_every: int = key(0, ge=0, resume_safe=True)  # 0 = no periodic validation
    # wall-clock budget for this process; the step that crosses it is the last (0 = none)
    max_minutes: float = key(0.0, ge=0, resume_safe=True)
    max_bad_steps: int = key(3, ge=1, resume_safe=True)  # consecutive NaN/Inf steps before training stops
    # Runtime invariants (verl/trainer/invariants.py): the update's first mini-batch must be on-policy
    # (mean |log pi - log pi_old| <= on_policy_tol), and the engine's log-probs must match the actor's
    # (rollout/logprob_diff: a warning above logprob_diff_warn, a stop above logprob_diff_stop or after
    # 3 checks in a row above the warning level). false: neither is checked.
    check_invariants: bool = key(True, resume_safe=True)
    on_policy_tol: float = key(0.05, gt=0, resume_safe=True)
    # None: DEFAULT_DIFF_WARN, or FP8_DIFF_WARN under rollout.quantization: fp8 (the FP8 engine's log-probs
    # differ from the actor's by design; a sync that did not land, or wrong scales, still exceed it)
    logprob_diff_warn: Optional[float] = key(None, gt=0, resume_safe=True)
    logprob_diff_stop: float = key(1.0, gt=0, resume_safe=True)
    logprob_chunk_size: int = key(1024, ge=1, resume_safe=True)  # tokens per chunk when computing log-probs/entropy
    # Keep the update's logits ((response tokens, vocab) in model.dtype) for its backward instead of
    # recomputing them chunk by chunk: faster, 2 bytes x vocab more memory per response token in bf16
    # (the token budget of verl.workers.memory_budget counts them). None = auto: on for the
    # single-process actor on a CUDA device, off on the CPU and under Ray.
    logprob_keep_logits: Optional[bool] = key(None, resume_safe=True)
    auto_note: str = derived("")  # what auto chose for the update's speed switches, on a GPU (logged)
    micro_note: str = derived("")  # the micro-batch auto chose, when it is not the usual 4 (logged)
    # One optimizer step per batch (num_epochs 1, one mini-batch, no KL in the reward): pi_old is the
    # policy the update starts from, so its first forward gives log pi_old; no separate no-grad pass
    old_log_probs_from_update: bool = True
    offload_optimizer: bool = key(False, resume_safe=True)
    # Before any weights load on a CUDA device (one process), each stage's peak memory is estimated from
    # the config and the model's config.json (verl/trainer/memory_plan.py; `verl plan CONFIG` prints it):
    # a config that cannot fit the card is refused in one line naming the keys that would make it fit
    # (exit 2), a set training.max_tokens_per_micro_batch that is too large is lowered with a note.
    # false: no check (the run meets the memory it meets)
    memory_preflight: bool = key(True, resume_safe=True)
    offload_idle_models: bool = key(False, resume_safe=True)
