"""Real verl's keys of its other training engines, on this project's FSDP2 engine: `model_engine`
(`--config-name=ppo_megatron_trainer` is `model_engine=megatron`), the Megatron engine's `megatron.*`
(actor, reference, critic), its optimizer's keys (`lr_decay_style`, `min_lr`, ...), VeOmni's and
TorchTitan's sections and optimizer keys, and `fsdp_turbo`.

Real verl 0.9.1 picks the engine's config group with `model_engine` (dp | megatron | veomni | torchtitan):
its ppo_megatron_trainer.yaml is ppo_trainer with `model_engine: megatron`, whose actor/critic optimizer is
Megatron's (verl/utils/megatron/optimizer.py: lr, min_lr, clip_grad, weight_decay go to Megatron's
OptimizerConfig, betas do not; OptimizerParamScheduler with lr_decay_style, lr_warmup_init). Here:

    model_engine=megatron   the same update on FSDP2: Megatron's schedule (training.lr_scheduler,
                            min_lr_ratio = min_lr / lr) and its weight-decay groups (no decay on biases
                            and norm scales: training.weight_decay_1d=false)
    megatron.*_parallel_size  one note naming each: FSDP2 shards over the data-parallel devices instead;
                            context parallelism > 1: whole sequences per device, so the memory preflight's
                            refusal (a CUDA device, one process) says it is why (Translation.memory_reasons)
    model_engine=veomni     real verl's VeOmniEngine (workers/engine/veomni/transformer_impl.py):
                            veomni.optim.build_optimizer(module, lr, betas, weight_decay, optimizer_type):
                            AdamW, eps 1e-8, decay on every weight; build_lr_scheduler(train_steps=T, lr,
                            lr_min, lr_decay_style=lr_scheduler_type, lr_decay_ratio,
                            lr_warmup_ratio=lr_warmup_steps_ratio, lr_start) (VeOmni 0.1.11,
                            veomni/optim/lr_scheduler.py), with W = int(T x lr_warmup_steps_ratio)
                            (optim.lr_warmup_steps is not read) and, for step s (0-based):
                                s < W:    (lr_start + (lr - lr_start) s / max(1, W)) / lr
                                constant: 1
                                cosine:   D = int(T x lr_decay_ratio); s > D: lr_min / lr; else
                                          m + (1 - m) (1 + cos(pi p)) / 2, p = (s - W) / max(1, D - W),
                                          m = lr_min / lr
                            clipped at optim.clip_grad. Here: training.warmup_start_ratio = lr_start / lr,
                            min_lr_ratio = lr_min / lr, lr_decay_steps = D (verl/workers/optim.py
                            lr_multiplier); its lr_scheduler_type defaults to cosine there, and here
    model_engine=torchtitan real verl's TorchtitanEngine (workers/engine/torchtitan/transformer_impl.py):
                            OptimizersContainer, one group: optimizer `name` (AdamW) with lr, eps, betas,
                            weight_decay on every weight; LRSchedulersContainer.Config(warmup_steps=W,
                            decay_type, min_lr_factor), W = lr_warmup_steps when > 0, else
                            int(lr_warmup_steps_ratio x T); built by TorchTitan's Trainer over its own
                            training.steps N, which real verl does not set (10000, TorchTitan's default);
                            decay_ratio unset: N - W decay steps after one stable step
                            (torchtitan/components/lr_scheduler.py linear_warmup_stable_decay):
                                s < W:    (s + 1) / W
                                s = W:    1
                                after:    m + (1 - m) c, p = (s + 1 - (W + 1)) / (N - W), m = min_lr_factor,
                                          c = 1 - p (linear), 1 - sqrt(p) (sqrt), (1 + cos(pi p)) / 2 (cosine)
                            and clipped at TorchTitan's training.max_norm (1.0; optim.clip_grad is not read).
                            Here: training.warmup_from_first_step=true, lr_decay_steps = N, min_lr_ratio =
                            min_lr_factor, grad_clip 1.0; a run of more than N + 1 steps is refused (past N
                            TorchTitan's p > 1 takes the rate below m, and then below 0)
    veomni.*, torchtitan.*  parallel sizes in the same one note as Megatron's (Ulysses sequence parallelism
                            as context parallelism); offloads, kernels, compile, FSDP wrapping noted;
                            a checkpoint to load, QAT and MoE routing replay refused

A Megatron, VeOmni or TorchTitan key given without its model_engine is refused as real verl's Hydra refuses
it (not in its config), and the FSDP optimizer's schedule keys given with another engine likewise. The rows
are verl.compat.real_verl's (`ENTRIES`, spliced into its TABLE).
"""

from __future__ import annotations

from typing import Optional

from verl.compat.real_keys import (ACTOR, ARR, ROLLOUT, as_bool, as_float, as_int, custom, ignored, pick, refuse,
                                   same_value, to)
from verl.errors import ConfigError

REF = f"{ARR}.ref"
LAYOUT = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "virtual_pipeline_model_parallel_size",
          "context_parallel_size", "expert_model_parallel_size", "expert_tensor_parallel_size")
