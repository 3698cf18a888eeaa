"""Converters of real verl keys that read other keys of the same command line (`ctx`): each is
(value, ctx, key) -> {our_key: value}, refusing with one line a value that would change results and has no
equivalent here. The rows of verl.compat.real_verl.TABLE name them (`custom(conv.adv_estimator, ...)`).
"""

from __future__ import annotations

from typing import Optional

from verl.compat.real_keys import (ACTOR, ARR, MANUAL, ROLLOUT, as_bool, as_float, as_int, expand_path, pick, refuse,
                                   same_value)
from verl.compat.real_engines import fsdp_only, other_schedule, titan_clip
from verl.errors import ConfigError

# real adv_estimator -> (our algorithm.name preset, our adv_estimator); our own names are accepted too
ESTIMATORS = {
    "gae": ("ppo", "gae"), "grpo": ("grpo", "grpo"), "grpo_vectorized": ("grpo", "grpo"),
    "rloo": ("rloo", "rloo"), "rloo_vectorized": ("rloo", "rloo"), "remax": ("remax", "remax"),
    "reinforce_plus_plus": ("reinforce_pp", "reinforce_pp"),
    "reinforce_plus_plus_baseline": ("reinforce_pp_baseline", "reinforce_pp_baseline"),
    "dr_grpo": ("dr_grpo", "dr_grpo"), "reinforce_pp": ("reinforce_pp", "reinforce_pp"),
    "reinforce_pp_baseline": ("reinforce_pp_baseline", "reinforce_pp_baseline"),
    "gpg": ("gpg", "gpg"), "opo": ("opo", "opo"), "gdpo": ("gdpo", "gdpo"),
    "optimal_token_baseline": ("otb", "optimal_token_baseline"),
}
# real kl_loss_type / kl_penalty -> our kl_estimator (`full` and the straight-through "+" forms have none)
KL_TYPES = {"kl": "k1", "k1": "k1", "abs": "abs", "mse": "k2", "k2": "k2", "low_var_kl": "k3", "k3": "k3"}
LOSS_MODES = {"vanilla": "ppo", "gspo": "gspo", "cispo": "cispo", "sapo": "sapo", "gpg": "gpg", "geo_mean": "geo_mean",
              "clip_cov": "clip_cov", "kl_cov": "kl_cov"}
# a critic's fsdp_config.model_dtype other than fp32: the critic keeps float32 master weights here
MASTER_WEIGHTS = ("a critic trained in bf16/fp16 with no float32 master copy; the critic's master weights stay "
                  "float32 here (the actor's fsdp_config.model_dtype=bfloat16 maps to model.mixed_precision: pure)")
# model.mtp.enable_train: real verl trains the multi-token-prediction heads in its Megatron engine only
MTP_TRAINING = ("training the model's multi-token-prediction (MTP) heads: the Hugging Face forward trained here "
                "runs no MTP layer (transformers does not run MiMo's or DeepSeek-V3's), so there is no MTP loss to "
                "add, and real verl trains them in its Megatron engine only")
LOGGERS = {"console": "console", "wandb": "wandb", "tensorboard": "tensorboard"}
DTYPES = {"bf16": "bfloat16", "bfloat16": "bfloat16", "fp16": "float16", "float16": "float16",
          "fp32": "float32", "float32": "float32"}


def adv_estimator(value, ctx, key):
    preset, ours = pick(value, key, ESTIMATORS)
    # a sample alone in its group (n 1): real verl's estimators take baseline 0 (and std 1)
    out = {"algorithm.name": preset, "algorithm.adv_estimator": ours, "algorithm.group_of_one": "score"}
    if ours == "gpg":  # real verl's alpha: B / (samples with a nonzero reward)
        out["algorithm.gpg_alpha"] = "nonzero"
    return out


# estimators whose real verl function never reads norm_adv_by_std_in_grpo: what it does instead
# (gpg never divides by the std; gdpo, called without it, always does)
NORM_BY_STD_FIXED = {"gpg": False, "gdpo": True}


