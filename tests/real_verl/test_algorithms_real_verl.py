"""The 2026 algorithm family against real verl's own core_algos functions of the same name, on
random inputs (padding and interior masks, groups of 1-8, several shapes), to float rounding.

Real verl 0.9.1 is installed apart from the project by `scripts/install_cpu.sh --test`
(its package is also named `verl`); tests/real_verl_oracle.py runs it in a second process.
Where the project follows the paper instead of real verl, the test says so and checks the
difference is exactly that (singleton groups; GPG's alpha; GMPO's empty rows).
"""

from types import SimpleNamespace

import torch
from real_verl_runner import run_real_verl

from verl.algorithms.advantages import compute_advantages
from verl.algorithms.group_baselines import compute_gpg
from verl.algorithms.policy_losses import compute_policy_loss

PARAMS = dict(tau_pos=1.0, tau_neg=1.05, clip_cov_ratio=0.05, clip_cov_lb=0.2, clip_cov_ub=5.0, kl_cov_ratio=0.05,
              ppo_kl_coef=1.0)
SHAPES = [(4, 6), (8, 16), (16, 5)]


def random_mask(g: torch.Generator, b: int, r: int, holes: bool) -> torch.Tensor:
    """(b, r) right-padded to lengths 1..r; with holes, some interior tokens (tool output) masked too."""
    lengths = torch.randint(1, r + 1, (b,), generator=g)
    mask = (torch.arange(r)[None, :] < lengths[:, None]).float()
    if holes:
        interior = (torch.rand(b, r, generator=g) < 0.2) & (torch.arange(r)[None, :] > 0)
        mask = mask * (~interior).float()
    return mask


def random_groups(g: torch.Generator, b: int, smallest: int) -> list:
    """Group ids of sizes smallest..8 covering b samples (the last group takes the rest)."""
    ids, gid = [], 0
    while len(ids) < b:
        size = int(torch.randint(smallest, 9, (1,), generator=g))
        ids += [f"p{gid}"] * min(size, b - len(ids))
        gid += 1
    if smallest > 1 and ids.count(ids[-1]) < smallest:  # no group below the smallest size
        ids = [ids[0] if x == ids[-1] else x for x in ids]
    return ids


LOSS_CASES = [("cispo", "token-mean"), ("cispo", "seq-mean-token-mean"), ("cispo", "seq-mean-token-sum"),
              ("sapo", "seq-mean-token-mean"), ("gpg", "token-mean"), ("gpg", "seq-mean-token-sum-norm"),
              ("geo_mean", "seq-mean-token-mean"), ("clip_cov", "token-mean"), ("kl_cov", "token-mean"),
              ("kl_cov", "seq-mean-token-mean")]


def test_policy_losses_equal_real_verl(tmp_path):
    g = torch.Generator().manual_seed(0)
    cases, ours = [], []
    for name, agg in LOSS_CASES:
        for b, r in SHAPES:
            mask = random_mask(g, b, r, holes=name != "geo_mean")
            old = -torch.rand(b, r, generator=g) * 3 - 0.05  # log-probs in (-3.05, -0.05)
            log_probs = old + 0.3 * torch.randn(b, r, generator=g)  # ratios around 1, some clipped
            adv = 2 * torch.randn(b, r, generator=g)
            if name == "geo_mean":  # GMPO reads one advantage per sequence
                adv = adv[:, :1].expand(b, r).clone()
            low, high = (0.4, 0.4) if name == "geo_mean" else (0.2, 0.28)
            seed = int(torch.randint(0, 10_000, (1,), generator=g))
            cases.append(dict(kind="loss", name=name, agg=agg, log_probs=log_probs, old=old, adv=adv, mask=mask,
                              clip_low=low, clip_high=high, params=PARAMS, seed=seed))
            lp = log_probs.clone().requires_grad_(True)
            torch.manual_seed(seed)  # clip_cov's random choice draws from the same generator state
            loss, _ = compute_policy_loss(name, lp, old, adv, mask, clip_ratio_low=low, clip_ratio_high=high,
                                          loss_agg_mode=agg, params=SimpleNamespace(**PARAMS))
            loss.backward()
            ours.append((loss.detach(), lp.grad))
    real = run_real_verl(cases, tmp_path)
    held_back = 0
    for case, (loss, grad), want in zip(cases, ours, real):
        label = f"{case['name']} {case['agg']} {tuple(case['mask'].shape)}"
        assert torch.allclose(loss, want["loss"], rtol=1e-5, atol=1e-6), (label, loss, want["loss"])
        assert torch.allclose(grad, want["grad"], rtol=1e-4, atol=1e-6), label
        if case["name"] == "clip_cov":
            held_back += int(((grad == 0) & (case["mask"] > 0)).sum())
    assert held_back > 0  # clip_cov did hold tokens back in these cases (the selection was compared)