# Megatron's lr_decay_style -> our training.lr_scheduler (OptimizerParamScheduler.get_lr; WSD is refused)
DECAY_STYLES = {"constant": "constant", "linear": "linear", "cosine": "cosine", "inverse-square-root": "inverse_sqrt"}
MUON = ("muon_momentum", "muon_nesterov", "muon_split_qkv", "muon_scale_mode", "muon_coefficient_type",
        "muon_num_ns_steps", "muon_tp_mode", "muon_fp32_matmul_prec", "muon_extra_scale_factor",
        "muon_scalar_optimizer", "muon_match_adamw_update_rms", "use_layer_wise_distributed_optimizer")
# override_transformer_config entries with no effect on the update here: kernels, fusions, the pipeline's split
FUSIONS = ("gradient_accumulation_fusion", "apply_rope_fusion", "bias_activation_fusion", "masked_softmax_fusion",
           "bias_dropout_fusion", "persist_layer_norm", "attention_backend", "deallocate_pipeline_outputs",
           "num_layers_in_first_pipeline_stage", "num_layers_in_last_pipeline_stage",
           "account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split", "cross_entropy_loss_fusion",
           "cross_entropy_fusion_impl")
# ... and Megatron's MoE kernels and token dispatch (the Hugging Face model's own routing runs here)
MOE_KERNELS = ("moe_permute_fusion", "moe_token_dispatcher_type", "moe_enable_deepep", "moe_grouped_gemm",
               "moe_shared_expert_overlap", "moe_router_dtype")
RECOMPUTE = ("recompute_granularity", "recompute_method", "recompute_num_layers", "recompute_modules")
NOT_TESTED = "MoE models train on one device here (docs/moe.md)"


# the engines whose optimizer and schedule are translated here besides FSDP's and Megatron's
OTHER = {"veomni": "VeOmni", "torchtitan": "TorchTitan"}
TITAN_STEPS = 10000  # TorchTitan's TrainingConfig.steps default: its schedule's length under real verl
# each engine's optimizer keys outside the FSDP optimizer's (trainer/config/optim/<engine>.yaml)
OWN_OPTIM = {"veomni": ("lr_scheduler_type", "lr_min", "lr_start", "lr_decay_ratio"),
             "torchtitan": ("name", "eps", "decay_type", "min_lr_factor")}
SCHEDULE_KEYS = {"megatron": "lr_decay_style, min_lr and lr_warmup_steps(_ratio)",
                 "veomni": "lr_scheduler_type, lr_min, lr_start, lr_decay_ratio and lr_warmup_steps_ratio",
                 "torchtitan": "decay_type, min_lr_factor and lr_warmup_steps(_ratio)"}
TITAN_DECAY = {"linear": "linear", "sqrt": "sqrt", "cosine": "cosine"}
LABEL = {"megatron": "Megatron", **OTHER}


def engine(ctx) -> str:
    return ctx.get("model_engine") or "dp"


def section_of(key: str) -> str:
    return key.rsplit(".optim.", 1)[0]


def engine_only(ctx, key: str, name: str) -> bool:
    """True under model_engine=<name>; a key of that engine given without it is refused (real verl's
    Hydra has no such key there)."""
    if engine(ctx) == name:
        return True
    if ctx.given(key):
        raise ConfigError(f"real verl's {key} is read by its {LABEL[name]} engine only: give model_engine={name}, "
                          f"as real verl's config has the key only there")
    return False


def _megatron_only(ctx, key: str) -> bool:
    """True under model_engine=megatron; a key given without it is refused (real verl's Hydra has no such key)."""
    if engine(ctx) == "megatron":
        return True
    if ctx.given(key):
        raise ConfigError(f"real verl's {key} is read by its Megatron engine only: give model_engine=megatron "
                          f"(or --config-name=ppo_megatron_trainer), as real verl's config has the key only there")
    return False


def fsdp_only(ctx, key: str) -> bool:
    """True for the FSDP optimizer's schedule keys (lr_scheduler_type, min_lr_ratio, ...) under
    model_engine=dp; given with another engine they are refused (its optimizer config has no such key),
    except VeOmni's own lr_scheduler_type, which other_schedule reads."""
    name = engine(ctx)
    if name == "dp":
        return True
    if ctx.given(key) and key.rsplit(".", 1)[1] not in OWN_OPTIM.get(name, ()):
        raise ConfigError(f"real verl's {key} is not a key of its {LABEL[name]} optimizer (model_engine={name}): "
                          f"its schedule is {section_of(key)}.optim.{SCHEDULE_KEYS[name]}")
    return False


# ---------------------------------------------------------------------------
# Converters
# ---------------------------------------------------------------------------


def model_engine(value, ctx, key):
    name = pick(value, key, {"dp": "dp", "megatron": "megatron", "veomni": "veomni", "torchtitan": "torchtitan"},
                "; model_engine=dp (FSDP), megatron, veomni and torchtitan train here")
    if name == "dp":
        return {}
    if name == "veomni":
        ctx.notes.append("model_engine=veomni: trained on this project's FSDP2 engine with VeOmni's optimizer "
                         "settings (AdamW, decay on every weight; its schedule from optim.lr_scheduler_type, cosine "
                         "unless given, lr_min, lr_start, lr_decay_ratio and lr_warmup_steps_ratio); VeOmni's "
                         "engine keys are noted one by one below")
        return {}
    if name == "torchtitan":
        ctx.notes.append(f"model_engine=torchtitan: trained on this project's FSDP2 engine with TorchTitan's "
                         f"optimizer settings (AdamW, decay on every weight, gradients clipped at 1.0); its schedule "
                         f"warms up from the first step ((s + 1) / W, training.warmup_from_first_step=true) and "
                         f"decays (optim.decay_type, min_lr_factor) over TorchTitan's own training.steps "
                         f"{TITAN_STEPS}, as in real verl, which does not pass its step count on "
                         f"(training.lr_decay_steps={TITAN_STEPS}); TorchTitan's engine keys are noted one by one below")
        return {"training.warmup_from_first_step": True}
    ctx.notes.append("model_engine=megatron: trained on this project's FSDP2 engine with Megatron's optimizer "
                     "settings (lr_decay_style/min_lr schedule; no weight decay on biases and norm scales, "
                     "training.weight_decay_1d=false; Adam betas 0.9, 0.999); Megatron's engine keys are "
                     "noted one by one below")
    return {"training.weight_decay_1d": False}