def pf_ppo(value, ctx, key):
    """algorithm.use_pf_ppo: real verl resamples the batch after GAE's advantages only (compute_advantage's gae
    branch); with another estimator it does nothing, and neither does the translation (a note says so)."""
    if not as_bool(value, key):
        return {}
    estimator = ESTIMATORS.get(ctx.get("algorithm.adv_estimator"), ("", ""))[1]
    if estimator != "gae":
        ctx.notes.append(f"ignored {key}=True: real verl reweights after GAE only, and adv_estimator is "
                         f"{ctx.get('algorithm.adv_estimator')}")
        return {}
    from verl.algorithms.pf_ppo import REWEIGHT_METHODS

    method_key = "algorithm.pf_ppo.reweight_method"
    method = pick(ctx.get(method_key), method_key, dict(zip(REWEIGHT_METHODS, REWEIGHT_METHODS)))
    return {"algorithm.pf_ppo.enable": True, "algorithm.pf_ppo.reweight_method": method,
            "algorithm.pf_ppo.weight_pow": as_float(ctx.get("algorithm.pf_ppo.weight_pow"),
                                                    "algorithm.pf_ppo.weight_pow")}


def norm_adv_by_std(value, ctx, key):
    estimator = ESTIMATORS.get(ctx.get("algorithm.adv_estimator"), ("", ""))[1]
    if estimator in NORM_BY_STD_FIXED:
        return {"algorithm.norm_adv_by_std_in_grpo": NORM_BY_STD_FIXED[estimator]}
    return {"algorithm.norm_adv_by_std_in_grpo": as_bool(value, key)}


def dual_clip(value, ctx, key):
    """Real verl's vanilla loss is its only one that reads clip_ratio_c (gspo, clip_cov and the
    others have no dual clip): set for ppo only."""
    mode = ctx.get(f"{ACTOR}.policy_loss.loss_mode")
    bypass = bypass_loss_type(ctx)  # bypass mode: ppo_clip runs the vanilla loss, reinforce has no dual clip
    if bypass is not None:
        mode = "vanilla" if bypass == "ppo_clip" else "reinforce (bypass mode)"
    if LOSS_MODES.get(mode) != "ppo":
        if ctx.given(key):
            ctx.notes.append(f"ignored {key}={value}: real verl's {mode} loss has no dual clip (nor has ours)")
        return {}
    return {"algorithm.clip_ratio_c": as_float(value, key)}


def _clip_grad(section: str, ours: str):
    def convert(value, ctx, key):
        """optim.clip_grad, or its deprecated name optim.grad_clip when that is not null (it wins, as
        in real verl's OptimizerConfig); actor.grad_clip / critic.grad_clip are read by nothing in real
        verl 0.9.1. model_engine=torchtitan: real_engines.titan_clip."""
        titan = titan_clip(value, ctx, key)
        if titan is not None:
            return titan
        old = ctx.get(f"{section}.optim.grad_clip")
        if old is not None:
            return {ours: as_float(old, f"{section}.optim.grad_clip")}
        return {ours: as_float(value, key)}

    return convert


clip_grad = _clip_grad(ACTOR, "training.grad_clip")
critic_clip_grad = _clip_grad("critic", "training.critic_grad_clip")


def kl_loss_type(value, ctx, key):
    est = pick(value, key, KL_TYPES)
    # one kl_estimator here: the loss's when the KL is a loss term, or when it is used nowhere
    if as_bool(ctx.get(f"{ACTOR}.use_kl_loss"), f"{ACTOR}.use_kl_loss") or not ctx.get("algorithm.use_kl_in_reward"):
        return {"algorithm.kl_estimator": est}
    return {}


def kl_penalty(value, ctx, key):
    est = pick(value, key, KL_TYPES)
    if not as_bool(ctx.get("algorithm.use_kl_in_reward"), "algorithm.use_kl_in_reward"):
        return {}
    if ctx.get(f"{ACTOR}.use_kl_loss"):
        loss_est = KL_TYPES.get(ctx.get(f"{ACTOR}.kl_loss_type"))
        if loss_est != est:
            raise ConfigError(f"{key}={value} differs from {ACTOR}.kl_loss_type={ctx.get(f'{ACTOR}.kl_loss_type')}: "
                              f"with both KL in the reward and a KL loss, one estimator (algorithm.kl_estimator) "
                              f"serves both here (see {MANUAL})")
    return {"algorithm.kl_estimator": est}


