"""The rollout correction (verl/algorithms/off_policy.py, rollout_is.py, rollout_rs.py): hand-derived values."""

import math

import pytest
import torch

from verl.algorithms.aggregation import aggregate_loss
from verl.algorithms.masked import count_tokens_and_seqs
from verl.algorithms.off_policy import CorrectionSpec, correct, correction_spec, ratio_quantile
from verl.algorithms.policy_losses import compute_policy_loss
from verl.algorithms.rollout_is import is_weights, parse_is_threshold
from verl.algorithms.rollout_rs import parse_rejection, rejection_mask
from verl.config import load_config
from verl.errors import ConfigError


def test_the_rejected_token_leaves_the_denominator():
    # One response of 4 tokens, A = 1, pi = pi_old (ratio 1): each token's ppo loss is -1. The engine gave
    # token 4 a log-prob 2 lower than pi_old: r_4 = e^2 = 7.39 > cap 2, so mask mode rejects it.
    old = torch.zeros(1, 4)
    engine = torch.tensor([[0.0, 0.0, 0.0, -2.0]])
    mask, adv = torch.ones(1, 4), torch.ones(1, 4)
    spec = correction_spec(load_config(None, ["rollout.tis_cap=2.0", "rollout.is_mode=mask"]).rollout, None)
    _, kept, metrics = correct(old, engine, mask, spec)
    assert kept.tolist() == [[1.0, 1.0, 1.0, 0.0]]
    assert metrics["rollout_corr/rollout_rs_masked_fraction"] == 0.25  # 1 of 4 tokens
    tokens, seqs = count_tokens_and_seqs(kept)  # the update loop's counts, from the corrected mask
    loss, _ = compute_policy_loss("ppo", old.clone(), old, adv, kept, clip_ratio_low=0.2, clip_ratio_high=0.2,
                                  num_tokens=tokens, num_seqs=seqs)
    assert float(loss) == pytest.approx(-1.0)  # (-1 - 1 - 1) / 3: real verl's value
    # what the mask mode did before: weight 0 on the token, which stayed in the mask: (-1 - 1 - 1 + 0) / 4
    kept_in = aggregate_loss(-adv * kept, mask, "token-mean")
    assert float(kept_in) == pytest.approx(-0.75)