def strategy(value, ctx, key):
    """actor/critic.strategy: fsdp, fsdp2; megatron / veomni / torchtitan with that model_engine (real verl's pairs)."""
    if value in ("fsdp", "fsdp2"):
        return {}
    if value in ("megatron", *OTHER):
        if engine(ctx) != value:
            hint = " (or --config-name=ppo_megatron_trainer)" if value == "megatron" else ""
            raise refuse(key, value, f"the {LABEL[value]} engine with another engine's optimizer config; give "
                                     f"model_engine={value}{hint}, real verl's config for it")
        return {}
    raise refuse(key, value, "its engine's own optimizer and schedule are not reproduced here; fsdp, fsdp2, and "
                             "megatron, veomni, torchtitan (each with its model_engine) train here, on FSDP2")


def optimizer(value, ctx, key):
    """AdamW (FSDP) | adam (Megatron's: decoupled weight decay, as AdamW; sgd and muon are refused)."""
    want = "adam" if engine(ctx) == "megatron" else "AdamW"
    if str(value) == want or (want == "AdamW" and str(value).lower() == "adamw"):
        return {}
    raise refuse(key, value, f"other optimizers; only {want!r} is accepted (AdamW here)")


def betas(value, ctx, key):
    if engine(ctx) == "megatron":
        ctx.notes.append(f"ignored {key}={value}: real verl's Megatron engine does not pass optim.betas to its "
                         f"optimizer (Megatron's adam_beta1/adam_beta2 0.9, 0.999 train there), as here")
        return {}
    if not same_value(value, [0.9, 0.999]):
        raise refuse(key, value, "other Adam betas; only [0.9, 0.999] is accepted")
    return {}


def decay_style(value, ctx, key):
    if not _megatron_only(ctx, key):
        return {}
    section = key.rsplit(".optim.", 1)[0]
    ours = "training.critic_lr_scheduler" if section == "critic" else "training.lr_scheduler"
    return {ours: pick(value, key, DECAY_STYLES, " (WSD: warmup-stable-decay)")}


def min_lr(value, ctx, key):
    """Megatron's absolute floor -> our fraction of the section's lr (its decay ends at min_lr)."""
    if not _megatron_only(ctx, key) or value is None:
        return {}
    section = key.rsplit(".optim.", 1)[0]
    floor, lr = as_float(value, key), as_float(ctx.get(f"{section}.optim.lr"), f"{section}.optim.lr")
    if not 0 <= floor <= lr:
        raise ConfigError(f"{key}: must be in [0, {section}.optim.lr={lr:g}] (Megatron's scheduler asserts "
                          f"lr >= min_lr >= 0), got {value}")
    return {"training.critic_min_lr_ratio" if section == "critic" else "training.min_lr_ratio": floor / lr}


def min_lr_ratio(value, ctx, key):
    """The FSDP cosine's floor (real verl reads it for cosine only; our constant schedule ignores it too)."""
    if not fsdp_only(ctx, key) or value is None:
        return {}
    ratio = as_float(value, key)
    if not 0 <= ratio <= 1:
        raise ConfigError(f"{key}: must be in [0, 1], got {value}")
    return {"training.critic_min_lr_ratio" if key.startswith("critic.") else "training.min_lr_ratio": ratio}


def _only_values(applies, allowed: tuple, why: str):
    """A key accepted, where `applies(ctx, key)`, only at the values that change nothing here."""
    def convert(value, ctx, key):
        if applies(ctx, key) and not any(same_value(value, a) or value == a for a in allowed):
            shown = " or ".join("null" if a is None else repr(a) for a in allowed)
            raise refuse(key, value, f"{why}; only {shown} is accepted")
        return {}
    return convert


def _noted(applies, note: str):
    """A key with no effect here, where `applies(ctx, key)`: one note line when given."""
    def convert(value, ctx, key):
        if applies(ctx, key) and ctx.given(key):
            ctx.notes.append(f"ignored {key}={value}: {note}")
        return {}
    return convert


REPLAY_MODES = {"disabled": "off", "R2": "pi_old", "R3": "engine"}


def router_replay(applies):
    """router_replay.mode (Megatron's, VeOmni's, TorchTitan's engine; the actor's older place): R2 replays the
    routing of the pi_old pass in the update (rollout.routing_replay: pi_old), R3 the rollout engine's, which
    real verl records with rollout.enable_rollout_routing_replay=True (rollout.routing_replay: engine)."""
    def convert(value, ctx, key):
        if not applies(ctx, key) or value is None:
            return {}
        mode = pick(value, key, REPLAY_MODES)
        if mode == "engine" and not as_bool(ctx.get(f"{ROLLOUT}.enable_rollout_routing_replay") or False,
                                            f"{ROLLOUT}.enable_rollout_routing_replay"):
            raise ConfigError(f"{key}=R3 replays the rollout's routing, which real verl records only with "
                              f"{ROLLOUT}.enable_rollout_routing_replay=True; give it")
        return {} if mode == "off" else {"rollout.routing_replay": mode}
    return convert


