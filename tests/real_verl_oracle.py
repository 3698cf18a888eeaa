"""Runs real verl's own core_algos functions on cases from a file: the reference the algorithm
tests compare against (tests/real_verl/test_algorithms_real_verl.py). Real verl's package is also named
`verl`, so this runs in its own process with real verl's folder first on sys.path:

    python3 tests/real_verl_oracle.py REAL_VERL_DIR cases.pt results.pt

cases.pt: a list of dicts, each {"kind": "loss" | "adv", "name": real verl's registered name, ...
tensors and settings}, {"kind": "score", "data_source", "response", "ground_truth"}, {"kind": "lr",
"scheduler": "constant" | "cosine", "warmup", "total", "steps"} (real verl's schedulers, as its FSDP
engine builds them), {"kind": "corr", ...} (its decoupled rollout correction of a batch: weights and
rejection mask), {"kind": "bypass", ...} (its bypass-mode policy loss), {"kind": "pf_ppo", ...} (its
preference-feedback PPO resampling: the rows drawn) or {"kind": "config", "overrides":
[...], "keys": [...]} (real verl's own Hydra config, ppo_trainer.yaml or the case's "config_name"
(ppo_megatron_trainer), composed with a script's overrides; a key it does not have is added, a value
its Hydra cannot parse is quoted, both named in the result); results.pt: one dict per case (loss and
d loss / d log_probs, advantages and returns, the score and a dict result's other entries, the learning
rate of each step, or the resolved values of `keys` with the optimizer's after real verl's
OptimizerConfig reads them). Only real verl's public functions are called; nothing of its code is
copied into the project.
"""

import sys


def _actor_config(case):
    from verl.workers.config import FSDPActorConfig, PolicyLossConfig

    p = case.get("params", {})
    loss_cfg = PolicyLossConfig(loss_mode=case["name"], **{k: p[k] for k in ("clip_cov_ratio", "clip_cov_lb",
                                                                             "clip_cov_ub", "kl_cov_ratio",
                                                                             "ppo_kl_coef") if k in p})
    return FSDPActorConfig(strategy="fsdp", rollout_n=1, ppo_mini_batch_size=1, ppo_micro_batch_size_per_gpu=1,
                           clip_ratio=case["clip_low"], clip_ratio_low=case["clip_low"],
                           clip_ratio_high=case["clip_high"], policy_loss=loss_cfg, loss_agg_mode=case["agg"],
                           tau_pos=p.get("tau_pos", 1.0), tau_neg=p.get("tau_neg", 1.05),
                           clip_ratio_c=case.get("clip_c", 3.0))


def _run_loss(case):
    import torch
    from verl.trainer.ppo import core_algos

    log_probs = case["log_probs"].clone().requires_grad_(True)
    torch.manual_seed(case.get("seed", 0))
    fn = core_algos.get_policy_loss_fn(case["name"])
    loss, _ = fn(case["old"], log_probs, case["adv"], case["mask"], case["agg"], _actor_config(case),
                 case.get("is_weights"))
    loss.backward()
    return {"loss": loss.detach(), "grad": log_probs.grad.detach()}


def _run_adv(case):
    import numpy as np
    import torch
    from verl.trainer.ppo import core_algos

    fn = core_algos.get_adv_estimator_fn(case["name"])
    index = np.array(case["group_ids"], dtype=object)
    common = dict(token_level_rewards=case["token_rewards"], response_mask=case["mask"], index=index)
    if case["name"] == "gdpo":
        keys = [f"part{k}" for k in range(case["parts"].shape[1])]
        mask = case["mask"]  # right-padded: real verl puts each part on the last valid token
        prompt = torch.ones(mask.shape[0], 2, dtype=torch.long)
        batch = {"prompts": prompt, "attention_mask": torch.cat([prompt, mask.long()], dim=1)}
        non_tensor = {k: case["parts"][:, i].numpy() for i, k in enumerate(keys)}
        config = {"gdpo_reward_keys": keys, "gdpo_reward_weights": list(case["weights"])}
        adv, ret = fn(**common, norm_adv_by_std_in_grpo=case.get("norm_by_std", True), config=config,
                      non_tensor_batch=non_tensor, batch=batch)
    elif case["name"] == "optimal_token_baseline":
        adv, ret = fn(**common, old_log_probs=case["old_log_probs"], sum_pi_squared=case["sum_pi_squared"])
    else:
        kwargs = dict(common)
        if case["name"] in ("gae", "remax"):
            kwargs.pop("index")
        if case["name"] == "gae":
            kwargs.update(values=case["values"], gamma=case["gamma"], lam=case["lam"])
        elif case["name"] == "remax":
            kwargs["reward_baselines"] = case["baselines"]
        elif case["name"] == "reinforce_plus_plus":
            from verl.trainer.config import AlgoConfig

            kwargs["config"] = AlgoConfig(gamma=case["gamma"])
        elif case["name"] == "grpo":
            kwargs["norm_adv_by_std_in_grpo"] = case.get("norm_by_std", True)
        adv, ret = fn(**kwargs)
    return {"adv": adv.detach(), "ret": ret.detach()}


