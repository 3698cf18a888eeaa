"""Real verl's keys of its other training engines, on this project's FSDP2 engine: `model_engine`
(`--config-name=ppo_megatron_trainer` is `model_engine=megatron`), the Megatron engine's `megatron.*`
(actor, reference, critic), its optimizer's keys (`lr_decay_style`, `min_lr`, ...), VeOmni's and
TorchTitan's sections, and `fsdp_turbo`.

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
    veomni, torchtitan      refused: their optimizers' schedules are not reproduced here

A Megatron key given without model_engine=megatron is refused as real verl's Hydra refuses it (not in its
config), and the FSDP optimizer's schedule keys given with it likewise. The rows are verl.compat.real_verl's
(`ENTRIES`, spliced into its TABLE).
"""

from __future__ import annotations

from verl.compat.real_keys import (ACTOR, ARR, as_bool, as_float, as_int, custom, ignored, pick, refuse, same_value,
                                   to)
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
NOT_TESTED = "MoE models are not tested here yet"


def engine(ctx) -> str:
    return ctx.get("model_engine") or "dp"


def _megatron_only(ctx, key: str) -> bool:
    """True under model_engine=megatron; a key given without it is refused (real verl's Hydra has no such key)."""
    if engine(ctx) == "megatron":
        return True
    if ctx.given(key):
        raise ConfigError(f"real verl's {key} is read by its Megatron engine only: give model_engine=megatron "
                          f"(or --config-name=ppo_megatron_trainer), as real verl's config has the key only there")
    return False


def fsdp_only(ctx, key: str) -> bool:
    """True for the FSDP optimizer's keys (lr_scheduler_type, min_lr_ratio, ...) outside model_engine=megatron;
    given with it they are refused (real verl's Megatron optimizer config has no such key)."""
    if engine(ctx) != "megatron":
        return True
    if ctx.given(key):
        section = key.rsplit(".optim.", 1)[0]
        raise ConfigError(f"real verl's {key} is not a key of its Megatron optimizer (model_engine=megatron): "
                          f"its schedule is {section}.optim.lr_decay_style, min_lr and lr_warmup_steps(_ratio)")
    return False


# ---------------------------------------------------------------------------
# Converters
# ---------------------------------------------------------------------------


def model_engine(value, ctx, key):
    name = pick(value, key, {"dp": "dp", "megatron": "megatron", "veomni": None, "torchtitan": None},
                "; model_engine=dp (FSDP) and megatron train here")
    if name is None:
        raise refuse(key, value, f"real verl's {value} engine builds its own optimizer and learning-rate schedule "
                                 f"({value}'s own formulas, not reproduced here); model_engine=dp (FSDP) and megatron "
                                 f"train here, on this project's FSDP2 engine")
    if name == "dp":
        return {}
    ctx.notes.append("model_engine=megatron: trained on this project's FSDP2 engine with Megatron's optimizer "
                     "settings (lr_decay_style/min_lr schedule; no weight decay on biases and norm scales, "
                     "training.weight_decay_1d=false; Adam betas 0.9, 0.999); Megatron's engine keys are "
                     "noted one by one below")
    return {"training.weight_decay_1d": False}


def strategy(value, ctx, key):
    """actor/critic.strategy: fsdp, fsdp2; megatron with model_engine=megatron (real verl's pair)."""
    if value in ("fsdp", "fsdp2"):
        return {}
    if value == "megatron":
        if engine(ctx) != "megatron":
            raise refuse(key, value, "the Megatron engine with the FSDP optimizer config; give model_engine=megatron "
                                     "(or --config-name=ppo_megatron_trainer), real verl's config for it")
        return {}
    raise refuse(key, value, "its engine's own optimizer and schedule are not reproduced here; fsdp, fsdp2 and "
                             "megatron (with model_engine=megatron) train here, on FSDP2")


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


def megatron_only(*allowed, why: str):
    """A Megatron optimizer key accepted at the values that change nothing here."""
    def convert(value, ctx, key):
        if _megatron_only(ctx, key) and not any(same_value(value, a) for a in allowed):
            shown = " or ".join("null" if a is None else repr(a) for a in allowed)
            raise refuse(key, value, f"{why}; only {shown} is accepted")
        return {}
    return convert


def megatron_note(note: str):
    """A Megatron key with no effect here: one note line when given."""
    def convert(value, ctx, key):
        if _megatron_only(ctx, key) and ctx.given(key):
            ctx.notes.append(f"ignored {key}={value}: {note}")
        return {}
    return convert


def layout(value, ctx, key):
    """A Megatron parallel size: gathered into one note (layout_note); context parallelism > 1 also
    tells the memory preflight why a refusal matters."""
    _megatron_only(ctx, key)
    size = 1 if value is None else as_int(value, key, low=1)
    ctx.layout[key] = size
    if key.endswith(".context_parallel_size") and size > 1 and not key.startswith(REF):
        tokens = int(ctx.get("data.max_prompt_length") or 0) + int(ctx.get("data.max_response_length") or 0)
        ctx.memory_reasons.append(
            f"{key}={size}: real verl splits each sequence (up to {tokens} tokens) over {size} devices "
            f"(context parallelism); this engine holds whole sequences on each device, and by the memory estimate "
            f"they do not fit this card")
    return {}