def test_estimators_equal_real_verl(tmp_path):
    g = torch.Generator().manual_seed(1)
    cases, ours = [], []
    for b, r in SHAPES + [(24, 7)]:
        for name in ("gpg", "opo", "gdpo", "optimal_token_baseline"):
            smallest = 1 if name == "optimal_token_baseline" else 2  # singletons differ by design (below)
            groups = random_groups(g, b, smallest)
            mask = random_mask(g, b, r, holes=name in ("opo", "optimal_token_baseline"))
            scores = torch.randint(0, 3, (b,), generator=g).float() / 2  # 0, 0.5, 1: ties and uniform groups
            token_rewards = torch.zeros(b, r)
            last = (mask * torch.arange(r)).argmax(dim=1)
            token_rewards[torch.arange(b), last] = scores
            if name == "optimal_token_baseline":
                token_rewards = token_rewards + 0.1 * torch.randn(b, r, generator=g) * mask  # dense rewards too
            case = dict(kind="adv", name=name, token_rewards=token_rewards, mask=mask, group_ids=groups)
            if name == "gpg":
                # real verl's alpha: B / (samples with a nonzero reward); the paper's is B / B_valid (below)
                alpha = b / max(1, int(torch.count_nonzero(scores)))
                adv, ret = compute_gpg(scores, mask, groups, alpha=alpha)
            elif name == "opo":
                adv, ret = compute_advantages("opo", mask=mask, scores=scores, group_ids=groups)
            elif name == "gdpo":
                parts = torch.stack([scores, torch.randint(0, 2, (b,), generator=g).float(),
                                     torch.rand(b, generator=g)], dim=1)
                case.update(parts=parts, weights=[1.0, 0.5, 2.0])
                adv, ret = compute_advantages("gdpo", mask=mask, reward_parts=parts, reward_weights=[1.0, 0.5, 2.0],
                                              group_ids=groups, norm_adv_by_std=True)
            else:
                old = -torch.rand(b, r, generator=g) * 2
                sum_sq = torch.rand(b, r, generator=g) * 0.9 + 0.05
                case.update(old_log_probs=old, sum_pi_squared=sum_sq)
                adv, ret = compute_advantages(name, mask=mask, token_rewards=token_rewards, group_ids=groups,
                                              old_log_probs=old, sum_pi_squared=sum_sq)
            cases.append(case)
            ours.append((adv, ret))
    real = run_real_verl(cases, tmp_path)
    for case, (adv, ret), want in zip(cases, ours, real):
        label = f"{case['name']} {tuple(case['mask'].shape)}"
        assert torch.allclose(adv, want["adv"].float(), rtol=1e-4, atol=1e-5), (label, adv, want["adv"])
        assert torch.allclose(ret, want["ret"].float(), rtol=1e-4, atol=1e-5), label


# our estimator -> real verl's registered name, for the lone-sample rule
LONE_ESTIMATORS = {"grpo": "grpo", "rloo": "rloo", "reinforce_pp_baseline": "reinforce_plus_plus_baseline",
                   "gpg": "gpg", "opo": "opo", "gdpo": "gdpo"}


