"""Where a real verl command line reaches our code, it trains as real verl 0.9.1 does: each
difference an audit found, by hand and against real verl's own functions (tests/real_verl_oracle.py
runs them in a second process: its package is also named `verl`).

The config oracle of every example script is tests/real_verl/test_real_verl_config_oracle.py.
"""

import math
from types import SimpleNamespace

import pytest
import torch

from test_algorithms_real_verl import PARAMS, random_mask, run_real_verl
from tools.real_verl_scripts.harness import write_rows
from verl.algorithms.advantages import compute_advantages
from verl.algorithms.policy_losses import compute_policy_loss
from verl.batch import Batch
from verl.compat.translate import load_translated, translate
from verl.config import ConfigError

A = "actor_rollout_ref.actor"


@pytest.fixture
def base(tmp_path):
    train = write_rows(str(tmp_path / "train.parquet"), "gsm8k", n=4)
    return [f"data.train_files={train}", "actor_rollout_ref.model.path=tiny:gpt2", "data.train_batch_size=2",
            f"{A}.ppo_mini_batch_size=2", "actor_rollout_ref.rollout.n=2", "trainer.total_training_steps=1",
            f"trainer.default_local_dir={tmp_path / 'out'}"]


def cfg_of(line):
    return load_translated(translate(line))


# ----------------------------------------------------------------------------- gpg
def test_gpg_through_main_ppo_is_real_verls(base, tmp_path):
    # rewards (1, 0, 0, 0) in one group: real verl's alpha = B / #nonzero = 4 / 1, mean 1/4, no std:
    # A = 4 (1 - 1/4) = 3 and 4 (0 - 1/4) = -1. The paper's alpha = B / B_valid = 1 with the std
    # (0.5, unbiased) gave (1.5, -0.5, -0.5, -0.5) before.
    cfg = cfg_of(base + ["algorithm.adv_estimator=gpg", f"{A}.policy_loss.loss_mode=gpg",
                         "algorithm.norm_adv_by_std_in_grpo=True"])  # said, but real verl's gpg never reads it
    a = cfg.algorithm
    assert (a.adv_estimator, a.norm_adv_by_std_in_grpo, a.gpg_alpha) == ("gpg", False, "nonzero")
    scores, mask, groups = torch.tensor([1.0, 0.0, 0.0, 0.0]), torch.ones(4, 3), ["p"] * 4
    adv, _ = compute_advantages("gpg", mask=mask, scores=scores, group_ids=groups,
                                norm_adv_by_std=a.norm_adv_by_std_in_grpo, gpg_alpha=a.gpg_alpha)
    assert torch.allclose(adv[:, 0], torch.tensor([3.0, -1.0, -1.0, -1.0]))
    token_rewards = torch.zeros(4, 3)
    token_rewards[:, -1] = scores
    real = run_real_verl([dict(kind="adv", name="gpg", token_rewards=token_rewards, mask=mask, group_ids=groups)],
                         tmp_path)
    assert torch.allclose(real[0]["adv"].float(), adv)
    # our native default stays the paper's: alpha = 4 / 4
    native, _ = compute_advantages("gpg", mask=mask, scores=scores, group_ids=groups, norm_adv_by_std=False)
    assert torch.allclose(native[:, 0], torch.tensor([0.75, -0.25, -0.25, -0.25]))


def test_gdpo_always_divides_by_the_std_through_main_ppo(base):
    # real verl's compute_advantage calls gdpo without norm_adv_by_std_in_grpo: its default, True
    a = cfg_of(base + ["algorithm.adv_estimator=gdpo", "algorithm.norm_adv_by_std_in_grpo=False"]).algorithm
    assert a.norm_adv_by_std_in_grpo is True
    a = cfg_of(base + ["algorithm.adv_estimator=grpo", "algorithm.norm_adv_by_std_in_grpo=False"]).algorithm
    assert a.norm_adv_by_std_in_grpo is False  # grpo reads it