def rollout_routing_replay(value, ctx, key):
    """rollout.enable_rollout_routing_replay: the engine records each token's experts; replayed only with
    router_replay.mode=R3 (read there); alone, real verl records them and replays nothing: a note says so."""
    if as_bool(value, key) and not any(str(ctx.get(k)) == "R3" for k in ctx.given_keys if k.endswith("router_replay.mode")):
        ctx.notes.append(f"ignored {key}=True: without router_replay.mode=R3 real verl records the rollout's routing "
                         "and replays nothing")
    return {}


def megatron_only(*allowed, why: str):
    """A Megatron optimizer key accepted at the values that change nothing here."""
    return _only_values(_megatron_only, allowed, why)


def megatron_note(note: str):
    """A Megatron key with no effect here: one note line when given."""
    return _noted(_megatron_only, note)


SEQUENCE_SPLITS = (".context_parallel_size", ".ulysses_parallel_size")  # each sequence over several devices


def layout(value, ctx, key):
    """A Megatron parallel size (VeOmni's, TorchTitan's: engine_layout): record_layout."""
    _megatron_only(ctx, key)
    return record_layout(value, ctx, key)


def record_layout(value, ctx, key):
    """A parallel size, gathered into one note (layout_note); context (or Ulysses sequence) parallelism > 1
    also tells the memory preflight why a refusal matters."""
    size = 1 if value is None else as_int(value, key, low=1)
    ctx.layout[key] = size
    if key.endswith(SEQUENCE_SPLITS) and size > 1 and not key.startswith(REF):
        tokens = int(ctx.get("data.max_prompt_length") or 0) + int(ctx.get("data.max_response_length") or 0)
        kind = "Ulysses sequence parallelism" if key.endswith(".ulysses_parallel_size") else "context parallelism"
        ctx.memory_reasons.append(
            f"{key}={size}: real verl splits each sequence (up to {tokens} tokens) over {size} devices "
            f"({kind}); this engine holds whole sequences on each device, and by the memory estimate "
            f"they do not fit this card")
    return {}


def layout_note(ctx) -> list[str]:
    """One line naming every parallel size of the engine given, and what FSDP2 does instead."""
    if not ctx.layout:
        return []
    given = ", ".join(f"{k}={v}" for k, v in ctx.layout.items())
    parts = ["this engine (FSDP2) shards weights, gradients and optimizer state over the data-parallel devices "
             "instead of splitting layers (tensor, pipeline)"]
    if any(".expert_" in k for k in ctx.layout):
        parts.append(f"experts are sharded like any weights, not placed per expert-parallel rank ({NOT_TESTED})")
    if any(k.endswith(SEQUENCE_SPLITS) for k in ctx.layout):
        parts.append("sequences are not split (no context parallelism): each device holds whole sequences; on a "
                     "CUDA device the memory preflight refuses, naming the key, a run they do not fit (under Ray "
                     "the run meets the memory it meets)")
    return [f"ignored the {LABEL.get(engine(ctx), 'Megatron')} parallel sizes {given}: " + "; ".join(parts)]


def optimizer_offload(value, ctx, key):
    if not _megatron_only(ctx, key) or value is None:
        return {}
    return {"training.offload_optimizer": as_bool(value, key)}


def recompute(value, ctx, key):
    """override_transformer_config.recompute_*: activation recomputation -> our gradient checkpointing
    (memory only either way); a given model.enable_gradient_checkpointing wins."""
    if not _megatron_only(ctx, key) or value is None or not key.endswith(".recompute_granularity"):
        return {}
    if value not in ("full", "selective"):
        raise refuse(key, value, "no such recompute granularity; full, selective or null")
    gc_key = f"{ARR}.model.enable_gradient_checkpointing"
    if ctx.given(gc_key) or key.startswith("critic."):
        return {}
    ctx.notes.append(f"{key}={value}: model.enable_gradient_checkpointing=true (activation recomputation; memory "
                     f"and speed only)")
    return {"model.enable_gradient_checkpointing": True}


def transformer_override(value, ctx, key):
    """override_transformer_config.<name>: fusions, kernels and the pipeline's split are noted; MoE dispatch
    is noted; moe_aux_loss_coeff is training.router_aux_loss_coef; recompute_* goes to gradient checkpointing;
    anything else (it would change the model's computation) is refused."""
    _megatron_only(ctx, key)
    name = key.rsplit(".", 1)[1]
    if name in RECOMPUTE:
        return recompute(value, ctx, key)
    if name == "moe_aux_loss_coeff":  # Megatron's load-balancing loss: the family's own one here, per micro-batch
        return {"training.router_aux_loss_coef": as_float(value, key)}
    if name in FUSIONS:
        what = "Megatron's fused kernels and pipeline split: no effect on the update here"
    elif name in MOE_KERNELS:
        what = ("Megatron's MoE kernels and token dispatch; the Hugging Face model routes tokens here, in the "
                "compute dtype (docs/moe.md)")
    else:
        raise refuse(key, value, "changing Megatron's transformer config (this engine runs the Hugging Face model "
                                 f"as it is); accepted: {', '.join(RECOMPUTE + FUSIONS + MOE_KERNELS)}")
    if ctx.given(key):
        ctx.notes.append(f"ignored {key}={value}: {what}")
    return {}