def loss_mode(value, ctx, key):
    """The policy loss; in bypass mode real verl runs its bypass loss whatever loss_mode says: ppo_clip is
    its vanilla loss (ours: ppo), reinforce -A w log pi (ours: reinforce)."""
    bypass = bypass_loss_type(ctx)
    if bypass is not None:
        if value != "vanilla":
            ctx.notes.append(f"ignored {key}={value}: real verl's bypass mode runs its {bypass} loss instead")
        return {"algorithm.policy_loss": {"ppo_clip": "ppo", "reinforce": "reinforce"}[bypass]}
    return {"algorithm.policy_loss": pick(value, key, LOSS_MODES)}


def clip_bound(ours: str):
    def convert(value, ctx, key):  # null -> clip_ratio, as real verl's actor reads it
        bound = ctx.get(f"{ACTOR}.clip_ratio") if value is None else value
        return {ours: as_float(bound, key)}

    return convert


def mini_batch(value, ctx, key):
    prompts = as_int(value, key, low=1)
    batch = as_int(ctx.get("data.train_batch_size"), "data.train_batch_size", low=1)
    if batch % prompts:
        raise ConfigError(f"{key}: {prompts} prompts do not divide data.train_batch_size {batch}")
    n = as_int(ctx.get(f"{ROLLOUT}.n"), f"{ROLLOUT}.n", low=1)
    return {"training.mini_batch_size": prompts * n}  # sequences per optimizer step