# ----------------------------------------------------------------------------- dual clip
def _gspo_case():
    # one sequence of 3 tokens, log-ratio 3 each: s = e^3 = 20.09, A = -1. Clipped term -A clip(s) = 1.2 is
    # below -A s = 20.09, so L = 20.09; d L / d logp_t = -A s / 3 = 6.70 per token (token-mean).
    # A dual clip at c = 10 would cap L at -A c = 10 with gradient 0.
    old = torch.zeros(1, 3)
    logp = torch.full((1, 3), 3.0)
    return logp, old, -torch.ones(1, 3), torch.ones(1, 3)


def test_gspo_and_clip_cov_have_no_dual_clip(base, tmp_path):
    logp, old, adv, mask = _gspo_case()
    lp = logp.clone().requires_grad_(True)
    loss, _ = compute_policy_loss("gspo", lp, old, adv, mask, clip_ratio_low=0.2, clip_ratio_high=0.2)
    loss.backward()
    assert loss.item() == pytest.approx(math.exp(3), rel=1e-6)  # 20.09
    assert torch.allclose(lp.grad, torch.full((1, 3), math.exp(3) / 3))  # 6.70
    with pytest.raises(ValueError, match="no dual clip"):
        compute_policy_loss("gspo", lp, old, adv, mask, clip_ratio_low=0.2, clip_ratio_high=0.2, clip_ratio_c=10.0)
    # real verl's gspo and clip_cov with clip_ratio_c = 10 (they do not read it); clip_cov on tokens with
    # A < 0 and ratios e^3 that a dual clip would have capped
    g = torch.Generator().manual_seed(3)
    cases, ours = [dict(kind="loss", name="gspo", agg="token-mean", log_probs=logp, old=old, adv=adv, mask=mask,
                        clip_low=0.2, clip_high=0.2, clip_c=10.0)], [(loss.detach(), lp.grad)]
    b, r = 6, 5
    c_old = -torch.rand(b, r, generator=g) - 0.5
    c_logp = c_old + torch.where(torch.rand(b, r, generator=g) < 0.3, 3.0, 0.1 * torch.randn(b, r, generator=g))
    c_adv = torch.randn(b, r, generator=g)
    c_mask = random_mask(g, b, r, holes=False)
    params = dict(PARAMS, clip_cov_lb=-10.0, clip_cov_ub=10.0)  # some tokens selected too
    cases.append(dict(kind="loss", name="clip_cov", agg="token-mean", log_probs=c_logp, old=c_old, adv=c_adv,
                      mask=c_mask, clip_low=0.2, clip_high=0.28, clip_c=10.0, params=params, seed=5))
    lp = c_logp.clone().requires_grad_(True)
    torch.manual_seed(5)
    c_loss, _ = compute_policy_loss("clip_cov", lp, c_old, c_adv, c_mask, clip_ratio_low=0.2, clip_ratio_high=0.28,
                                    params=SimpleNamespace(**params))
    c_loss.backward()
    ours.append((c_loss.detach(), lp.grad))
    assert bool(((c_adv < 0) & (c_logp - c_old > math.log(10)) & (c_mask > 0)).any())  # a dual clip would act
    for case, (our_loss, grad), want in zip(cases, ours, run_real_verl(cases, tmp_path)):
        assert torch.allclose(our_loss, want["loss"], rtol=1e-5), case["name"]
        assert torch.allclose(grad, want["grad"], rtol=1e-4, atol=1e-7), case["name"]
    # main_ppo: clip_ratio_c reaches the vanilla loss only; our config refuses a dual clip elsewhere
    assert cfg_of(base).algorithm.clip_ratio_c == 3.0
    assert cfg_of(base + [f"{A}.policy_loss.loss_mode=gspo", f"{A}.clip_ratio_c=10"]).algorithm.clip_ratio_c == 0.0
    from verl.config import load_config

    with pytest.raises(ConfigError, match="the 'gspo' loss has no dual clip"):
        load_config(None, ["algorithm.name=gspo", "algorithm.clip_ratio_c=3"])
    assert load_config(None, ["algorithm.name=ppo", "algorithm.clip_ratio_c=3"]).algorithm.clip_ratio_c == 3.0


