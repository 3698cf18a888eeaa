"""Real verl's gdpo and prime reward managers through main_ppo (verl/compat/real_rewards.py): both score as its
naive manager; prime's failed calls score 0 (reward_fn.on_error=zero)."""

import pytest

from tools.real_verl_scripts.harness import write_rows
from verl.compat.translate import load_translated, translate
from verl.config import ConfigError
from verl.rewards.base import RewardError
from verl.rewards.manager import build_reward_manager

# raises on the answer "boom", else 1 if the ground truth is in the response (real verl's signature)
REWARD_FILE = '''def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    if solution_str == "boom":
        raise ValueError("cannot grade")
    return 1.0 if ground_truth in solution_str else 0.0
'''


def _base(tmp_path, extra=()):
    train = write_rows(str(tmp_path / "train.parquet"), "gsm8k")
    (tmp_path / "reward.py").write_text(REWARD_FILE)
    return [f"data.train_files={train}", "data.train_batch_size=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "data.max_prompt_length=64", "data.max_response_length=4", "algorithm.adv_estimator=grpo",
            "actor_rollout_ref.rollout.n=2", "trainer.total_training_steps=1", "trainer.device=cpu",
            "actor_rollout_ref.model.path=tiny:gpt2", f"custom_reward_function.path={tmp_path}/reward.py", *extra]


def _scores(cfg, responses):
    manager = build_reward_manager(cfg.reward_fn, max_response_length=4)
    samples = [{"data_source": "openai/gsm8k", "ground_truth": "7", "extra": {}} for _ in responses]
    return manager(["q"] * len(responses), responses, samples)


@pytest.mark.parametrize("spelling", ["reward_model.reward_manager", "reward.reward_manager.name"])
def test_gdpo_manager_is_the_naive_one(spelling, tmp_path):
    naive = translate(_base(tmp_path, [f"{spelling}=naive"]))
    gdpo = translate(_base(tmp_path, [f"{spelling}=gdpo"]))
    # the same config: real verl's GDPORewardManager.run_single makes the naive manager's call and reads its result
    assert gdpo.values == naive.values
    assert any(n.startswith(f"{spelling}=gdpo: real verl's gdpo reward manager scores as its naive manager")
               for n in gdpo.notes)
    cfg = load_translated(gdpo)
    assert cfg.reward_fn.on_error == "fail"  # as naive: a raising function stops the run
    assert _scores(cfg, ["x 7", "x 8"]) == [1.0, 0.0]
    with pytest.raises(RewardError, match="cannot grade"):
        _scores(cfg, ["x 7", "boom"])


def test_prime_manager_scores_a_failed_call_zero(tmp_path):
    cfg = load_translated(translate(_base(tmp_path, ["reward_model.reward_manager=prime"])))
    assert (cfg.reward_fn.type, cfg.reward_fn.on_error) == ("python", "zero")
    # real verl's prime manager: single_compute_score returns None for a raising call, scored 0.0; the others as naive
    assert _scores(cfg, ["x 7", "boom", "x 8"]) == [1.0, 0.0, 0.0]
    naive = load_translated(translate(_base(tmp_path, ["reward_model.reward_manager=naive"])))
    assert _scores(naive, ["x 7", "x 8"]) == _scores(cfg, ["x 7", "x 8"]) == [1.0, 0.0]


def test_prime_and_gdpo_take_no_reward_kwargs_and_ours_must_agree(tmp_path):
    with pytest.raises(ConfigError, match="real verl's prime reward manager takes no reward_kwargs"):
        translate(_base(tmp_path, ["reward_model.reward_manager=prime", "+reward_model.reward_kwargs.x=1"]))
    with pytest.raises(ConfigError, match="reward_fn.on_error"):  # ours says fail, prime's zero
        load_translated(translate(_base(tmp_path, ["reward_model.reward_manager=prime", "reward_fn.on_error=fail"])))
    with pytest.raises(ConfigError, match="reward_manager=limited is not supported"):
        translate(_base(tmp_path, ["reward_model.reward_manager=limited"]))


# ---------------------------------------------------------------------------- MTP and Prometheus


def test_mtp_training_is_refused_and_prometheus_is_noted(tmp_path):
    M = "actor_rollout_ref.model.mtp"
    with pytest.raises(ConfigError, match=r"^real verl's actor_rollout_ref.model.mtp.enable_train=True is not "
                                          r"supported: training the model's multi-token-prediction \(MTP\) heads"):
        translate(_base(tmp_path, [f"{M}.enable=True", f"{M}.enable_train=True", f"{M}.mtp_loss_scaling_factor=0.1"]))
    tr = translate(_base(tmp_path, [f"{M}.enable=True", f"{M}.enable_rollout=True", f"{M}.num_speculative_tokens=2",
                                    "actor_rollout_ref.rollout.prometheus.enable=True",
                                    "actor_rollout_ref.rollout.prometheus.port=44398"]))
    for key in (f"{M}.enable", f"{M}.enable_rollout", f"{M}.num_speculative_tokens",
                "actor_rollout_ref.rollout.prometheus.enable", "actor_rollout_ref.rollout.prometheus.port"):
        assert any(n.startswith(f"ignored {key}=") for n in tr.notes), key
    assert tr.values == translate(_base(tmp_path)).values  # nothing of ours changes