def _ratio_of_lr(ctx, key: str, lr: float, what: str) -> float:
    """An absolute learning rate (lr_min, lr_start) over the section's lr, in [0, 1]."""
    value = as_float(ctx.get(key), key)
    if not 0 <= value <= lr:
        raise ConfigError(f"{key}: must be in [0, {section_of(key)}.optim.lr={lr:g}] ({what}), got {ctx.get(key)}")
    return value / lr


def _ours(section: str, names: dict) -> dict:
    """{training.<name> or training.critic_<name>: value} for the section's optimizer."""
    return {f"training.{'critic_' if section == 'critic' else ''}{k}": v for k, v in names.items()}


def _veomni_schedule(ctx, section: str) -> dict:
    """VeOmni's build_lr_scheduler as real verl's VeOmni engine calls it (the module docstring's formula)."""
    o = f"{section}.optim"
    total = ctx.total_steps()
    ratio = as_float(ctx.get(f"{o}.lr_warmup_steps_ratio"), f"{o}.lr_warmup_steps_ratio")
    if not 0 <= ratio <= 1:
        raise ConfigError(f"{o}.lr_warmup_steps_ratio: must be in [0, 1], got {ratio}")
    kind = ctx.get(f"{o}.lr_scheduler_type") if ctx.given(f"{o}.lr_scheduler_type") else "cosine"
    if kind == "linear":
        raise refuse(f"{o}.lr_scheduler_type", kind, "VeOmni's linear schedule (outside real verl's documented "
                                                     "constant | cosine) floors at a fixed 1e-7, not lr_min, by a "
                                                     "max rather than a blend; constant and cosine train here")
    kind = pick(kind, f"{o}.lr_scheduler_type", {"constant": "constant", "cosine": "cosine"}, " (VeOmni)")
    lr = as_float(ctx.get(f"{o}.lr"), f"{o}.lr")
    out = {"warmup_steps": int(total * ratio), "lr_scheduler": kind,
           "warmup_start_ratio": _ratio_of_lr(ctx, f"{o}.lr_start", lr, "the warm-up's first learning rate")}
    if kind == "cosine":
        decay = as_float(ctx.get(f"{o}.lr_decay_ratio"), f"{o}.lr_decay_ratio")
        if decay < 0:
            raise ConfigError(f"{o}.lr_decay_ratio: must be >= 0, got {decay}")
        out.update(min_lr_ratio=_ratio_of_lr(ctx, f"{o}.lr_min", lr, "the cosine's floor"),
                   lr_decay_steps=int(total * decay))
    return _ours(section, out)


def _torchtitan_schedule(ctx, section: str) -> dict:
    """TorchTitan's LRSchedulersContainer as real verl's TorchTitan engine configures it (the module
    docstring's formula): over TorchTitan's training.steps, which real verl leaves at its default."""
    o = f"{section}.optim"
    total = ctx.total_steps()
    if total > TITAN_STEPS + 1:
        raise ConfigError(f"trainer.total_training_steps: {total} steps, but real verl's TorchTitan engine runs its "
                          f"learning-rate schedule over TorchTitan's training.steps ({TITAN_STEPS}, which real verl "
                          f"does not set): past step {TITAN_STEPS + 1} its rate falls below {o}.min_lr_factor x lr "
                          f"and then below 0; give at most {TITAN_STEPS + 1} steps")
    steps = as_int(ctx.get(f"{o}.lr_warmup_steps") if ctx.get(f"{o}.lr_warmup_steps") is not None else -1,
                   f"{o}.lr_warmup_steps")
    if steps <= 0:
        ratio = as_float(ctx.get(f"{o}.lr_warmup_steps_ratio"), f"{o}.lr_warmup_steps_ratio")
        if not 0 <= ratio <= 1:
            raise ConfigError(f"{o}.lr_warmup_steps_ratio: must be in [0, 1], got {ratio}")
        steps = int(ratio * total)
    floor = as_float(ctx.get(f"{o}.min_lr_factor"), f"{o}.min_lr_factor")
    if not 0 <= floor <= 1:
        raise ConfigError(f"{o}.min_lr_factor: must be in [0, 1], got {ctx.get(f'{o}.min_lr_factor')}")
    kind = pick(ctx.get(f"{o}.decay_type"), f"{o}.decay_type", TITAN_DECAY, " (TorchTitan)")
    return _ours(section, {"warmup_steps": min(steps, TITAN_STEPS), "lr_scheduler": kind, "min_lr_ratio": floor,
                           "lr_decay_steps": TITAN_STEPS})


def other_schedule(value, ctx, key) -> Optional[dict]:
    """Under model_engine=veomni|torchtitan: the section's whole schedule, on its lr_warmup_steps_ratio row
    (phase 2: the run's steps are known); the lr_warmup_steps row sets nothing (VeOmni's engine does not read
    it: a note). None under dp and megatron (the FSDP converters go on)."""
    name = engine(ctx)
    if name not in OTHER:
        return None
    if key.endswith(".lr_warmup_steps"):
        if name == "veomni" and ctx.given(key) and value is not None and as_int(value, key) > 0:
            ctx.notes.append(f"ignored {key}={value}: real verl's VeOmni engine passes only "
                             f"lr_warmup_steps_ratio to VeOmni's scheduler (W = int(ratio x total steps)), as here")
        return {}
    section = section_of(key)
    return _veomni_schedule(ctx, section) if name == "veomni" else _torchtitan_schedule(ctx, section)