def global_micro(value, ctx, key):
    world = ctx.world_size()
    micro = as_int(value, key, low=1)
    if micro % world:
        raise ConfigError(f"{key}: {micro} is not a multiple of the {world} devices (trainer.nnodes x n_gpus_per_node)")
    return {"training.micro_batch_size": micro // world}


def dynamic_bsz(value, ctx, key):
    if not as_bool(value, key):
        return {}
    return {"training.max_tokens_per_micro_batch": as_int(ctx.get(f"{ACTOR}.ppo_max_token_len_per_gpu"),
                                                          f"{ACTOR}.ppo_max_token_len_per_gpu", low=1)}


def param_dtype(value, ctx, key):
    return {"model.dtype": pick(value, key, DTYPES)}


def model_dtype(value, ctx, key):
    """The actor's weights' own dtype. fp32 (real verl's default): float32 master weights, computing in
    mixed_precision.param_dtype. bf16/fp16: the weights themselves in that dtype, stepped by AdamW with no
    float32 master (model.mixed_precision: pure), computing in it too."""
    if value is None:
        return {}
    dtype = pick(value, key, DTYPES)
    if dtype == "float32":
        return {}
    compute = ctx.get(f"{ACTOR}.fsdp_config.mixed_precision.param_dtype")
    if compute is not None and pick(compute, f"{ACTOR}.fsdp_config.mixed_precision.param_dtype", DTYPES) != dtype:
        raise ConfigError(f"{key}={value} with {ACTOR}.fsdp_config.mixed_precision.param_dtype={compute}: weights held "
                          f"in {dtype} compute in {dtype} here; give both the same dtype")
    return {"model.dtype": dtype, "model.mixed_precision": "pure"}


SCHEDULERS = {"constant": "constant", "cosine": "cosine"}


def scheduler(value, ctx, key):
    """The FSDP optimizer's schedule (with model_engine=megatron, lr_decay_style's: real_engines)."""
    if not fsdp_only(ctx, key):
        return {}
    return {"training.lr_scheduler": pick(value, key, SCHEDULERS)}


def critic_scheduler(value, ctx, key):
    """The critic's own schedule (real verl's critic.optim; its warmup_style, when given, wins)."""
    if value is None or not fsdp_only(ctx, key):
        return {}
    old = ctx.get("critic.optim.warmup_style")
    if old is not None and key != "critic.optim.warmup_style":
        return {}
    return {"training.critic_lr_scheduler": pick(value, key, SCHEDULERS)}


def warmup_steps(value, ctx, key):
    """lr_warmup_steps > 0 (model_engine=veomni|torchtitan: real_engines.other_schedule)."""
    other = other_schedule(value, ctx, key)
    if other is not None:
        return other
    steps = as_int(-1 if value is None else value, key)
    if steps > 0:
        return {"training.warmup_steps": steps}
    return {}


def warmup_ratio(value, ctx, key):
    """int(ratio x total steps) unless lr_warmup_steps > 0 (model_engine=veomni|torchtitan: the whole schedule,
    real_engines.other_schedule)."""
    other = other_schedule(value, ctx, key)
    if other is not None:
        return other
    steps = ctx.get(f"{ACTOR}.optim.lr_warmup_steps")
    if steps is not None and as_int(steps, f"{ACTOR}.optim.lr_warmup_steps") > 0:
        return {}  # lr_warmup_steps wins, as in real verl
    ratio = as_float(value, key)
    if not 0 <= ratio <= 1:
        raise ConfigError(f"{key}: must be in [0, 1], got {value}")
    return {"training.warmup_steps": int(ratio * ctx.total_steps())}


def critic_warmup(value, ctx, key):
    """The critic's own warm-up, as real verl's critic.optim: lr_warmup_steps > 0 wins over the ratio
    (model_engine=veomni|torchtitan: its whole schedule, real_engines.other_schedule)."""
    other = other_schedule(value, ctx, key)
    if other is not None:
        return other
    steps = ctx.get("critic.optim.lr_warmup_steps")
    if steps is not None and as_int(steps, "critic.optim.lr_warmup_steps") > 0:
        return {"training.critic_warmup_steps": as_int(steps, "critic.optim.lr_warmup_steps")}
    ratio = ctx.get("critic.optim.lr_warmup_steps_ratio")
    if ratio is None:
        return {}
    ratio = as_float(ratio, "critic.optim.lr_warmup_steps_ratio")
    if not 0 <= ratio <= 1:
        raise ConfigError(f"critic.optim.lr_warmup_steps_ratio: must be in [0, 1], got {ratio}")
    return {"training.critic_warmup_steps": int(ratio * ctx.total_steps())}


RC = "algorithm.rollout_correction"


def _engine_log_probs(ctx) -> bool:
    """Real verl has the engine's log-probs only with rollout.calculate_log_probs (its default: true);
    without them its decoupled correction is skipped and its bypass mode raises."""
    value = ctx.get(f"{ROLLOUT}.calculate_log_probs")
    return True if value is None else as_bool(value, f"{ROLLOUT}.calculate_log_probs")


def _corrects(ctx, key, value) -> bool:
    if _engine_log_probs(ctx):
        return True
    ctx.notes.append(f"ignored {key}={value}: without {ROLLOUT}.calculate_log_probs real verl has no engine "
                     f"log-probs and skips the correction")
    return False


def rollout_is(value, ctx, key):
    """Real verl's importance weights (token | sequence) with their threshold (a number: truncation;
    "lower_upper": IcePop) and batch normalisation: algorithm.rollout_correction's own keys."""
    if value is None or not _corrects(ctx, key, value):
        return {}
    level = pick(value, key, {"token": "token", "sequence": "sequence"})
    return {f"{RC}.rollout_is": level, f"{RC}.rollout_is_threshold": str(ctx.get(f"{RC}.rollout_is_threshold")),
            f"{RC}.rollout_is_batch_normalize": as_bool(ctx.get(f"{RC}.rollout_is_batch_normalize"),
                                                        f"{RC}.rollout_is_batch_normalize")}


def rollout_rs(value, ctx, key):
    """Real verl's rejection sampling (its options, comma-separated) with rollout_rs_threshold."""
    if value is None or not _corrects(ctx, key, value):
        return {}
    threshold = ctx.get(f"{RC}.rollout_rs_threshold")
    return {f"{RC}.rollout_rs": str(value), f"{RC}.rollout_rs_threshold": None if threshold is None else str(threshold)}


def bypass_mode(value, ctx, key):
    """true: the engine's log-probs as pi_old, loss_type's loss (the policy loss follows: loss_mode)."""
    if not as_bool(value, key):
        return {}
    if not _engine_log_probs(ctx):
        raise refuse(key, value, f"bypass mode without the engine's log-probs ({ROLLOUT}.calculate_log_probs=False); "
                                 "real verl raises there too")
    return {f"{RC}.bypass_mode": True, f"{RC}.loss_type": bypass_loss_type(ctx)}


def bypass_loss_type(ctx) -> Optional[str]:
    """loss_type when bypass mode is on (ppo_clip | reinforce), else None."""
    if not as_bool(ctx.get(f"{RC}.bypass_mode") or False, f"{RC}.bypass_mode"):
        return None
    return pick(ctx.get(f"{RC}.loss_type"), f"{RC}.loss_type", {"ppo_clip": "ppo_clip", "reinforce": "reinforce"})


def quantization(value, ctx, key):
    """Real verl's rollout quantization: fp8 is block-FP8 engine weights (128 x 128, dynamic activation
    scales), as rollout.quantization: fp8 here (verl/rollout/fp8_vllm.py); null: the engine in the actor's
    dtype. torchao / ascend have no equivalent."""
    if value is None:
        return {}
    if value != "fp8":
        raise refuse(key, value, "only fp8 (block-FP8 vLLM engine weights, rollout.quantization: fp8) maps here")
    return {"rollout.quantization": "fp8"}


def tis_cap(value, ctx, key):
    cap = as_float(value, key)
    return {"rollout.tis_cap": cap} if cap > 0 else {}


def calculate_log_probs(value, ctx, key):
    """true (real verl's default): the engine's log-probs on every step (real verl logs their gap
    to the actor's; neither trains on them unless a rollout correction asks). Not given or false:
    here the stale-weights check asks for them on every rollout.logprob_check_every-th step (10),
    which changes no update."""
    return {"rollout.logprob_check_every": 1} if as_bool(value, key) else {}


def rollout_name(value, ctx, key):
    return {"rollout.name": pick(value, key, {"vllm": "vllm", "sglang": "sglang", "hf": "hf"})}


def temperature(value, ctx, key):
    if not as_bool(ctx.get(f"{ROLLOUT}.do_sample"), f"{ROLLOUT}.do_sample"):
        if as_float(value, key) != 1.0:  # real verl's actor still divides its logits by it
            raise refuse(key, value, f"greedy generation ({ROLLOUT}.do_sample=False) with log-probs trained at "
                                     f"another temperature; here greedy answers train at temperature 1")
        return {"rollout.temperature": 0.0}  # greedy
    return {"rollout.temperature": as_float(value, key)}


def top_k(value, ctx, key):
    k = as_int(value, key)
    return {"rollout.top_k": 0 if k <= 0 else k}  # real: -1 (vLLM) or 0 (HF) = off; ours: 0


def max_response(value, ctx, key):
    if ctx.given(f"{ROLLOUT}.response_length"):
        return {}  # the rollout's own length wins, as in real verl
    return {"rollout.max_new_tokens": as_int(value, key, low=1)}


def val_sampling(value, ctx, key):
    """Validation here: the greedy answer (mean@1) always; sampled answers like real verl's when
    do_sample is on (data.val_do_sample, with val_kwargs' temperature / top_p / top_k): mean@n."""
    v = f"{ROLLOUT}.val_kwargs"
    n = as_int(ctx.get(f"{v}.n"), f"{v}.n", low=1)
    temperature = as_float(ctx.get(f"{v}.temperature"), f"{v}.temperature")
    if not as_bool(value, key) or temperature == 0:
        return {"data.val_n": 1}  # real verl's n greedy answers are one answer n times: mean@1 is their mean
    top_k = as_int(ctx.get(f"{v}.top_k"), f"{v}.top_k")
    return {"data.val_n": n, "data.val_do_sample": True, "data.val_temperature": temperature,
            "data.val_top_p": as_float(ctx.get(f"{v}.top_p"), f"{v}.top_p"), "data.val_top_k": max(0, top_k)}


# override_optimizer_config entries that change memory or speed, not the update (real verl's offload switches)
OPTIMIZER_MEMORY_ONLY = ("foreach", "fused", "optimizer_offload_fraction", "overlap_cpu_optimizer_d2h_h2d",
                         "use_precision_aware_optimizer", "optimizer_cpu_offload")


def mapping(example: str):
    """A value check for keys whose value is a mapping passed on as it is (null: none); `example` shows one."""
    def convert(value, key: str) -> dict:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise ConfigError(f"{key}={value!r}: expected a mapping, e.g. {example}")
        return dict(value)

    return convert


def model_override(value, key: str) -> dict:
    """model.override_config: config.json fields to replace; a `model_config` entry holds them instead, as
    real verl's HFModelConfig reads it (the Megatron scripts' form: its other entries are then not read)."""
    fields = mapping("{max_position_embeddings: 32768}")(value, key)
    if "model_config" in fields:
        return mapping("{max_position_embeddings: 32768}")(fields["model_config"], f"{key}.model_config")
    return fields


def override_optimizer(value, ctx, key):
    for name in dict(value or {}):
        if name not in OPTIMIZER_MEMORY_ONLY:
            raise refuse(f"{key}.{name}", value[name], "extra optimizer arguments that change the update; the "
                         "optimizer here is AdamW with lr, betas (0.9, 0.999), weight_decay")
        if ctx.given(key):  # e.g. Megatron's optimizer_cpu_offload: the same update, elsewhere or faster
            ctx.notes.append(f"ignored {key}.{name}={value[name]}: the optimizer's memory/speed setting; the same "
                             f"update here (training.offload_optimizer offloads its state)")
    return {}


def gen_batch(value, ctx, key):
    if value is None:
        return {}
    if not same_value(value, ctx.get("data.train_batch_size")):
        raise refuse(key, value, f"generating more prompts than a step trains (data.train_batch_size="
                                 f"{ctx.get('data.train_batch_size')}); here algorithm.dynamic_sampling.enable "
                                 f"regenerates until the batch is full")
    return {}


def truncation(value, ctx, key):
    if as_bool(ctx.get("data.filter_overlong_prompts"), "data.filter_overlong_prompts"):
        return {"data.truncation": "filter"}
    return {"data.truncation": pick(value, key, {"error": "error", "left": "left", "right": "right"})}


def critic_path(value, ctx, key):
    path = expand_path(value)
    actor = ctx.get(f"{ARR}.model.path")
    return {"critic.name": None if actor is not None and path == expand_path(actor) else path}


def critic_enable(value, ctx, key):
    if value is None:
        return {}
    gae = ESTIMATORS.get(ctx.get("algorithm.adv_estimator"), ("", ""))[1] == "gae"
    if as_bool(value, key) != gae:
        raise ConfigError(f"{key}={value}: here a critic is trained exactly when algorithm.adv_estimator is gae "
                          f"(it is {ctx.get('algorithm.adv_estimator')}); leave {key} unset (see {MANUAL})")
    return {}


def total_epochs(value, ctx, key):
    if ctx.get("trainer.total_training_steps") is not None:
        return {}  # total_training_steps wins, as in real verl
    as_int(value, key, low=1)
    return {"training.total_steps": ctx.total_steps()}


def total_training_steps(value, ctx, key):
    if value is None:
        return {}
    return {"training.total_steps": as_int(value, key, low=1)}


def logger(value, ctx, key):
    names = value if isinstance(value, (list, tuple)) else [value]
    backends = [pick(str(n), key, LOGGERS) for n in names]
    return {"logging.backends": list(dict.fromkeys(backends + ["jsonl"]))}  # metrics.jsonl: the run's record


def placement(value, ctx, key):
    nnodes = as_int(ctx.get("trainer.nnodes") or 1, "trainer.nnodes", low=1)
    per_node = as_int(ctx.get("trainer.n_gpus_per_node") or 1, "trainer.n_gpus_per_node", low=1)
    if nnodes * per_node == 1:
        return {"distributed.backend": "none"}
    return {"distributed.backend": "ray", "distributed.nnodes": nnodes, "distributed.devices_per_node": per_node}


def save_freq(value, ctx, key):
    every = as_int(value, key)
    if every <= 0:
        return {}
    return {"checkpoint.save_full_every": every, "checkpoint.save_mode": "full"}  # resumable, as real verl's


def resume_mode(value, ctx, key):
    if value == "auto":
        return {"checkpoint.resume": "auto"}
    if value == "disable":  # start over; an earlier run in the folder moves to previous_run_N/
        return {"checkpoint.resume": "none", "checkpoint.overwrite": True}
    if value == "resume_path":
        path = ctx.get("trainer.resume_from_path")
        if not path:
            raise ConfigError(f"{key}=resume_path needs trainer.resume_from_path")
        return {"checkpoint.resume": expand_path(path)}
    raise ConfigError(f"{key}: '{value}' is not one of auto, disable, resume_path")


def test_freq(value, ctx, key):
    every = as_int(value, key)
    return {"training.val_every": every if every > 0 else 0}


def keep_ckpts(value, ctx, key):
    if value is None:  # real verl keeps them all: as many as the run can write
        return {"checkpoint.keep_last": max(1, ctx.total_steps())}
    return {"checkpoint.keep_last": as_int(value, key, low=1)}


def device(value, ctx, key):
    return {"device": pick(value, key, {"cuda": "cuda", "cpu": "cpu", "auto": "auto"})}
