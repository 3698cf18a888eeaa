"""Runs real verl's own core_algos functions on cases from a file: the reference the algorithm
tests compare against (tests/test_algorithms_real_verl.py). Real verl's package is also named
`verl`, so this runs in its own process with real verl's folder first on sys.path:

    python3 tests/real_verl_oracle.py REAL_VERL_DIR cases.pt results.pt

cases.pt: a list of dicts, each {"kind": "loss" | "adv", "name": real verl's registered name, ...
tensors and settings} or {"kind": "score", "data_source", "response", "ground_truth"}; results.pt:
one dict per case (loss and d loss / d log_probs, advantages and returns, or the score and a dict
result's other entries). Only real verl's public registry functions are called; nothing of its
code is copied into the project.
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
                           tau_pos=p.get("tau_pos", 1.0), tau_neg=p.get("tau_neg", 1.05))


def _run_loss(case):
    import torch
    from verl.trainer.ppo import core_algos

    log_probs = case["log_probs"].clone().requires_grad_(True)
    torch.manual_seed(case.get("seed", 0))
    fn = core_algos.get_policy_loss_fn(case["name"])
    loss, _ = fn(case["old"], log_probs, case["adv"], case["mask"], case["agg"], _actor_config(case), None)
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
        adv, ret = fn(**common)
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


RUNNERS = {"loss": lambda c: _run_loss(c), "adv": lambda c: _run_adv(c), "score": lambda c: _run_score(c)}


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