def titan_clip(value, ctx, key) -> Optional[dict]:
    """Under model_engine=torchtitan: the gradients are clipped at TorchTitan's training.max_norm (1.0), as real
    verl's engine clips them, whatever optim.clip_grad says (a note when it says otherwise); None elsewhere."""
    if engine(ctx) != "torchtitan":
        return None
    if ctx.given(key) and value is not None and not same_value(value, 1.0):
        ctx.notes.append(f"ignored {key}={value}: real verl's TorchTitan engine clips at TorchTitan's "
                         f"training.max_norm (1.0), not optim.clip_grad; 1.0 here too")
    return _ours(section_of(key), {"grad_clip": 1.0})


def _of(name: str):
    return lambda ctx, key: engine_only(ctx, key, name)


def own_optim_key(name: str):
    """A VeOmni / TorchTitan optimizer key read by other_schedule: refused without its model_engine."""
    def convert(value, ctx, key):
        engine_only(ctx, key, name)
        return {}
    return convert


def engine_note(name: str, note: str):
    """A VeOmni / TorchTitan engine key with no effect on the update here: one note line when given."""
    return _noted(_of(name), note)


def engine_only_value(name: str, *allowed, why: str):
    """A VeOmni / TorchTitan key accepted at the values that change nothing here."""
    return _only_values(_of(name), allowed, why)


def engine_layout(name: str):
    def convert(value, ctx, key):
        if engine_only(ctx, key, name):
            record_layout(value, ctx, key)
        return {}
    return convert


def engine_optimizer_offload(name: str):
    def convert(value, ctx, key):
        if not engine_only(ctx, key, name) or value is None:
            return {}
        return {"training.offload_optimizer": as_bool(value, key)}
    return convert


# ---------------------------------------------------------------------------
# The rows
# ---------------------------------------------------------------------------

_MEMORY = "memory only"
_BRIDGE = ("how Megatron reads the Hugging Face weights (mbridge); here they load from model.path as they are")
_DIST_CKPT = ("Megatron's distributed checkpoint of the initial weights (converted from model.path); here the weights "
              "load from model.path itself")


def _engine_rows(section: str, role: str) -> list:
    m = f"{section}.megatron"
    rows = [(f"{m}.{k}", custom(layout, "(noted: FSDP2 shards instead)", note="one note names every parallel size; "
                                "context parallelism > 1: the memory preflight says it is why a run cannot fit"))
            for k in LAYOUT]
    rows += [
        (f"{m}.param_offload", custom(megatron_note(f"parameter offload: {_MEMORY}"), "(ignored)", note=_MEMORY)),
        (f"{m}.grad_offload", custom(megatron_note(f"gradient offload: {_MEMORY}"), "(ignored)", note=_MEMORY)),
        (f"{m}.use_mbridge", custom(megatron_note(_BRIDGE), "(ignored)", note=_BRIDGE)),
        (f"{m}.vanilla_mbridge", custom(megatron_note(_BRIDGE), "(ignored)", note=_BRIDGE)),
        (f"{m}.use_dist_checkpointing", custom(megatron_note(_DIST_CKPT), "(ignored)", note=_DIST_CKPT)),
        (f"{m}.dist_checkpointing_path", custom(megatron_note(_DIST_CKPT), "(ignored)", note=_DIST_CKPT)),
        (f"{m}.override_transformer_config.*", custom(transformer_override, "model.enable_gradient_checkpointing "
                                                      "(recompute_granularity)", note="recompute_* -> gradient "
                                                      "checkpointing; fusions, kernels, MoE dispatch noted; others "
                                                      "refused")),
        (f"{m}.router_replay.mode", custom(router_replay(_megatron_only), "rollout.routing_replay",
                                           note="R2 -> pi_old, R3 -> engine (docs/moe.md)")),
        (f"{m}.*", custom(megatron_note("Megatron engine settings: no effect on the update here"), "(ignored)",
                          note="Megatron engine settings")),
    ]
    if role == "actor":
        rows.append((f"{m}.optimizer_offload", custom(optimizer_offload, "training.offload_optimizer",
                                                      note=_MEMORY)))
    else:
        rows.append((f"{m}.optimizer_offload", custom(megatron_note(f"optimizer offload: {_MEMORY}"), "(ignored)",
                                                      note=_MEMORY)))
    rows += _veomni_rows(section, role) + _torchtitan_rows(section, role)
    return rows


_KERNELS = "kernel choices: the Hugging Face model's own kernels run here; no effect on the update"
_FSDP = "FSDP sharding and wrapping: FSDP2 shards here; memory and speed only"
_SPEED = "compile, entropy chunking, padding buckets: speed and memory only"
_CKPT_LOAD = "loading the engine's own checkpoint at start; here the weights load from model.path (resume: checkpoint.*)"