# ----------------------------------------------------------------------------- geo_mean
def test_geo_mean_takes_the_geometric_mean_of_importance_weights(tmp_path):
    # one sequence, rho = 1 on both tokens, A = 1, weights (0.5, 2): geometric mean sqrt(0.5 x 2) = 1 ->
    # L = -1 x 1 x 1 = -1.0; their arithmetic mean 1.25 gave -1.25 before.
    zeros, ones = torch.zeros(1, 2), torch.ones(1, 2)
    w = torch.tensor([[0.5, 2.0]])
    loss, _ = compute_policy_loss("geo_mean", zeros.clone().requires_grad_(True), zeros, ones, ones,
                                  clip_ratio_low=0.4, clip_ratio_high=0.4, is_weights=w)
    assert loss.item() == pytest.approx(-1.0, abs=1e-6)
    g = torch.Generator().manual_seed(4)
    cases, ours = [dict(kind="loss", name="geo_mean", agg="seq-mean-token-mean", log_probs=zeros, old=zeros,
                        adv=ones, mask=ones, clip_low=0.4, clip_high=0.4, is_weights=w)], [loss.detach()]
    grads = [None]
    for b, r in ((4, 6), (8, 5)):
        mask = random_mask(g, b, r, holes=False)
        old = -torch.rand(b, r, generator=g) * 2 - 0.1
        logp = old + 0.3 * torch.randn(b, r, generator=g)
        adv = (2 * torch.randn(b, 1, generator=g)).expand(b, r).clone()
        weights = torch.rand(b, r, generator=g) * 1.5 + 0.2
        cases.append(dict(kind="loss", name="geo_mean", agg="seq-mean-token-mean", log_probs=logp, old=old, adv=adv,
                          mask=mask, clip_low=0.4, clip_high=0.4, is_weights=weights))
        lp = logp.clone().requires_grad_(True)
        our_loss, _ = compute_policy_loss("geo_mean", lp, old, adv, mask, clip_ratio_low=0.4, clip_ratio_high=0.4,
                                          is_weights=weights)
        our_loss.backward()
        ours.append(our_loss.detach())
        grads.append(lp.grad)
    real = run_real_verl(cases, tmp_path)
    for our_loss, grad, want in zip(ours, grads, real):
        assert torch.allclose(our_loss, want["loss"], rtol=1e-5, atol=1e-6)
        if grad is not None:
            assert torch.allclose(grad, want["grad"], rtol=1e-4, atol=1e-6)


def test_geo_mean_over_micro_batches_is_the_mini_batch_mean(tmp_path):
    # Decision (docs/algorithms.md): the mean over the mini-batch's sequences, whatever the micro-batching.
    # Real verl's geo_mean returns torch.mean over each micro-batch and its engine sums the micro-batch
    # losses: two micro-batches of 2 give 2x the one-micro-batch loss there (here, they give it exactly).
    g = torch.Generator().manual_seed(6)
    b, r = 4, 5
    mask = torch.ones(b, r)
    old = -torch.rand(b, r, generator=g) - 0.1
    logp = old + 0.2 * torch.randn(b, r, generator=g)
    adv = torch.tensor([1.0, -1.0, 0.5, 2.0])[:, None].expand(b, r).clone()
    kw = dict(clip_ratio_low=0.4, clip_ratio_high=0.4)
    whole, _ = compute_policy_loss("geo_mean", logp, old, adv, mask, **kw)
    split = sum(compute_policy_loss("geo_mean", logp[s], old[s], adv[s], mask[s], num_seqs=b, **kw)[0]
                for s in (slice(0, 2), slice(2, 4)))
    assert split.item() == pytest.approx(whole.item(), abs=1e-6)
    cases = [dict(kind="loss", name="geo_mean", agg="seq-mean-token-mean", log_probs=logp[s], old=old[s], adv=adv[s],
                  mask=mask[s], clip_low=0.4, clip_high=0.4) for s in (slice(0, 4), slice(0, 2), slice(2, 4))]
    real_whole, real_a, real_b = (x["loss"] for x in run_real_verl(cases, tmp_path))
    assert real_whole.item() == pytest.approx(whole.item(), abs=1e-5)  # one micro-batch: the same
    assert (real_a + real_b).item() == pytest.approx(2 * whole.item(), abs=1e-5)  # two: real verl's is doubled


