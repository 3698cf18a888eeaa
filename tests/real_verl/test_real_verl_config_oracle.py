"""Key by key: for every example script of real verl that trains a step here (tools/real_verl_scripts/scripts.txt,
with the harness's tiny sizes, tools/real_verl_scripts/harness.py), real verl 0.9.1's own Hydra config
(ppo_trainer.yaml, or ppo_megatron_trainer.yaml for the Megatron scripts, composed with the same arguments,
in real verl's process: tests/real_verl_oracle.py) and our translation agree on every value that changes
training. The Megatron scripts' optimizer is read as real verl's Megatron engine reads it: lr_decay_style
and min_lr (over lr) for the schedule, warm-up steps from the ratio x lr_decay_steps (the run's steps when
null), no weight decay on 1-D weights, float32 main weights.

Each value is compared as the update reads it: real verl's optimizer keys after its OptimizerConfig,
clip_ratio_low/high null read as clip_ratio, the dual clip only for the vanilla loss (the only real
loss that reads it), norm_adv_by_std only for the estimators whose real function reads it (grpo; gpg
never divides, gdpo always does), KL settings only where the KL is used, the critic's only with gae.
"""

import os

import pytest

from test_algorithms_real_verl import run_real_verl
from tools.real_verl_scripts import harness as ex
from verl.compat.real_converters import ESTIMATORS, KL_TYPES, LOSS_MODES
from verl.compat.translate import load_translated, translate
from verl.errors import ConfigError

A, R, C = "actor_rollout_ref.actor", "actor_rollout_ref.rollout", "critic"
KEYS = [f"{A}.{k}" for k in ("clip_ratio", "clip_ratio_low", "clip_ratio_high", "clip_ratio_c", "loss_agg_mode",
                            "policy_loss.loss_mode", "policy_loss.clip_cov_ratio", "policy_loss.clip_cov_lb",
                            "policy_loss.clip_cov_ub", "policy_loss.kl_cov_ratio", "policy_loss.ppo_kl_coef",
                            "tau_pos", "tau_neg", "entropy_coeff", "use_kl_loss", "kl_loss_coef", "kl_loss_type",
                            "ppo_epochs", "ppo_mini_batch_size", "shuffle", "fsdp_config.model_dtype")]
KEYS += [f"{R}.{k}" for k in ("n", "temperature", "do_sample", "top_p", "top_k", "response_length")]
KEYS += [f"algorithm.{k}" for k in ("adv_estimator", "norm_adv_by_std_in_grpo", "gamma", "lam", "use_kl_in_reward",
                                    "kl_penalty", "kl_ctrl.type", "kl_ctrl.kl_coef")]
RC_KEYS = ("rollout_is", "rollout_is_threshold", "rollout_is_batch_normalize", "rollout_rs", "rollout_rs_threshold",
           "bypass_mode", "loss_type")
KEYS += [f"algorithm.rollout_correction.{k}" for k in RC_KEYS] + [f"{R}.calculate_log_probs"]
KEYS += ["model_engine", "data.train_batch_size", "data.max_prompt_length", "data.shuffle", "trainer.total_training_steps",
         "trainer.critic_warmup", f"{C}.cliprange_value", f"{C}.ppo_epochs", f"{C}.shuffle", f"{C}.loss_agg_mode",
         f"{C}.fsdp.model_dtype"]


def warmup_steps(v: dict, section: str, total: int) -> int:
    """Real verl's engine: lr_warmup_steps when > 0, else int(ratio x total steps) (Megatron's: x its
    lr_decay_steps, the total steps when null)."""
    steps = v[f"{section}.optim.lr_warmup_steps"]
    decay = v.get(f"{section}.optim.lr_decay_steps") or total
    steps = steps if steps is not None and steps > 0 else int(v[f"{section}.optim.lr_warmup_steps_ratio"] * decay)
    return steps


MEGATRON_STYLES = {"constant": "constant", "linear": "linear", "cosine": "cosine",
                   "inverse-square-root": "inverse_sqrt"}


