"""Preference-feedback PPO (verl/algorithms/pf_ppo.py, real verl's algorithm.use_pf_ppo): the weights by hand,
the resampled rows against real verl 0.9.1's compute_pf_ppo_reweight_data (tests/real_verl_oracle.py), the
translation of its keys, a training step that trains on the resampled batch, and its entropy metric taken over the
pi_old pass's rows."""

import json

import pytest
import torch

from real_verl_runner import run_real_verl
from tools.real_verl_scripts.harness import write_rows
from verl.algorithms.pf_ppo import pf_ppo_indices, pf_ppo_weights
from verl.compat.translate import load_translated, translate
from verl.config import ConfigError, config_from_dict
from verl.trainer.main_ppo import main

EPS = 1e-8


def test_weights_by_hand():
    s = torch.tensor([1.0, -2.0, 0.0, 0.5])
    # pow, p = 2: |s|^2 = 1, 4, 0, 0.25; each + 1e-8 (the 0 keeps a chance of 1e-8)
    assert torch.allclose(pf_ppo_weights(s, "pow", 2.0), torch.tensor([1 + EPS, 4 + EPS, EPS, 0.25 + EPS]))
    # pow, p = 1: |s| = 1, 2, 0, 0.5
    assert torch.allclose(pf_ppo_weights(s, "pow", 1.0), torch.tensor([1 + EPS, 2 + EPS, EPS, 0.5 + EPS]))
    # max_min: max 1.0 (row 0) and min -2.0 (row 1) weigh 1, the others 0 (+ 1e-8)
    assert torch.equal(pf_ppo_weights(s, "max_min", 2.0), torch.tensor([1 + EPS, 1 + EPS, EPS, EPS]))
    # max_random: the max weighs 0.4, every other 0.1; ties at the max all weigh 0.4
    assert torch.allclose(pf_ppo_weights(torch.tensor([3.0, 1.0, 3.0]), "max_random", 2.0),
                          torch.tensor([0.4 + EPS, 0.1 + EPS, 0.4 + EPS]))
    with pytest.raises(ValueError, match="not one of pow, max_min, max_random"):
        pf_ppo_weights(s, "softmax", 2.0)


def test_indices_draw_with_replacement_in_proportion():
    # weights 1e-8, 1 + 1e-8, 3 + 1e-8 (pow 1 of scores 0, 1, -3): row 0 is (almost) never drawn, row 2 three
    # times as often as row 1
    g = torch.Generator().manual_seed(0)
    draws = torch.cat([pf_ppo_indices(torch.tensor([0.0, 1.0, -3.0]), "pow", 1.0, generator=g) for _ in range(4000)])
    counts = torch.bincount(draws, minlength=3).float()
    assert counts[0] == 0 and counts.sum() == 12000
    assert counts[2] / counts[1] == pytest.approx(3.0, rel=0.08)


@pytest.mark.parametrize("method, weight_pow", [("pow", 2.0), ("pow", 0.5), ("max_min", 2.0), ("max_random", 2.0)])
def test_resampled_rows_equal_real_verl(method, weight_pow, tmp_path):
    g = torch.Generator().manual_seed(3)
    cases = []
    for seed in range(4):
        scores = torch.zeros(8, 5)
        scores[:, -1] = torch.randint(-2, 3, (8,), generator=g).float()  # outcome scores on the last token
        cases.append(dict(kind="pf_ppo", token_level_scores=scores, reweight_method=method, weight_pow=weight_pow,
                          seed=seed))
    real = run_real_verl(cases, tmp_path)
    for case, got in zip(cases, real):
        torch.manual_seed(case["seed"])  # real verl draws from the global generator, seeded alike
        ours = pf_ppo_indices(case["token_level_scores"].sum(dim=1), method, weight_pow)
        assert torch.equal(ours, got["rows"]), (method, case["seed"])


def _base(tmp_path, extra=()):
    train = write_rows(str(tmp_path / "train.parquet"), "gsm8k")
    return [f"data.train_files={train}", "data.train_batch_size=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "data.max_prompt_length=64", "data.max_response_length=4", "actor_rollout_ref.rollout.n=2",
            "trainer.total_training_steps=1", "trainer.device=cpu", "actor_rollout_ref.model.path=tiny:gpt2",
            "trainer.logger=['console']", *extra]