def layout_note(ctx) -> list[str]:
    """One line naming every Megatron parallel size given, and what FSDP2 does instead."""
    if not ctx.layout:
        return []
    given = ", ".join(f"{k}={v}" for k, v in ctx.layout.items())
    parts = ["this engine (FSDP2) shards weights, gradients and optimizer state over the data-parallel devices "
             "instead of splitting layers (tensor, pipeline)"]
    if any(".expert_" in k for k in ctx.layout):
        parts.append(f"experts are sharded like any weights, not placed per expert-parallel rank ({NOT_TESTED})")
    if any(k.endswith(".context_parallel_size") for k in ctx.layout):
        parts.append("sequences are not split (no context parallelism): each device holds whole sequences; on a "
                     "CUDA device the memory preflight refuses, naming the key, a run they do not fit (under Ray "
                     "the run meets the memory it meets)")
    return [f"ignored the Megatron parallel sizes {given}: " + "; ".join(parts)]


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
    is noted (MoE models are not tested here yet); recompute_* goes to gradient checkpointing; anything else (it would change the
    model's computation) is refused."""
    _megatron_only(ctx, key)
    name = key.rsplit(".", 1)[1]
    if name in RECOMPUTE:
        return recompute(value, ctx, key)
    if name in FUSIONS:
        what = "Megatron's fused kernels and pipeline split: no effect on the update here"
    elif name in MOE_KERNELS:
        what = (f"Megatron's MoE kernels and token dispatch; the Hugging Face model routes tokens here, in the "
                f"compute dtype ({NOT_TESTED})")
    else:
        raise refuse(key, value, "changing Megatron's transformer config (this engine runs the Hugging Face model "
                                 f"as it is); accepted: {', '.join(RECOMPUTE + FUSIONS + MOE_KERNELS)}")
    if ctx.given(key):
        ctx.notes.append(f"ignored {key}={value}: {what}")
    return {}


def other_engine_section(value, ctx, key):
    name = key.split(".")[2] if key.startswith(ARR) else key.split(".")[1]
    raise refuse(key, value, f"real verl's {name} engine (model_engine={name}) reads it; that engine's optimizer "
                             f"and schedule are not reproduced here")


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
        (f"{m}.router_replay.mode", custom(megatron_only("disabled", why="replaying MoE routing (R2/R3)"),
                                           "(only disabled)", note="other values refused: replaying MoE routing")),
        (f"{m}.*", custom(megatron_note("Megatron engine settings: no effect on the update here"), "(ignored)",
                          note="Megatron engine settings")),
    ]
    if role == "actor":
        rows.append((f"{m}.optimizer_offload", custom(optimizer_offload, "training.offload_optimizer",
                                                      note=_MEMORY)))
    else:
        rows.append((f"{m}.optimizer_offload", custom(megatron_note(f"optimizer offload: {_MEMORY}"), "(ignored)",
                                                      note=_MEMORY)))
    for other in ("veomni", "torchtitan"):
        rows.append((f"{section}.{other}.*", custom(other_engine_section, "(refused)",
                                                    note=f"model_engine={other} is refused")))
    return rows


def _optim_rows(section: str) -> list:
    o = f"{section}.optim"
    ours = "training.critic_lr_scheduler" if section == "critic" else "training.lr_scheduler"
    floor = "training.critic_min_lr_ratio" if section == "critic" else "training.min_lr_ratio"
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
    ]
    return rows


ENTRIES: list[tuple[str, dict]] = [
    ("model_engine", custom(model_engine, "training.weight_decay_1d (megatron: false)", default="dp",
                            note="dp | megatron (--config-name=ppo_megatron_trainer), both on FSDP2 here; veomni and "
                                 "torchtitan are refused")),
    (f"{ACTOR}.strategy", custom(strategy, "(checked)", note="fsdp, fsdp2; megatron with model_engine=megatron")),
    ("critic.strategy", custom(strategy, "(checked)", note="as the actor's")),
    (f"{ACTOR}.fsdp_config.strategy", ignored("fsdp | fsdp2 | fsdp_turbo: FSDP2 here, the same update")),
    (f"{ACTOR}.fsdp_config.turbo_config.*", ignored("fsdp_turbo's layout over devices: FSDP2 shards here")),
    (f"{ACTOR}.router_replay.mode", custom(megatron_only("disabled", why="replaying MoE routing (R2/R3)"),
                                           "(only disabled)", note="older place of megatron.router_replay.mode")),
    ("critic.nccl_timeout", ignored("the actor's actor_rollout_ref.nccl_timeout is the one timeout here")),
    *_engine_rows(ACTOR, "actor"), *_engine_rows("critic", "critic"), *_engine_rows(REF, "ref"),
    *_optim_rows(ACTOR), *_optim_rows("critic"),
]
