"""The rollout correction against real verl 0.9.1's own functions (tests/real_verl_oracle.py): the decoupled
correction of a batch (weights and rejection mask, rollout_corr_helper) and the bypass-mode policy loss
(core_algos.compute_policy_loss_bypass_mode) equal ours on random batches."""

import pytest
import torch

from real_verl_runner import run_real_verl
from verl.algorithms.masked import count_tokens_and_seqs
from verl.algorithms.off_policy import LOSS_TYPES, CorrectionSpec, correct
from verl.algorithms.policy_losses import compute_policy_loss
from verl.algorithms.rollout_is import parse_is_threshold
from verl.algorithms.rollout_rs import parse_rejection

SETTINGS = [  # (rollout_is, is_threshold, batch_normalize, rollout_rs, rs_threshold)
    ("token", 2.0, False, None, None),
    ("sequence", 2.0, True, None, None),
    ("token", "0.8_1.25", False, None, None),  # IcePop
    ("token", 1.5, True, "token_k1,seq_max_k2", "0.7_1.4,0.05"),
    (None, 2.0, False, "seq_mean_k1", "0.95_1.05"),
    ("sequence", 3.0, False, "seq_sum_k3,token_k2", "0.5,0.02"),
]


def spec_of(rollout_is, is_threshold, batch_normalize, rollout_rs, rs_threshold, bypass=False, loss_type="ppo_clip"):
    upper, lower = parse_is_threshold(is_threshold)
    return CorrectionSpec(is_level=rollout_is, is_upper=upper, is_lower=lower, batch_normalize=batch_normalize,
                          rules=parse_rejection(rollout_rs, rs_threshold) if rollout_rs else (), bypass=bypass,
                          loss_type=loss_type)


def batch(seed: int):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(6, 7, generator=g) * 3
    rollout = old + torch.randn(6, 7, generator=g) * 0.15
    mask = torch.ones(6, 7)
    mask[1, 5:], mask[4, 2:] = 0, 0
    return old, rollout, mask


def test_decoupled_correction_equals_real_verl(tmp_path):
    cases = []
    for i, (ris, ist, bn, rs, rst) in enumerate(SETTINGS):
        old, rollout, mask = batch(i)
        cases.append(dict(kind="corr", old=old, rollout=rollout, mask=mask, rollout_is=ris, is_threshold=ist,
                          batch_normalize=bn, rollout_rs=rs, rs_threshold=rst))
    real = run_real_verl(cases, tmp_path)
    rejected_any = False
    for case, setting, got in zip(cases, SETTINGS, real):
        weights, kept, metrics = correct(case["old"], case["rollout"], case["mask"], spec_of(*setting))
        assert torch.equal(kept, got["mask"].float()), setting
        rejected_any |= bool((kept != case["mask"]).any())
        if got["weights"] is None:
            assert weights is None
        else:
            assert torch.allclose(weights, got["weights"], atol=1e-6), setting
        for name in ("rollout_is_mean", "rollout_is_batch_norm_factor", "rollout_rs_masked_fraction", "kl",
                     "chi2_token"):
            key = "rollout_corr/" + name
            if key in got["metrics"]:
                assert metrics[key] == pytest.approx(got["metrics"][key], rel=1e-5, abs=1e-7), (setting, name)
    assert rejected_any  # the cases reject something (else the mask comparison proves little)


@pytest.mark.parametrize("loss_type", ["ppo_clip", "reinforce"])
def test_bypass_loss_equals_real_verl(loss_type, tmp_path):
    old, rollout, mask = batch(7)
    g = torch.Generator().manual_seed(8)
    log_probs = rollout + torch.randn(6, 7, generator=g) * 0.2  # pi_theta after some updates
    adv = torch.randn(6, 7, generator=g)
    setting = ("sequence" if loss_type == "reinforce" else "token", 2.0, False, "token_k1", "0.8_1.25")
    case = dict(kind="bypass", rollout=rollout, log_probs=log_probs, adv=adv, mask=mask, loss_type=loss_type,
                rollout_is=setting[0], is_threshold=setting[1], rollout_rs=setting[3], rs_threshold=setting[4],
                agg="token-mean", clip_low=0.2, clip_high=0.28, clip_c=3.0)
    got = run_real_verl([case], tmp_path)[0]
    # ours, as the actor runs a micro-batch that is the whole mini-batch in bypass mode
    spec = spec_of(*setting, bypass=True, loss_type=loss_type)
    lp = log_probs.clone().requires_grad_(True)
    weights, pg_mask, _ = correct(lp.detach(), rollout, mask, spec)
    assert bool((pg_mask != mask).any())  # some tokens rejected
    tokens, seqs = count_tokens_and_seqs(mask)  # counted before the rejection, as real verl's engine counts
    loss, _ = compute_policy_loss(LOSS_TYPES[loss_type], lp, rollout, adv, pg_mask, clip_ratio_low=0.2,
                                  clip_ratio_high=0.28, clip_ratio_c=3.0 if loss_type == "ppo_clip" else 0.0,
                                  num_tokens=tokens, num_seqs=seqs,
                                  is_weights=weights if spec.applies_weights else None)
    loss.backward()
    assert float(loss) == pytest.approx(float(got["loss"]), rel=1e-5)
    assert torch.allclose(lp.grad, got["grad"], atol=1e-7)