def test_token_and_sequence_weights_by_hand():
    # log r = [0.5, -0.2, 1.0 | 0.1, 0.1, pad]
    lr = torch.tensor([[0.5, -0.2, 1.0], [0.1, 0.1, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    w, s = is_weights(lr, mask, "token", upper=2.0)
    # e^0.5 = 1.6487, e^-0.2 = 0.8187, e^1 = 2.718 -> 2 (truncated); e^0.1 = 1.1052; padding 0
    assert torch.allclose(w, torch.tensor([[1.6487, 0.8187, 2.0], [1.1052, 1.1052, 0.0]]), atol=1e-4)
    assert s["rollout_is_ratio_fraction_high"] == pytest.approx(1 / 5)
    w, _ = is_weights(lr, mask, "sequence", upper=2.0)
    # row 1: exp(0.5 - 0.2 + 1.0) = e^1.3 = 3.67 -> 2; row 2: exp(0.2) = 1.2214 on its 2 tokens (padding excluded)
    assert torch.allclose(w, torch.tensor([[2.0, 2.0, 2.0], [1.2214, 1.2214, 0.0]]), atol=1e-4)
    # IcePop "0.9_1.5": token weights outside [0.9, 1.5] become 0, the mask is not touched
    w, _ = is_weights(lr, mask, "token", upper=1.5, lower=0.9)
    assert torch.allclose(w, torch.tensor([[0.0, 0.0, 0.0], [1.1052, 1.1052, 0.0]]), atol=1e-4)


def test_batch_normalisation_makes_the_mean_one():
    torch.manual_seed(0)
    lr = torch.randn(4, 6) * 0.3
    mask = torch.ones(4, 6)
    mask[1, 4:] = 0
    w, s = is_weights(lr, mask, "token", upper=3.0, batch_normalize=True)
    assert float((w * mask).sum() / mask.sum()) == pytest.approx(1.0)  # over the valid tokens
    assert s["rollout_is_batch_norm_factor"] == pytest.approx(s["rollout_is_mean"])
    w, _ = is_weights(lr, mask, "sequence", upper=3.0, batch_normalize=True)
    per_seq = (w * mask).sum(-1) / mask.sum(-1)  # each response's one weight, counted once
    assert float(per_seq.mean()) == pytest.approx(1.0)


def test_equal_policies_change_nothing():
    # engine == actor: log r = 0 everywhere, so every weight is 1 and nothing is rejected
    lp = torch.randn(3, 5)
    mask = torch.ones(3, 5)
    for spec in (CorrectionSpec(is_level="token"), CorrectionSpec(is_level="sequence", batch_normalize=True),
                 CorrectionSpec(is_level="token", is_upper=5.0, is_lower=0.5),
                 CorrectionSpec(rules=parse_rejection("token_k1,seq_sum_k3,seq_max_k2,seq_mean_k1", "0.999_1.001,1e-6,"
                                                      "1e-6,0.999_1.001"))):
        w, kept, m = correct(lp, lp.clone(), mask, spec)
        assert torch.equal(kept, mask)
        if w is not None:
            assert torch.allclose(w, torch.ones_like(w))
        assert m["rollout_corr/kl"] == 0.0 and m["rollout_corr/chi2_token"] == pytest.approx(0.0, abs=1e-6)


def test_rejection_options_by_hand():
    # l = log pi_old - log pi_engine on 3 valid tokens of row 1; row 2 agrees exactly
    lr = torch.tensor([[0.4, -0.1, 0.0], [0.0, 0.0, 0.0]])
    mask = torch.ones(2, 3)
    # token_k1 "0.7_1.2": keep log 0.7 <= -l <= log 1.2, i.e. -0.357 <= -l <= 0.182: -0.4 fails (token 1)
    kept, s = rejection_mask(lr, mask, parse_rejection("token_k1", "0.7_1.2"))
    assert kept.tolist() == [[0.0, 1.0, 1.0], [1.0, 1.0, 1.0]]
    assert s["rollout_rs_seq_masked_fraction"] == 0.5
    # seq_sum_k2 0.05: row 1 sums 0.5 (0.16 + 0.01) = 0.085 > 0.05 -> the whole response out
    kept, _ = rejection_mask(lr, mask, parse_rejection("seq_sum_k2", 0.05))
    assert kept.tolist() == [[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]
    # seq_max_k3 0.1: max of e^l - 1 - l is e^0.4 - 1.4 = 0.0918 <= 0.1 -> kept; 0.09 -> rejected
    assert rejection_mask(lr, mask, parse_rejection("seq_max_k3", 0.1))[0].sum() == 6
    assert rejection_mask(lr, mask, parse_rejection("seq_max_k3", 0.09))[0].sum() == 3
    # seq_mean_k1 single 1.1: lower 1/1.1; mean(-l) of row 1 = -0.1 >= log(1/1.1) = -0.0953? no -> rejected
    assert rejection_mask(lr, mask, parse_rejection("seq_mean_k1", "1.1"))[0].tolist()[0] == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("spec, error", [
    ("0_2", "lower bound"), ("-1", "upper bound"), ("x", "expected a number"), (True, "expected a number")])
def test_is_threshold_errors(spec, error):
    with pytest.raises(ValueError, match=error):
        parse_is_threshold(spec)


def test_rejection_errors():
    with pytest.raises(ValueError, match="'token_k4' is not one of"):
        parse_rejection("token_k4", 1.0)
    with pytest.raises(ValueError, match="2 thresholds for 3 options"):
        parse_rejection("token_k1,seq_max_k2,token_k3", "0.5_2,1")
    with pytest.raises(ValueError, match="takes one number as its threshold"):
        parse_rejection("token_k2", "0.5_2")
    assert parse_rejection("token_k1", 2.0)[0].lower_log == pytest.approx(math.log(0.5))


def test_shorthand_and_section_resolve_alike():
    trunc = load_config(None, ["rollout.tis_cap=3.0"])
    assert correction_spec(trunc.rollout, trunc.algorithm.rollout_correction) == CorrectionSpec(is_level="token",
                                                                                              is_upper=3.0)
    native = load_config(None, ["algorithm.rollout_correction.rollout_is=token",
                                "algorithm.rollout_correction.rollout_is_threshold=3.0"])
    assert correction_spec(native.rollout, native.algorithm.rollout_correction) == CorrectionSpec(is_level="token",
                                                                                                is_upper=3.0)
    off = load_config(None, [])
    assert not correction_spec(off.rollout, off.algorithm.rollout_correction).enabled


@pytest.mark.parametrize("overrides, key", [
    (["algorithm.rollout_correction.rollout_is=token", "algorithm.rollout_correction.rollout_is_threshold=2.0_1.0"],
     "algorithm.rollout_correction.rollout_is_threshold"),
    (["algorithm.rollout_correction.rollout_rs=token_k1"], "algorithm.rollout_correction.rollout_rs_threshold"),
    (["algorithm.rollout_correction.rollout_rs=seq_k1", "algorithm.rollout_correction.rollout_rs_threshold=2"],
     "algorithm.rollout_correction.rollout_rs"),
    (["algorithm.rollout_correction.loss_type=reinforce"], "algorithm.rollout_correction.loss_type"),
    (["algorithm.rollout_correction.rollout_is=tokens"], "algorithm.rollout_correction.rollout_is"),
    (["rollout.tis_cap=2", "algorithm.rollout_correction.rollout_is=token"], "rollout.tis_cap"),
    (["algorithm.rollout_correction.bypass_mode=true", "algorithm.policy_loss=gspo"], "algorithm.policy_loss"),
])
def test_bad_settings_name_the_key(overrides, key):
    with pytest.raises(ConfigError, match="^" + key.replace(".", r"\.") + ":"):
        load_config(None, overrides)


def test_bypass_picks_its_loss():
    cfg = load_config(None, ["algorithm.rollout_correction.bypass_mode=true",
                             "algorithm.rollout_correction.loss_type=reinforce"])
    assert cfg.algorithm.policy_loss == "reinforce"
    assert load_config(None, ["algorithm.rollout_correction.bypass_mode=true"]).algorithm.policy_loss == "ppo"


# rollout/is_ratio_p999: the tail of the per-token importance ratio pi_actor / pi_engine
def test_the_quantile_of_the_masked_ratios():
    # log r = 0, ln 2, ln 4 on the counted tokens -> r = 1, 2, 4 (the masked fourth, e^9, is left out).
    # torch.quantile interpolates between order statistics at position (n - 1) q: q = 0.5 -> 2;
    # q = 0.999 -> position 1.998 -> 2 + 0.998 x (4 - 2) = 3.996; q = 1 -> 4
    engine = torch.zeros(1, 4)
    actor = torch.tensor([[0.0, math.log(2), math.log(4), 9.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    assert ratio_quantile(actor, engine, mask, 0.5) == pytest.approx(2.0, abs=1e-6)
    assert ratio_quantile(actor, engine, mask) == pytest.approx(3.996, abs=1e-5)
    assert ratio_quantile(actor, engine, mask, 1.0) == pytest.approx(4.0, abs=1e-6)
    assert ratio_quantile(actor, engine, torch.zeros(1, 4)) == 1.0  # no token counted
    assert ratio_quantile(engine, engine, mask) == 1.0  # the same policy: every ratio 1