def test_sapo_and_geo_mean_fix_their_own_aggregation_only(base, tmp_path):
    # Real verl's sapo and geo_mean average their own term per sequence whatever loss_agg_mode says; its
    # KL loss and entropy bonus follow loss_agg_mode. sapo at rho = 1: L_t = -A_t 4 sigmoid(0) / tau =
    # -2 A_t / tau (tau_pos 1 where A > 0, tau_neg 1.05 elsewhere). Sequences of 1 and 3 tokens with
    # A = (1 | 1, 1, -1): token losses -2 | -2, -2, +1.905; per sequence -2 and -0.698, seq-mean -1.349
    # (token-mean would be (-6 + 1.905) / 4 = -1.024).
    mask = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    zeros = torch.zeros(2, 3)
    adv = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, -1.0]])
    params = SimpleNamespace(tau_pos=1.0, tau_neg=1.05)
    loss, _ = compute_policy_loss("sapo", zeros.clone().requires_grad_(True), zeros, adv, mask, clip_ratio_low=0.2,
                                  clip_ratio_high=0.2, loss_agg_mode="token-mean", params=params)
    assert loss.item() == pytest.approx((-2 + (-4 + 4 * 0.5 / 1.05) / 3) / 2, abs=1e-6)
    real = run_real_verl([dict(kind="loss", name="sapo", agg="token-mean", log_probs=zeros, old=zeros, adv=adv,
                               mask=mask, clip_low=0.2, clip_high=0.2, params=PARAMS)], tmp_path)[0]
    assert real["loss"].item() == pytest.approx(loss.item(), abs=1e-6)
    # main_ppo keeps loss_agg_mode for the KL and entropy terms (real verl's KL loss aggregates with it)
    for mode in ("sapo", "geo_mean"):
        a = cfg_of(base + [f"{A}.policy_loss.loss_mode={mode}", f"{A}.use_kl_loss=True"]).algorithm
        assert a.loss_agg_mode == "token-mean", mode


# ----------------------------------------------------------------------------- warm-up
SCHEDULES = [("constant", 4, 10), ("cosine", 2, 6), ("cosine", 0, 5), ("constant", 1, 3)]


def test_warmup_and_schedules_equal_real_verls(tmp_path):
    from verl.workers.optim import build_scheduler

    ours = {}
    for kind, warmup, total in SCHEDULES:
        training = SimpleNamespace(warmup_steps=warmup, critic_warmup_steps=None, total_steps=total, lr_scheduler=kind,
                                   min_lr_ratio=0.0, warmup_start_ratio=0.0, lr_decay_steps=None,
                                   warmup_from_first_step=False)
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
        scheduler, lrs = build_scheduler(opt, training), []
        for _ in range(total):
            lrs.append(opt.param_groups[0]["lr"])
            opt.step()
            scheduler.step()
        ours[kind, warmup] = lrs
    real = run_real_verl([dict(kind="lr", scheduler=k, warmup=w, total=t, steps=t) for k, w, t in SCHEDULES], tmp_path)
    for (kind, warmup, _), want in zip(SCHEDULES, real):
        assert ours[kind, warmup] == pytest.approx(want["lr"], abs=1e-12), (kind, warmup)
    assert ours["constant", 4][:6] == [0.0, 0.25, 0.5, 0.75, 1.0, 1.0]  # step s at s / W: the first at lr 0
    # cosine, W = 2: 0, 1/2, then (1 + cos(pi p)) / 2 with p = (s - 2) / 4
    assert ours["cosine", 2] == pytest.approx([0.0, 0.5, 1.0, (1 + math.cos(math.pi / 4)) / 2, 0.5,
                                               (1 + math.cos(3 * math.pi / 4)) / 2])


# ----------------------------------------------------------------------------- keys of main_ppo
def test_kl_cov_coefficient_defaults_to_real_verls(base):
    a = cfg_of(base + ["algorithm.adv_estimator=grpo", f"{A}.policy_loss.loss_mode=kl_cov"]).algorithm
    assert a.loss_params.ppo_kl_coef == 0.1  # real verl's PolicyLossConfig (ours natively: 1.0)
    from verl.config.algorithm import LossParamsConfig

    assert LossParamsConfig().ppo_kl_coef == 1.0