def _run_score(case):
    """Real verl's default reward for a data_source (its default_compute_score routing and scorer):
    {"score"} for a number, {"score", "acc", "pred"} for a dict result, {"error": type name} when it raises."""
    from verl.utils.reward_score import default_compute_score

    try:
        res = default_compute_score(case["data_source"], case["response"], case["ground_truth"])
    except Exception as exc:  # e.g. NotImplementedError for a data_source it does not know
        return {"error": type(exc).__name__}
    if isinstance(res, dict):
        return {"score": float(res["score"]), **{k: v for k, v in res.items() if k != "score"}}
    return {"score": float(res)}


def _run_lr(case):
    """The learning rate (over a base of 1) each of `steps` optimizer steps runs at."""
    import torch
    from verl.utils.torch_functional import get_constant_schedule_with_warmup, get_cosine_schedule_with_warmup

    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    if case["scheduler"] == "constant":
        scheduler = get_constant_schedule_with_warmup(optimizer=optimizer, num_warmup_steps=case["warmup"])
    else:
        scheduler = get_cosine_schedule_with_warmup(optimizer=optimizer, num_warmup_steps=case["warmup"],
                                                    num_training_steps=case["total"], min_lr_ratio=0.0, num_cycles=0.5)
    lrs = []
    for _ in range(case["steps"]):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return {"lr": lrs}


def _run_config(case):
    """Real verl's resolved config for a command line's overrides: {"values": {key: value}} or {"error"}.
    A `+key=` of a key real verl 0.9.1 already has is applied as `++key=` (the scripts were written
    for a release without it). The optimizer keys are read after real verl's OptimizerConfig
    (its deprecated grad_clip and warmup_style names), as its engine reads them."""
    import os
    import warnings

    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    import verl

    import re

    from hydra.errors import ConfigCompositionException, OverrideParseException

    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    overrides = ["+" + o if o.startswith("+") and not o.startswith("++") else o for o in case["overrides"]]
    added = []  # keys real verl 0.9.1's config does not have (older names): added, read by nothing there
    unparsed = []  # keys whose value real verl's Hydra cannot parse (a script's typo): their value quoted
    try:
        with warnings.catch_warnings(), initialize_config_dir(config_dir=config_dir, version_base=None):
            warnings.simplefilter("ignore")
            while True:
                try:
                    cfg = compose(config_name=case.get("config_name", "ppo_trainer"), overrides=overrides)
                    break
                except ConfigCompositionException as exc:
                    missing = re.match(r"Could not override '([^']+)'", str(exc))
                    if not missing or missing.group(1) in added:
                        raise
                    added.append(missing.group(1))
                    overrides = ["+" + o if o.split("=", 1)[0] == missing.group(1) else o for o in overrides]
                except OverrideParseException as exc:  # a value Hydra cannot parse: quoted, and named
                    bad = re.search(r"Error parsing override '([^=']+)=", str(exc))
                    if not bad or bad.group(1) in unparsed:
                        raise
                    unparsed.append(bad.group(1))
                    overrides = [f"{k}='{v}'" if k == bad.group(1) else o for o in overrides
                                 for k, v in [o.split("=", 1)]]
            values = {k: OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v
                      for k in case["keys"] for v in [OmegaConf.select(cfg, k, default="<missing>")]}
            from verl.utils.config import omega_conf_to_dataclass

            for section in ("actor_rollout_ref.actor", "critic"):
                optim = omega_conf_to_dataclass(OmegaConf.select(cfg, f"{section}.optim"))
                # FSDPOptimizerConfig's schedule, or McoreOptimizerConfig's (Megatron's OptimizerParamScheduler)
                megatron = ("lr_decay_style", "min_lr", "lr_warmup_init", "lr_decay_steps", "optimizer")
                fsdp = ("lr_scheduler_type", "min_lr_ratio", "num_cycles", "optimizer")
                for name in ("clip_grad", "lr", "lr_warmup_steps", "lr_warmup_steps_ratio", "weight_decay",
                             *(megatron if hasattr(optim, "lr_decay_style") else fsdp)):
                    values[f"{section}.optim.{name}"] = getattr(optim, name)
    except Exception as exc:  # the script is not valid in real verl 0.9.1: say why
        return {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0]}"}
    return {"values": values, "added": added, "unparsed": unparsed}