def schedule(v: dict, section: str) -> tuple:
    """(our lr_scheduler, the floor over lr that schedule reads, or None where it reads none): real verl's
    FSDP optimizer (lr_scheduler_type, min_lr_ratio for cosine) or its Megatron one (lr_decay_style, min_lr)."""
    o = f"{section}.optim"
    if f"{o}.lr_decay_style" in v:  # McoreOptimizerConfig: OptimizerParamScheduler
        kind = MEGATRON_STYLES.get(v[f"{o}.lr_decay_style"], f"<{v[f'{o}.lr_decay_style']}>")
        return kind, None if kind == "constant" else v[f"{o}.min_lr"] / v[f"{o}.lr"]
    kind = v[f"{o}.lr_scheduler_type"]
    return kind, (v[f"{o}.min_lr_ratio"] or 0.0) if kind == "cosine" else None


def real_view(v: dict) -> dict:
    """What real verl trains with, in our names and units."""
    total = v["trainer.total_training_steps"]
    n = v[f"{R}.n"]
    mode = v[f"{A}.policy_loss.loss_mode"]
    loss = LOSS_MODES.get(mode, f"<{mode}>")
    rc = {k: v[f"algorithm.rollout_correction.{k}"] for k in RC_KEYS}
    if rc["bypass_mode"]:  # real verl's apply_bypass_mode: its bypass loss, whatever loss_mode says
        loss = {"ppo_clip": "ppo", "reinforce": "reinforce"}[rc["loss_type"]]
    estimator = ESTIMATORS.get(v["algorithm.adv_estimator"], ("", f"<{v['algorithm.adv_estimator']}>"))[1]
    low = v[f"{A}.clip_ratio_low"] if v[f"{A}.clip_ratio_low"] is not None else v[f"{A}.clip_ratio"]
    high = v[f"{A}.clip_ratio_high"] if v[f"{A}.clip_ratio_high"] is not None else v[f"{A}.clip_ratio"]
    megatron = v["model_engine"] == "megatron"
    kind, floor = schedule(v, A)
    out = {
        "lr": v[f"{A}.optim.lr"], "weight_decay": v[f"{A}.optim.weight_decay"],
        # Megatron's optimizer groups biases and 1-D weights at wd_mult 0 (get_standard_config_overrides)
        "weight_decay_1d": not megatron,
        "lr_scheduler": kind, "warmup_steps": warmup_steps(v, A, total),
        "grad_clip": v[f"{A}.optim.clip_grad"], "epochs": v[f"{A}.ppo_epochs"],
        "mini_batch_sequences": v[f"{A}.ppo_mini_batch_size"] * n, "shuffle_minibatches": v[f"{A}.shuffle"],
        "batch_prompts": v["data.train_batch_size"], "total_steps": total, "n": n,
        "temperature": v[f"{R}.temperature"] if v[f"{R}.do_sample"] else 0.0, "top_p": v[f"{R}.top_p"],
        "top_k": max(0, v[f"{R}.top_k"]), "response_length": v[f"{R}.response_length"],
        "prompt_length": v["data.max_prompt_length"], "data_shuffle": v["data.shuffle"],
        "adv_estimator": estimator, "policy_loss": loss, "clip_ratio_low": low, "clip_ratio_high": high,
        "clip_ratio_c": v[f"{A}.clip_ratio_c"] if loss == "ppo" else 0.0,
        "entropy_coeff": v[f"{A}.entropy_coeff"], "use_kl_loss": v[f"{A}.use_kl_loss"],
        "use_kl_in_reward": v["algorithm.use_kl_in_reward"], "critic_warmup": v["trainer.critic_warmup"],
        # Megatron's optimizer keeps float32 main weights of its bf16 ones (Float16OptimizerWithFloat16Params)
        "master_weights": "fp32" if megatron else str(v[f"{A}.fsdp_config.model_dtype"]).replace("float32", "fp32"),
        "rollout_correction": real_correction(rc, v[f"{R}.calculate_log_probs"]),
    }
    if floor is not None:
        out["min_lr_ratio"] = floor
    # every loss: real verl's sapo and geo_mean fix their own term's aggregation, but their KL and entropy
    # terms follow loss_agg_mode
    out["loss_agg_mode"] = v[f"{A}.loss_agg_mode"]
    if estimator in ("grpo", "gpg", "gdpo"):
        out["norm_adv_by_std"] = {"gpg": False, "gdpo": True}.get(estimator, v["algorithm.norm_adv_by_std_in_grpo"])
    if estimator == "gpg":
        out["gpg_alpha"] = "nonzero"
    if v[f"{A}.use_kl_loss"]:
        out.update(kl_loss_coef=v[f"{A}.kl_loss_coef"], kl_estimator=KL_TYPES.get(v[f"{A}.kl_loss_type"]))
    if v["algorithm.use_kl_in_reward"]:
        out.update(kl_coef=v["algorithm.kl_ctrl.kl_coef"], kl_ctrl=v["algorithm.kl_ctrl.type"],
                   kl_estimator=KL_TYPES.get(v["algorithm.kl_penalty"]))
    if estimator == "gae":
        out.update(gamma=v["algorithm.gamma"], lam=v["algorithm.lam"], critic_lr=v[f"{C}.optim.lr"],
                   critic_warmup_steps=warmup_steps(v, C, total), cliprange_value=v[f"{C}.cliprange_value"],
                   critic_grad_clip=v[f"{C}.optim.clip_grad"], critic_epochs=v[f"{C}.ppo_epochs"],
                   critic_shuffle=v[f"{C}.shuffle"], critic_weight_decay=v[f"{C}.optim.weight_decay"],
                   critic_lr_scheduler=schedule(v, C)[0],
                   critic_master_weights="fp32" if megatron else str(v[f"{C}.fsdp.model_dtype"]).replace(
                       "float32", "fp32"))
        if schedule(v, C)[1] is not None:
            out["critic_min_lr_ratio"] = schedule(v, C)[1]
    if loss == "clip_cov":
        out.update({k: v[f"{A}.policy_loss.{k}"] for k in ("clip_cov_ratio", "clip_cov_lb", "clip_cov_ub")})
    if loss == "kl_cov":
        out.update({k: v[f"{A}.policy_loss.{k}"] for k in ("kl_cov_ratio", "ppo_kl_coef")})
    if loss == "sapo":
        out.update(tau_pos=v[f"{A}.tau_pos"], tau_neg=v[f"{A}.tau_neg"])
    return out