def test_grad_clip_is_read_from_optim_clip_grad(base):
    assert cfg_of(base + [f"{A}.grad_clip=0.5"]).training.grad_clip == 1.0  # real verl 0.9.1 reads nothing there
    assert cfg_of(base + [f"{A}.optim.clip_grad=0.5"]).training.grad_clip == 0.5
    assert cfg_of(base + [f"{A}.optim.clip_grad=0.5", f"+{A}.optim.grad_clip=0.3"]).training.grad_clip == 0.3
    t = cfg_of(base + ["critic.optim.clip_grad=0.7"]).training  # the critic's own, as real verl's
    assert (t.grad_clip, t.critic_grad_clip) == (1.0, 0.7)
    assert cfg_of(base + ["critic.optim.clip_grad=0.7", "+critic.optim.grad_clip=0.2"]).training.critic_grad_clip == 0.2
    assert cfg_of(base + ["critic.grad_clip=0.4"]).training.critic_grad_clip == 1.0  # read by nothing there


def test_bf16_weights_without_a_master_copy(base):
    # the actor's: the weights themselves in bf16, no float32 master (model.mixed_precision: pure,
    # tests/models/test_mixed_precision_pure.py trains it); the critic's is refused: its master stays float32
    cfg = cfg_of(base + [f"+{A}.fsdp_config.model_dtype=bfloat16"])
    assert (cfg.model.dtype, cfg.model.mixed_precision) == ("bfloat16", "pure")
    key = "critic.model.fsdp_config.model_dtype"
    with pytest.raises(ConfigError, match=f"{key}=bfloat16 is not supported: a critic trained in bf16/fp16 "
                                          "with no float32 master copy"):
        translate(base + [f"+{key}=bfloat16"])
    for key in (f"{A}.fsdp_config.model_dtype", key):
        translate(base + [f"+{key}=fp32"])  # real verl's default: nothing changes


def test_mini_batches_are_contiguous_as_real_verls(base):
    from verl.workers.micro_batches import MicroBatching
    from verl.workers.update_loop import MicroLoss, run_update

    assert cfg_of(base).training.shuffle_minibatches is False  # real verl's actor.shuffle: false
    assert cfg_of(base + [f"{A}.shuffle=True"]).training.shuffle_minibatches is True
    with pytest.raises(ConfigError, match="critic.shuffle=False differs"):
        translate(base + [f"{A}.shuffle=True", "critic.shuffle=False"])

    def order(shuffle: bool) -> list:
        rows = 8
        batch = Batch(response_mask=torch.ones(rows, 2), advantages=torch.arange(rows, dtype=torch.float)[:, None]
                      .expand(rows, 2).contiguous())
        p = torch.nn.Parameter(torch.zeros(1))
        seen = []

        def loss_fn(mb, counts):
            seen.append(mb.advantages[:, 0].long().tolist())
            return MicroLoss((p * 1.0).sum(), {}, {})

        training = SimpleNamespace(num_epochs=2, mini_batch_size=4, shuffle_minibatches=shuffle, grad_clip=1.0)
        run_update(batch, training, torch.Generator().manual_seed(0), MicroBatching(4), loss_fn,
                   {"actor": (torch.optim.SGD([p], lr=0.0), [p])})
        return seen

    assert order(False) == [[0, 1, 2, 3], [4, 5, 6, 7]] * 2  # the same slices every epoch
    shuffled = order(True)
    assert shuffled != order(False) and sorted(sum(shuffled[:2], [])) == list(range(8))


def test_calculate_log_probs_is_true_by_default_in_real_verl(base, tmp_path):
    from verl.compat.real_verl import TABLE

    assert TABLE["actor_rollout_ref.rollout.calculate_log_probs"].real_default is True
    real = run_real_verl([dict(kind="config", overrides=[f"{A}.ppo_micro_batch_size_per_gpu=2"],
                               keys=["actor_rollout_ref.rollout.calculate_log_probs",
                                     f"{A}.policy_loss.ppo_kl_coef", f"{A}.shuffle", f"{A}.fsdp_config.model_dtype"])],
                         tmp_path)[0]["values"]
    assert real["actor_rollout_ref.rollout.calculate_log_probs"] is True
    assert (real[f"{A}.policy_loss.ppo_kl_coef"], real[f"{A}.shuffle"], real[f"{A}.fsdp_config.model_dtype"]) == (
        0.1, False, "fp32")