def _veomni_rows(section: str, role: str) -> list:
    v, name = f"{section}.veomni", "veomni"
    rows = [(f"{v}.{k}", custom(engine_layout(name), "(noted: FSDP2 shards instead)",
                                note="in the parallel-sizes note; ulysses > 1: the memory preflight says it is why"))
            for k in ("fsdp_size", "ulysses_parallel_size", "expert_parallel_size")]
    rows += [
        (f"{v}.load_checkpoint_path", custom(engine_only_value(name, None, why=_CKPT_LOAD), "(only null)",
                                             note=_CKPT_LOAD)),
        (f"{v}.router_replay.mode", custom(router_replay(_of(name)), "rollout.routing_replay",
                                           note="R2 -> pi_old, R3 -> engine (docs/moe.md)")),
        (f"{v}.qat_implementation", custom(engine_only_value(name, "none", why="quantization-aware training"),
                                           "(only none)", note="other values refused: quantization-aware training")),
        (f"{v}.mixed_precision", custom(engine_only_value(name, True, why=(
            "VeOmni without mixed precision; here model.dtype sets the compute dtype over float32 weights "
            "(model.dtype=float32 computes in float32)")), "(only true)", note="bf16 compute, float32 weights")),
        *[(f"{v}.{k}", custom(engine_note(name, _KERNELS), "(ignored)", note="kernels")) for k in (
            "attn_implementation", "moe_implementation", "cross_entropy_loss_implementation", "rms_norm_implementation",
            "swiglu_mlp_implementation", "rotary_pos_emb_implementation", "rms_norm_gated_implementation",
            "causal_conv1d_implementation", "chunk_gated_delta_rule_implementation",
            "load_balancing_loss_implementation", "dsa_indexer_implementation", "dsa_attention_implementation",
            "mhc_implementation", "force_use_huggingface")],
        *[(f"{v}.{k}", custom(engine_note(name, _FSDP), "(ignored)", note=_MEMORY)) for k in (
            "enable_full_shard", "forward_prefetch", "init_device", "basic_modules", "enable_fsdp_offload")],
        (f"{v}.*", custom(engine_note(name, "VeOmni engine settings (offloads, compile, seeds, checkpoint format): "
                                            "no effect on the update here"), "(ignored)",
                          note="VeOmni engine settings: " + _SPEED)),
    ]
    return rows + [_offload_row(v, name, role)]


def _torchtitan_rows(section: str, role: str) -> list:
    t, name = f"{section}.torchtitan", "torchtitan"
    rows = [(f"{t}.{k}", custom(engine_layout(name), "(noted: FSDP2 shards instead)",
                                note="in the parallel-sizes note; context > 1: the memory preflight says it is why"))
            for k in ("data_parallel_size", "data_parallel_replicate_size", "data_parallel_shard_size",
                      "tensor_parallel_size", "expert_parallel_size", "pipeline_parallel_size",
                      "context_parallel_size")]
    rows += [
        (f"{t}.dtype", custom(engine_only_value(name, "bfloat16", "bf16", why=(
            "another TorchTitan parameter dtype; here model.dtype sets the compute dtype (model.dtype=float32 "
            "computes in float32)")), "(only bfloat16)", note="model.dtype sets the compute dtype")),
        (f"{t}.attn_type", custom(engine_note(name, _KERNELS), "(ignored)", note="kernels")),
        (f"{t}.activation_checkpoint", custom(engine_note(
            name, "activation checkpointing: memory and speed only (model.enable_gradient_checkpointing here)"),
            "(ignored)", note=_MEMORY)),
        *[(f"{t}.{k}", custom(engine_note(name, _FSDP), "(ignored)", note=_MEMORY)) for k in (
            "wrap_policy.*", "reshard_after_forward", "forward_prefetch", "use_orig_params")],
        (f"{t}.*", custom(engine_note(name, "TorchTitan engine settings (offloads, compile, SPMD backend, RoPE "
                                            "cache length, seeds): no effect on the update here"), "(ignored)",
                          note="TorchTitan engine settings: " + _SPEED)),
    ]
    return rows + [_offload_row(t, name, role)]


def _offload_row(prefix: str, name: str, role: str) -> tuple:
    """<engine>.optimizer_offload: the actor's -> training.offload_optimizer; the others' noted (memory only)."""
    if role == "actor":
        return f"{prefix}.optimizer_offload", custom(engine_optimizer_offload(name), "training.offload_optimizer",
                                                     note=_MEMORY)
    return f"{prefix}.optimizer_offload", custom(engine_note(name, f"optimizer offload: {_MEMORY}"), "(ignored)",
                                                 note=_MEMORY)