def real_correction(rc: dict, engine_log_probs: bool) -> tuple:
    """What real verl's rollout correction does, as (weights level, upper, lower, batch normalisation,
    rejection rules, bypass, loss_type): its decoupled correction runs only with the engine's log-probs."""
    from verl.algorithms.rollout_is import parse_is_threshold
    from verl.algorithms.rollout_rs import parse_rejection

    level = rc["rollout_is"] if engine_log_probs else None
    upper, lower = parse_is_threshold(rc["rollout_is_threshold"]) if level else (2.0, None)
    rejects = rc["rollout_rs"] and engine_log_probs
    rules = parse_rejection(rc["rollout_rs"], rc["rollout_rs_threshold"]) if rejects else ()
    return (level, upper, lower, bool(rc["rollout_is_batch_normalize"]) if level else False, rules,
            bool(rc["bypass_mode"]), rc["loss_type"] if rc["bypass_mode"] else "ppo_clip")


def our_correction(cfg) -> tuple:
    """The same from our config (algorithm.rollout_correction, or the rollout.tis_cap shorthand)."""
    from verl.algorithms.off_policy import correction_spec

    c = correction_spec(cfg.rollout, cfg.algorithm.rollout_correction)
    return (c.is_level, c.is_upper if c.is_level else 2.0, c.is_lower, c.batch_normalize, c.rules, c.bypass,
            c.loss_type)