def test_seq_mean_token_sum_norm_divides_by_the_response_length(tmp_path):
    # Real verl's divisor is loss_mask.shape[-1]: its agent loop pads every response to
    # rollout.response_length, so the width is that length; ours is max_response_len = rollout.max_new_tokens
    # (the same key through main_ppo), whatever width a batch is trimmed to. Two sequences of 2 and 3
    # tokens, L_t = -A logp with A = 1, logp = -1: token sums 2 and 3, seq-mean 2.5, / R = 8 -> 0.3125.
    R = 8
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    logp, adv = -torch.ones(2, 3), torch.ones(2, 3)
    ours, _ = compute_policy_loss("gpg", logp, logp, adv, mask, clip_ratio_low=0.2, clip_ratio_high=0.2,
                                  loss_agg_mode="seq-mean-token-sum-norm", max_response_len=R)
    assert ours.item() == pytest.approx(2.5 / 8)
    pad = torch.nn.functional.pad
    real = run_real_verl([dict(kind="loss", name="gpg", agg="seq-mean-token-sum-norm", log_probs=pad(logp, (0, R - 3)),
                               old=pad(logp, (0, R - 3)), adv=pad(adv, (0, R - 3)), mask=pad(mask, (0, R - 3)),
                               clip_low=0.2, clip_high=0.2)], tmp_path)[0]
    assert real["loss"].item() == pytest.approx(ours.item())


def test_the_critic_keeps_its_own_optimizer_settings(base, tmp_path):
    # real verl's critic.optim is its own (weight decay 0.01, clip 1.0, constant, no warm-up unless its own
    # keys say so), whatever the actor's optim sets; epochs, mini-batches and their order follow the actor's
    from verl.workers.optim import critic_setting, role_grad_clip

    actor = [f"{A}.optim.weight_decay=0.1", f"{A}.optim.clip_grad=0.5", f"{A}.optim.lr_warmup_steps=3",
             f"{A}.optim.lr_scheduler_type=cosine", "trainer.total_training_steps=6"]
    t = cfg_of(base + ["algorithm.adv_estimator=gae"] + actor).training
    ours = {k: critic_setting(t, k) for k in ("weight_decay", "grad_clip", "warmup_steps", "lr_scheduler")}
    assert ours == {"weight_decay": 0.01, "grad_clip": 1.0, "warmup_steps": 0, "lr_scheduler": "constant"}
    assert (t.weight_decay, t.grad_clip, t.warmup_steps, t.lr_scheduler) == (0.1, 0.5, 3, "cosine")
    assert (role_grad_clip(t, "actor"), role_grad_clip(t, "critic")) == (0.5, 1.0)
    real = run_real_verl([dict(kind="config", overrides=[f"{A}.ppo_micro_batch_size_per_gpu=2"] + actor,
                               keys=[])], tmp_path)[0]["values"]
    assert (real["critic.optim.weight_decay"], real["critic.optim.clip_grad"], real["critic.optim.lr_warmup_steps"],
            real["critic.optim.lr_warmup_steps_ratio"], real["critic.optim.lr_scheduler_type"]) == (
        0.01, 1.0, -1, 0.0, "constant")
    t = cfg_of(base + ["algorithm.adv_estimator=gae", "critic.optim.weight_decay=0.2", "critic.optim.clip_grad=2",
                       "critic.optim.warmup_style=cosine", "critic.optim.lr_warmup_steps=2"]).training
    assert {k: critic_setting(t, k) for k in ("weight_decay", "grad_clip", "warmup_steps", "lr_scheduler")} == {
        "weight_decay": 0.2, "grad_clip": 2.0, "warmup_steps": 2, "lr_scheduler": "cosine"}