def _run_corr(case):
    """Real verl's decoupled rollout correction of one batch: {"weights" (or None), "mask", "metrics"}."""
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_rejection_mask

    weights, mask, metrics = compute_rollout_correction_and_rejection_mask(
        old_log_prob=case["old"], rollout_log_prob=case["rollout"], response_mask=case["mask"],
        rollout_is=case["rollout_is"], rollout_is_threshold=case["is_threshold"],
        rollout_is_batch_normalize=case["batch_normalize"], rollout_rs=case["rollout_rs"],
        rollout_rs_threshold=case["rs_threshold"])
    return {"weights": None if weights is None else weights.batch["rollout_is_weights"], "mask": mask,
            "metrics": metrics}


def _run_bypass(case):
    """Real verl's bypass-mode policy loss (compute_policy_loss_bypass_mode) on one micro-batch that is the
    whole mini-batch, its token count taken before the rejection (as its engine counts): loss and gradient."""
    import torch
    from verl.trainer.ppo import core_algos

    from verl.trainer.config.algorithm import RolloutCorrectionConfig

    config = _actor_config({**case, "name": "bypass_mode"})
    rc = RolloutCorrectionConfig(loss_type=case["loss_type"], rollout_is=case["rollout_is"],
                                 rollout_is_threshold=case["is_threshold"], rollout_is_batch_normalize=False,
                                 rollout_rs=case["rollout_rs"], rollout_rs_threshold=case["rs_threshold"],
                                 bypass_mode=True)
    object.__setattr__(config.policy_loss, "rollout_correction", rc)  # as real verl's apply_bypass_mode sets it
    config.global_batch_info.update(dp_size=1, batch_num_tokens=float(case["mask"].sum()),
                                    global_batch_size=case["mask"].shape[0])
    log_probs = case["log_probs"].clone().requires_grad_(True)
    torch.manual_seed(0)
    loss, _ = core_algos.compute_policy_loss_bypass_mode(case["rollout"], log_probs, case["adv"], case["mask"],
                                                         case["agg"], config)
    loss.backward()
    return {"loss": loss.detach(), "grad": log_probs.grad.detach()}


def _run_pf_ppo(case):
    """Real verl's preference-feedback PPO resampling (core_algos.compute_pf_ppo_reweight_data) of a batch whose
    rows carry their own index: {"rows": the original row of each resampled one}, its RNG seeded with case's seed."""
    import torch
    from verl import DataProto
    from verl.trainer.ppo import core_algos

    scores = case["token_level_scores"]
    data = DataProto.from_dict(tensors={"token_level_scores": scores, "row": torch.arange(scores.shape[0])})
    torch.manual_seed(case["seed"])
    out = core_algos.compute_pf_ppo_reweight_data(data, case["reweight_method"], case["weight_pow"])
    return {"rows": out.batch["row"].clone()}


RUNNERS = {"loss": lambda c: _run_loss(c), "adv": lambda c: _run_adv(c), "score": lambda c: _run_score(c),
           "lr": lambda c: _run_lr(c), "config": lambda c: _run_config(c), "corr": lambda c: _run_corr(c),
           "bypass": lambda c: _run_bypass(c), "pf_ppo": lambda c: _run_pf_ppo(c)}


def main(real_verl_dir: str, cases_path: str, results_path: str) -> None:
    sys.path.insert(0, real_verl_dir)  # real verl's `verl` before ours
    import torch

    import verl

    if not verl.__file__.startswith(real_verl_dir):
        raise SystemExit(f"real_verl_oracle: imported {verl.__file__}, not real verl from {real_verl_dir}")
    cases = torch.load(cases_path, weights_only=False)
    results = [RUNNERS[c["kind"]](c) for c in cases]
    torch.save(results, results_path)


if __name__ == "__main__":
    main(*sys.argv[1:4])