def our_view(cfg, keys) -> dict:
    """The same values from our finalized config (`keys`: those real_view has for this script)."""
    from verl.workers.optim import critic_setting

    t, a, r, p = cfg.training, cfg.algorithm, cfg.rollout, cfg.algorithm.loss_params
    every = {
        "lr": t.lr, "weight_decay": t.weight_decay, "weight_decay_1d": t.weight_decay_1d, "min_lr_ratio": t.min_lr_ratio,
        "critic_min_lr_ratio": critic_setting(t, "min_lr_ratio"),
        "lr_scheduler": t.lr_scheduler, "warmup_steps": t.warmup_steps,
        "grad_clip": t.grad_clip, "epochs": t.num_epochs, "mini_batch_sequences": t.mini_batch_size,
        "shuffle_minibatches": t.shuffle_minibatches, "batch_prompts": t.batch_size, "total_steps": t.total_steps,
        "n": r.n, "temperature": r.temperature, "top_p": r.top_p, "top_k": r.top_k,
        "response_length": r.max_new_tokens, "prompt_length": cfg.data.max_prompt_length,
        "data_shuffle": cfg.data.shuffle, "adv_estimator": a.adv_estimator, "policy_loss": a.policy_loss,
        "clip_ratio_low": a.clip_ratio_low, "clip_ratio_high": a.clip_ratio_high, "clip_ratio_c": a.clip_ratio_c,
        "entropy_coeff": a.entropy_coeff, "use_kl_loss": a.use_kl_loss, "use_kl_in_reward": a.use_kl_in_reward,
        "critic_warmup": a.critic_warmup,
        "master_weights": cfg.model.dtype if cfg.model.mixed_precision == "pure" else "fp32", "rollout_correction": our_correction(cfg),
        "loss_agg_mode": a.loss_agg_mode, "norm_adv_by_std": a.norm_adv_by_std_in_grpo, "gpg_alpha": a.gpg_alpha,
        "kl_loss_coef": a.kl_loss_coef, "kl_estimator": a.kl_estimator, "kl_coef": a.kl_coef,
        "kl_ctrl": a.kl_ctrl.type, "gamma": a.gamma, "lam": a.lam, "critic_lr": t.critic_lr,
        "critic_warmup_steps": critic_setting(t, "warmup_steps"), "cliprange_value": a.cliprange_value,
        "critic_grad_clip": critic_setting(t, "grad_clip"), "critic_epochs": t.num_epochs,
        "critic_shuffle": t.shuffle_minibatches, "critic_weight_decay": critic_setting(t, "weight_decay"),
        "critic_lr_scheduler": critic_setting(t, "lr_scheduler"), "critic_master_weights": "fp32",
        **{k: getattr(p, k) for k in ("clip_cov_ratio", "clip_cov_lb", "clip_cov_ub", "kl_cov_ratio", "ppo_kl_coef",
                                      "tau_pos", "tau_neg")},
    }
    return {k: every[k] for k in keys}


def hydra_args(args: list) -> list:
    """The arguments as bash hands them to real verl: ~ expanded (the file keeps $HOME as ~), no options."""
    home = os.path.expanduser("~")
    return [a.split("=", 1)[0] + "=" + a.split("=", 1)[1].replace("~/", home + "/") for a in args
            if not a.startswith("-")]


def config_name(args: list) -> str:
    """The packaged config a script composes: ppo_megatron_trainer for --config-name=ppo_megatron_trainer(.yaml),
    or for a script's own file (--config-path) the packaged one its defaults list ends in."""
    own = _own_config(args)
    if own is not None:
        return "ppo_megatron_trainer" if own.get("model_engine") == "megatron" else "ppo_trainer"
    names = [a.split("=", 1)[1] for a in args if a.startswith("--config-name=")]
    return names[-1].removesuffix(".yaml") if names else "ppo_trainer"


def _own_config(args: list):
    """The flattened keys of a script's own --config-path/--config-name file (real verl's multi-turn configs,
    whose defaults lists start from ppo_trainer or ppo_megatron_trainer), or None."""
    from verl.compat.config_file import PACKAGED, read_config, split_options

    path, name, _ = split_options(args)
    if name is None or path is None or name in PACKAGED:
        return None
    return read_config(path, name)[0]


def _hydra_value(v) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if v is None:
        return "null"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_hydra_value(x) for x in v) + "]"
    return str(v)


def real_overrides(args: list) -> list:
    """What real verl composes for `args`: a script's own config file's keys first, then its command line."""
    own = _own_config(args) or {}
    return [f"{k}={_hydra_value(v)}" for k, v in own.items() if k != "model_engine"] + hydra_args(args)


def same(x, y) -> bool:
    if isinstance(x, (int, float)) and isinstance(y, (int, float)) and not isinstance(x, bool):
        return abs(float(x) - float(y)) <= 1e-9 * max(1.0, abs(float(x)))
    return x == y


def differences(real: dict, ours: dict) -> list:
    return [f"{k}: real verl {real[k]!r}, here {ours[k]!r}" for k in real if not same(real[k], ours[k])]


# refused for leaving rollout.n at real verl's 1 (their estimators compare samples here), compared with n = 2:
# the scripts of the rollout correction (bypass mode, sequence weights, batch normalisation, rejection)
TWO_SAMPLES = ("examples/rollout_correction/run_with_rollout_corr.sh",
               "examples/rollout_correction/run_with_rollout_corr_multi_rs.sh")