CLASSIC = {"gae": "gae", "grpo": "grpo", "rloo": "rloo", "reinforce_plus_plus": "reinforce_pp",
           "reinforce_plus_plus_baseline": "reinforce_pp_baseline", "remax": "remax"}


def test_classic_estimators_and_the_vanilla_loss_equal_real_verls(tmp_path):
    # The estimators and the loss most scripts train with, against real verl's own (groups of 2-8: through
    # main_ppo rollout.n >= 2 for the group estimators), gae whitened as real verl's is.
    from test_algorithms_real_verl import SHAPES, random_groups
    from verl.algorithms.masked import masked_whiten

    g = torch.Generator().manual_seed(11)
    cases, ours = [], []
    for b, r in SHAPES:
        groups = random_groups(g, b, 2)
        mask = random_mask(g, b, r, holes=True)
        scores = torch.randint(0, 3, (b,), generator=g).float() / 2
        last = (mask * torch.arange(r)).argmax(dim=1)
        token_rewards = torch.zeros(b, r)
        token_rewards[torch.arange(b), last] = scores
        values = torch.randn(b, r, generator=g)
        baselines = torch.rand(b, generator=g)
        for real_name, name in CLASSIC.items():
            for norm in ((True, False) if name == "grpo" else (True,)):
                case = dict(kind="adv", name=real_name, token_rewards=token_rewards, mask=mask, group_ids=groups,
                            values=values, gamma=0.99, lam=0.95, baselines=baselines, norm_by_std=norm)
                adv, ret = compute_advantages(name, mask=mask, token_rewards=token_rewards, values=values,
                                              scores=token_rewards.sum(-1), baseline_scores=baselines,
                                              group_ids=groups, gamma=0.99, lam=0.95, norm_adv_by_std=norm)
                if name == "gae":
                    adv = masked_whiten(adv, mask)
                cases.append(case)
                ours.append((adv, ret))
        old = -torch.rand(b, r, generator=g) * 3 - 0.05
        log_probs = old + 0.6 * torch.randn(b, r, generator=g)  # ratios beyond 3 too: the dual clip acts
        adv = 2 * torch.randn(b, r, generator=g)
        for agg in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"):
            cases.append(dict(kind="loss", name="vanilla", agg=agg, log_probs=log_probs, old=old, adv=adv, mask=mask,
                              clip_low=0.2, clip_high=0.28, clip_c=3.0))
            lp = log_probs.clone().requires_grad_(True)
            loss, _ = compute_policy_loss("ppo", lp, old, adv, mask, clip_ratio_low=0.2, clip_ratio_high=0.28,
                                          clip_ratio_c=3.0, loss_agg_mode=agg, max_response_len=r)
            loss.backward()
            ours.append((loss.detach(), lp.grad))
    for case, (x, y), want in zip(cases, ours, run_real_verl(cases, tmp_path)):
        label = (case["name"], case.get("agg"), case.get("norm_by_std"), tuple(case["mask"].shape))
        if case["kind"] == "adv":
            assert torch.allclose(x * case["mask"], want["adv"].float() * case["mask"], rtol=1e-4, atol=1e-5), label
            if case["name"] == "gae":  # the critic's targets; the other estimators' returns train nothing
                assert torch.allclose(y * case["mask"], want["ret"].float() * case["mask"], rtol=1e-4, atol=1e-5), label
        else:
            assert torch.allclose(x, want["loss"], rtol=1e-5, atol=1e-6), label
            assert torch.allclose(y, want["grad"], rtol=1e-4, atol=1e-6), label


def test_greedy_generation_trains_at_temperature_one_or_is_refused(base):
    # real verl's actor divides its logits by rollout.temperature even when do_sample=False generates greedily;
    # here greedy answers train at temperature 1, so only temperature 1 (its default) is accepted with it
    cfg = cfg_of(base + ["actor_rollout_ref.rollout.do_sample=False"])
    assert cfg.rollout.temperature == 0.0
    with pytest.raises(ConfigError, match="rollout.temperature=0.7 is not supported: greedy generation"):
        translate(base + ["actor_rollout_ref.rollout.do_sample=False", "actor_rollout_ref.rollout.temperature=0.7"])