def test_translation_of_real_verl_keys(tmp_path):
    cfg = load_translated(translate(_base(tmp_path, ["algorithm.adv_estimator=gae", "algorithm.use_pf_ppo=True",
                                                     "algorithm.pf_ppo.reweight_method=max_min"])))
    p = cfg.algorithm.pf_ppo
    assert (p.enable, p.reweight_method, p.weight_pow) == (True, "max_min", 2.0)  # weight_pow: real verl's default
    # real verl's compute_advantage reweights in its gae branch only: with grpo nothing happens there, nor here
    tr = translate(_base(tmp_path, ["algorithm.adv_estimator=grpo", "algorithm.use_pf_ppo=True"]))
    assert "ignored algorithm.use_pf_ppo=True: real verl reweights after GAE only, and adv_estimator is grpo" in tr.notes
    assert load_translated(tr).algorithm.pf_ppo.enable is False
    with pytest.raises(ConfigError, match=r"^real verl's algorithm.pf_ppo.reweight_method=softmax is not supported: no "
                                          r"equivalent here; supported: pow, max_min, max_random"):
        load_translated(translate(_base(tmp_path, ["algorithm.use_pf_ppo=True",
                                                   "algorithm.pf_ppo.reweight_method=softmax"])))


def test_native_key_needs_gae():
    with pytest.raises(ConfigError, match="algorithm.pf_ppo.enable: resamples the batch after GAE's advantages"):
        config_from_dict({"algorithm": {"name": "grpo", "pf_ppo": {"enable": True}}})
    assert config_from_dict({"algorithm": {"name": "ppo", "pf_ppo": {"enable": True}}}).algorithm.pf_ppo.enable


def test_a_step_trains_on_the_resampled_batch(tmp_path, tiny_gpt2):
    out = tmp_path / "out"
    rc = main(_base(tmp_path, ["algorithm.adv_estimator=gae", "algorithm.use_pf_ppo=True", "critic.model.path=" +
                               tiny_gpt2, f"trainer.default_local_dir={out}"])
              + [f"actor_rollout_ref.model.path={tiny_gpt2}"])
    assert rc == 0
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()
               if "pf_ppo/unique_samples" in line][-1]
    assert 1 <= metrics["pf_ppo/unique_samples"] <= 4  # 4 sequences drawn with replacement from 4


def test_the_entropy_metric_is_of_the_pi_old_pass_rows(tmp_path, tiny_gpt2, monkeypatch):
    """actor/entropy is the pi_old pass's entropy over that pass's rows (the batch before the resampling, as
    real verl logs it), not over the resampled batch's masks. The resampling here draws row 0 four times, so
    the two masks differ wherever the rows' lengths do."""
    from conftest import small_overrides

    import verl.trainer.trainer as trainer_mod
    from verl import create_trainer, load_config
    from verl.algorithms.masked import masked_mean

    monkeypatch.setattr(trainer_mod, "pf_ppo_indices", lambda scores, *a: torch.zeros(len(scores), dtype=torch.long))
    cfg = load_config(None, small_overrides(tmp_path, **{
        "model.name": tiny_gpt2, "algorithm.name": "ppo", "algorithm.pf_ppo.enable": "true", "rollout.n": 2,
        "training.batch_size": 2, "rollout.max_new_tokens": 24, "rollout.stop": "[e]",
        "training.old_log_probs_from_update": "false"}))
    trainer = create_trainer(cfg)
    seen = {}
    first_pass = trainer.compute_old_log_probs

    def keep(batch):
        pi_old = first_pass(batch)
        seen.update(entropy=pi_old.entropy.clone(), mask=batch.response_mask.clone())
        return pi_old
    monkeypatch.setattr(trainer, "compute_old_log_probs", keep)
    try:
        metrics = trainer.step()
    finally:
        trainer.close()
    mask = seen["mask"]
    resampled = mask[torch.zeros(len(mask), dtype=torch.long)]
    assert not torch.equal(mask, resampled)  # the rows' lengths differ: the two masks weigh other tokens
    assert metrics["actor/entropy"] == pytest.approx(float(masked_mean(seen["entropy"], mask)), rel=1e-6)
    assert metrics["actor/entropy"] != pytest.approx(float(masked_mean(seen["entropy"], resampled)), rel=1e-6)