def test_lone_samples_with_group_of_one_score_equal_real_verl(tmp_path):
    """algorithm.group_of_one: score (main_ppo's): groups of 1-8 including singletons, and rollout.n 1
    (every group a singleton), give real verl's advantages for every group estimator that has the rule."""
    g = torch.Generator().manual_seed(2)
    cases, ours = [], []
    for b, r in SHAPES:
        for singletons_only in (False, True):
            for name, real_name in LONE_ESTIMATORS.items():
                groups = [f"p{i}" for i in range(b)] if singletons_only else random_groups(g, b, 1)
                mask = random_mask(g, b, r, holes=False)
                scores = torch.randint(0, 3, (b,), generator=g).float() / 2
                token_rewards = torch.zeros(b, r)
                token_rewards[torch.arange(b), (mask * torch.arange(r)).argmax(dim=1)] = scores
                case = dict(kind="adv", name=real_name, token_rewards=token_rewards, mask=mask, group_ids=groups)
                inputs = dict(mask=mask, scores=scores, group_ids=groups, group_of_one="score")
                if name == "gpg":
                    inputs.update(gpg_alpha="nonzero", norm_adv_by_std=False)  # real verl's gpg (main_ppo's)
                if name == "gdpo":
                    parts = torch.stack([scores, torch.randint(0, 2, (b,), generator=g).float()], dim=1)
                    case.update(parts=parts, weights=[1.0, 0.5])
                    inputs.update(reward_parts=parts, reward_weights=[1.0, 0.5])
                cases.append(case)
                ours.append(compute_advantages(name, **inputs))
    real = run_real_verl(cases, tmp_path)
    for case, (adv, ret), want in zip(cases, ours, real):
        label = f"{case['name']} {tuple(case['mask'].shape)} groups {len(set(case['group_ids']))}"
        assert torch.allclose(adv, want["adv"].float(), rtol=1e-4, atol=1e-5), (label, adv, want["adv"])


def test_lone_samples_by_hand():
    # Groups a = (1, 0) and a lone b = (0.5), one token each.
    mask, scores, groups = torch.ones(3, 1), torch.tensor([1.0, 0.0, 0.5]), ["a", "a", "b"]

    def adv(name, rule, **kw):
        return compute_advantages(name, mask=mask, scores=scores, group_ids=groups, group_of_one=rule, **kw)[0][:, 0]

    # grpo: a -> +-0.5 / (std 0.7071 + eps) = +-0.7071; b alone: 0, or (0.5 - 0) / (1 + eps) = 0.5
    assert torch.allclose(adv("grpo", "zero"), torch.tensor([0.70711, -0.70711, 0.0]), atol=1e-4)
    assert torch.allclose(adv("grpo", "score"), torch.tensor([0.70711, -0.70711, 0.5]), atol=1e-4)
    # rloo: a -> 1 - 0 = 1 and 0 - 1 = -1; b: its reward 0.5 (no one to leave out)
    assert torch.allclose(adv("rloo", "score"), torch.tensor([1.0, -1.0, 0.5]))
    # opo: b's advantage is its reward; gpg (alpha = 3 samples / 2 nonzero rewards = 1.5, no std):
    # a -> 1.5 (1 - 0.5) = +-0.75, b -> 1.5 x 0.5 = 0.75
    assert torch.allclose(adv("opo", "score"), torch.tensor([0.5, -0.5, 0.5]))
    assert torch.allclose(adv("gpg", "score", gpg_alpha="nonzero", norm_adv_by_std=False),
                          torch.tensor([0.75, -0.75, 0.75]))


def test_where_the_paper_differs_from_real_verl():
    # Singletons: a sequence alone in its group has no baseline to compare with: 0 here for gpg, opo
    # and gdpo (real verl: alpha r, r, and r / (1 + eps) through its grpo).
    mask = torch.ones(3, 2)
    scores = torch.tensor([1.0, 0.0, 1.0])
    groups = ["a", "a", "lonely"]
    assert compute_advantages("opo", mask=mask, scores=scores, group_ids=groups)[0][2].abs().sum() == 0
    assert compute_advantages("gpg", mask=mask, scores=scores, group_ids=groups)[0][2].abs().sum() == 0
    # GPG's alpha: B / B_valid, B_valid the samples of groups whose rewards differ (the paper's B - M):
    # groups a = (1, 0) valid, b = (1, 1) not -> B = 4, B_valid = 2, alpha = 2, A_a = 2 (1 - 0.5) = +-1.
    # Real verl's B / (nonzero rewards) = 4 / 3 would give +-2/3.
    scores = torch.tensor([1.0, 0.0, 1.0, 1.0])
    adv, _ = compute_advantages("gpg", mask=torch.ones(4, 1), scores=scores, group_ids=["a", "a", "b", "b"],
                                norm_adv_by_std=False)  # the gpg preset's F_norm = 1
    assert torch.allclose(adv[:, 0], torch.tensor([1.0, -1.0, 0.0, 0.0]))