def _optim_rows(section: str) -> list:
    o = f"{section}.optim"
    ours = "training.critic_lr_scheduler" if section == "critic" else "training.lr_scheduler"
    floor = "training.critic_min_lr_ratio" if section == "critic" else "training.min_lr_ratio"
    warm = "training.critic_warmup" if section == "critic" else "training.warmup"
    decay = "training.critic_lr_decay_steps" if section == "critic" else "training.lr_decay_steps"
    rows = [
        (f"{o}.optimizer", custom(optimizer, "(checked)", note="AdamW (FSDP) | adam (Megatron: AdamW's decoupled "
                                                               "weight decay); others are refused")),
        (f"{o}.betas", custom(betas, "(checked)", note="[0.9, 0.999]; Megatron's engine does not read it (a note)")),
        (f"{o}.min_lr_ratio", custom(min_lr_ratio, floor, note="the FSDP cosine's floor")),
        (f"{o}.lr_decay_style", custom(decay_style, ours, default="constant", note="Megatron: constant | linear | "
                                       "cosine | inverse-square-root; WSD is refused")),
        (f"{o}.min_lr", custom(min_lr, f"{floor} = min_lr / lr", default=0.0, note="Megatron's decay floor")),
        (f"{o}.lr_warmup_init", custom(megatron_only(0, 0.0, why="a warm-up from a learning rate above 0"),
                                       "(only 0)", note="Megatron")),
        (f"{o}.lr_decay_steps", custom(megatron_only(None, why="a decay over another step count than the run's"),
                                       "(only null: the run's steps)", note="Megatron")),
        (f"{o}.weight_decay_incr_style", custom(megatron_note(
            "real verl's Megatron engine starts and ends the weight decay at optim.weight_decay: constant, whatever "
            "the style"), "(ignored)", note="Megatron; constant there whatever the style")),
        (f"{o}.lr_wsd_decay_style", custom(megatron_note("used with lr_decay_style=WSD only"), "(ignored)")),
        (f"{o}.lr_wsd_decay_steps", custom(megatron_note("used with lr_decay_style=WSD only"), "(ignored)")),
        (f"{o}.use_checkpoint_opt_param_scheduler", custom(megatron_note(
            "a resume restores the schedule's step from the checkpoint; its settings are the command line's"),
            "(ignored)")),
        (f"{o}.use_precision_aware_optimizer", custom(megatron_note(
            "with float32 moments and gradients (the dtypes below): the same update, memory only"), "(ignored)")),
        *[(f"{o}.{d}", custom(megatron_only("fp32", "float32", "32", why="Adam moments or gradient buffers below "
                                            "float32"), "(only fp32)", note="Megatron")) for d in (
            "main_grads_dtype", "exp_avg_dtype", "exp_avg_sq_dtype")],
        *[(f"{o}.{k}", custom(megatron_note("used with optimizer=muon only (refused)"), "(ignored)")) for k in MUON],
        # VeOmni's optimizer (model_engine=veomni): read by other_schedule on the lr_warmup_steps_ratio row
        (f"{o}.lr_min", custom(own_optim_key("veomni"), f"{floor} = lr_min / lr (cosine)", default=0.0,
                               note="VeOmni's cosine floor")),
        (f"{o}.lr_start", custom(own_optim_key("veomni"), f"{warm}_start_ratio = lr_start / lr", default=0.0,
                                 note="VeOmni's warm-up start")),
        (f"{o}.lr_decay_ratio", custom(own_optim_key("veomni"), f"{decay} = int(ratio x total steps) (cosine)",
                                       default=1.0, note="VeOmni: the cosine ends there, then lr_min")),
        # TorchTitan's optimizer (model_engine=torchtitan)
        (f"{o}.name", custom(engine_only_value("torchtitan", "AdamW", why="other TorchTitan optimizers (Adam's L2 decay "
                                                                      "is not AdamW's)"), "(only AdamW)",
                             default="AdamW", note="TorchTitan")),
        (f"{o}.eps", custom(engine_only_value("torchtitan", 1e-8, why="another Adam epsilon (AdamW's 1e-8 here)"),
                            "(only 1e-8)", default=1e-8, note="TorchTitan")),
        (f"{o}.decay_type", custom(own_optim_key("torchtitan"), f"{ours} (linear | sqrt | cosine)",
                                   default="linear", note="TorchTitan: over its training.steps 10000, as real verl")),
        (f"{o}.min_lr_factor", custom(own_optim_key("torchtitan"), floor, default=0.0,
                                      note="TorchTitan's decay floor")),
    ]
    return rows


ENTRIES: list[tuple[str, dict]] = [
    ("model_engine", custom(model_engine, "training.weight_decay_1d (megatron: false), warmup_from_first_step "
                                          "(torchtitan: true)", default="dp",
                            note="dp | megatron (--config-name=ppo_megatron_trainer) | veomni | torchtitan, all on "
                                 "FSDP2 here with that engine's optimizer and schedule")),
    (f"{ACTOR}.strategy", custom(strategy, "(checked)", note="fsdp, fsdp2; megatron, veomni, torchtitan with that "
                                                            "model_engine")),
    ("critic.strategy", custom(strategy, "(checked)", note="as the actor's")),
    (f"{ACTOR}.fsdp_config.strategy", ignored("fsdp | fsdp2 | fsdp_turbo: FSDP2 here, the same update")),
    (f"{ACTOR}.fsdp_config.turbo_config.*", ignored("fsdp_turbo's layout over devices: FSDP2 shards here")),
    (f"{ACTOR}.router_replay.mode", custom(router_replay(_megatron_only), "rollout.routing_replay",
                                           note="older place of megatron.router_replay.mode")),
    (f"{ROLLOUT}.enable_rollout_routing_replay", custom(rollout_routing_replay, "(read: router_replay.mode)",
                                                        real_default=False,
                                                        note="the engine's routing, replayed with R3")),
    ("critic.nccl_timeout", ignored("the actor's actor_rollout_ref.nccl_timeout is the one timeout here")),
    *_engine_rows(ACTOR, "actor"), *_engine_rows("critic", "critic"), *_engine_rows(REF, "ref"),
    *_optim_rows(ACTOR), *_optim_rows("critic"),
]