@pytest.fixture(scope="module")
def scripts_that_train(tmp_path_factory):
    """[(name, tiny arguments, our finalized config)] of the scripts whose translation passes every check."""
    from verl.models.tiny import tiny_model_path
    from verl.models.tiny_vl import tiny_vl_model_path

    work = str(tmp_path_factory.mktemp("scripts"))
    examples = ex.load()
    ex.provide_files(examples, os.path.join(work, "real_verl"))
    model, vision_model = tiny_model_path("gpt2"), tiny_vl_model_path(ex.VISION_FAMILY)
    found = []
    for script in examples.scripts:
        args = ex.tiny_args(script, tmp_path_factory.mktemp("run").as_posix(), model, os.path.join(work, "real_verl"),
                            vision_model)
        if script.name in TWO_SAMPLES:
            args, name = args + [f"{R}.n=2"], script.name + " (rollout.n=2)"
        try:
            cfg = load_translated(translate(args))
        except ConfigError:
            continue  # refused with one line (docs/real_verl.md's table): nothing trains
        found.append((name if script.name in TWO_SAMPLES else script.name, args, cfg))
    assert {n for n, _, _ in found} >= {n + " (rollout.n=2)" for n in TWO_SAMPLES}
    return found


def test_every_training_script_trains_with_real_verls_values(scripts_that_train, tmp_path):
    assert len(scripts_that_train) >= 30  # the harness's scripts that train a step (36 at the time of writing)
    cases = [dict(kind="config", overrides=real_overrides(args), keys=KEYS, config_name=config_name(args))
             for _, args, _ in scripts_that_train]
    # the config names are real verl's own (--config-path=config is main_ppo's folder there) or a script's own
    # file (the multi-turn ones), composed as its keys over the packaged config its defaults list names
    named = {a for _, args, _ in scripts_that_train for a in args if a.startswith("--config-name")}
    own = {a for _, args, _ in scripts_that_train for a in args if a.startswith("--config-name") and _own_config(args)}
    assert named - own <= {"--config-name=ppo_trainer", "--config-name=ppo_trainer.yaml",
                           "--config-name=ppo_megatron_trainer", "--config-name=ppo_megatron_trainer.yaml"}
    assert len(own) >= 5  # the multi-turn scripts' gsm8k / geo3k / interaction configs
    megatron = [name for (name, _, _), case in zip(scripts_that_train, cases) if case["config_name"] != "ppo_trainer"]
    assert len(megatron) >= 24  # compared against real verl's composed ppo_megatron_trainer config
    real = run_real_verl(cases, tmp_path)
    errors = {name: got["error"] for (name, _, _), got in zip(scripts_that_train, real) if "error" in got}
    assert not errors, errors
    found = {}
    for (name, _, cfg), got in zip(scripts_that_train, real):
        want = real_view(got["values"])
        diff = differences(want, our_view(cfg, want))
        if diff:
            found[name] = diff
    assert not found, f"{sum(map(len, found.values()))} differences in {len(found)} of {len(real)} scripts:\n" + (
        "\n".join(f"{name}:\n  " + "\n  ".join(d) for name, d in found.items()))


def test_the_comparison_sees_a_difference(scripts_that_train, tmp_path):
    # the check itself: a translation that kept actor.grad_clip, dropped the dual clip of the vanilla loss or
    # shuffled the mini-batches would be reported, and (a Megatron script) one that decayed 1-D weights
    for megatron in (False, True):
        name, args, cfg = next(s for s in scripts_that_train if LOSS_MODES.get(next(
            (a.split("=", 1)[1] for a in s[1] if a.startswith(f"{A}.policy_loss.loss_mode=")), "vanilla")) == "ppo"
            and (config_name(s[1]) == "ppo_megatron_trainer") == megatron)
        got = run_real_verl([dict(kind="config", overrides=hydra_args(args), keys=KEYS, config_name=config_name(args))],
                            tmp_path)[0]["values"]
        want = real_view(got)
        cfg.training.grad_clip, cfg.algorithm.clip_ratio_c, cfg.training.shuffle_minibatches = 0.5, 0.0, True
        cfg.training.weight_decay_1d = not cfg.training.weight_decay_1d
        diff = differences(want, our_view(cfg, want))
        assert [d.split(":")[0] for d in diff] == [k for k in want if k in (
            "weight_decay_1d", "grad_clip", "shuffle_minibatches", "clip_ratio_c")], (name, diff)
        assert want["weight_decay_1d"] is not megatron, name
