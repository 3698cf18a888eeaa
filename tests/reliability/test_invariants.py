"""Runtime invariants (verl/trainer/invariants.py): a run whose first mini-batch is not on-policy, or
whose engine's log-probs drift from the actor's, stops in one line naming the cause."""

from types import SimpleNamespace

import pytest

from conftest import small_overrides
from verl.trainer.invariants import InvariantBroken, InvariantChecker


def config(check=True, staleness=0, enable=False, bypass=False):
    training = SimpleNamespace(check_invariants=check, on_policy_tol=0.05, logprob_diff_warn=0.1,
                               logprob_diff_stop=1.0)
    algorithm = SimpleNamespace(rollout_correction=SimpleNamespace(bypass_mode=bypass))
    return SimpleNamespace(training=training, algorithm=algorithm,
                           async_training=SimpleNamespace(enable=enable, max_staleness=staleness, partial_rollout=False))


def test_bypass_mode_checks_the_first_minibatch_as_the_engine_gap():
    # pi_old is the engine's: the first mini-batch's log-ratio is the engine-vs-actor gap, not an on-policy check
    said = []
    checker = InvariantChecker(config(bypass=True), said.append)
    checker.after_step(1, {"actor/first_minibatch_log_ratio_abs": 0.06})  # bf16 engine: no stop
    checker.after_step(2, {"actor/first_minibatch_log_ratio_abs": 0.3})  # above logprob_diff_warn: a warning
    assert len(said) == 1 and "above training.logprob_diff_warn" in said[0]
    with pytest.raises(InvariantBroken, match=r"^step 3: the engine's log-probs differ from the actor's by 2"):
        checker.after_step(3, {"actor/first_minibatch_log_ratio_abs": 2.0})


def test_on_policy_first_minibatch():
    said = []
    checker = InvariantChecker(config(), said.append)
    checker.after_step(1, {"actor/first_minibatch_log_ratio_abs": 5e-8})  # rounding: fine
    checker.after_step(2, {"actor/first_minibatch_log_ratio_abs": 0.05})  # at the tolerance: fine
    with pytest.raises(InvariantBroken, match=r"^step 3: the update's first mini-batch is not on-policy: "
                                              r"mean \|log pi - log pi_old\| = 0.06 "):
        checker.after_step(3, {"actor/first_minibatch_log_ratio_abs": 0.06})
    InvariantChecker(config(check=False)).after_step(4, {"actor/first_minibatch_log_ratio_abs": 5.0})  # off
    assert said == []


def test_engine_difference_warns_then_stops():
    said = []
    checker = InvariantChecker(config(), said.append)
    checker.after_step(1, {"rollout/logprob_diff": 0.03})  # bf16 on a GPU: fine
    checker.after_step(2, {"rollout/logprob_diff": 0.2})   # warning 1
    checker.after_step(3, {})                              # no engine log-probs this step: not a check
    checker.after_step(4, {"rollout/logprob_diff": 0.05})  # back under: the streak restarts
    checker.after_step(5, {"rollout/logprob_diff": 0.2})   # warning 1
    checker.after_step(6, {"rollout/logprob_diff": 0.3})   # warning 2
    assert len(said) == 3 and all("above training.logprob_diff_warn 0.1" in s for s in said)
    assert "weight sync" in said[0] and "chat template" in said[0]
    with pytest.raises(InvariantBroken, match="on 3 checks in a row"):
        checker.after_step(7, {"rollout/logprob_diff": 0.2})
    with pytest.raises(InvariantBroken, match="above training.logprob_diff_stop 1"):
        InvariantChecker(config(), said.append).after_step(1, {"rollout/logprob_diff": 1.5})
    # sampling with older weights by design: the difference is the policy's change, not checked
    InvariantChecker(config(enable=True, staleness=1)).after_step(1, {"rollout/logprob_diff": 5.0})


def test_a_broken_log_prob_path_stops_the_run(tmp_path, tiny_gpt2, monkeypatch, capsys):
    """pi_old computed by a forward that differs from the update's (here: shifted by 0.2 nats, as a
    wrong attention mask or a kernel mismatch would): step 1 stops with one line, exit 1, and the
    step is not saved."""
    import verl.workers.actor as actor_mod
    from verl.cli import main

    real = actor_mod.Actor.compute_log_probs

    def shifted(self, batch):
        logp, entropy = real(self, batch)
        return logp + 0.2, entropy

    monkeypatch.setattr(actor_mod.Actor, "compute_log_probs", shifted)
    save = tmp_path / "run"
    code = main(["train", *small_overrides(tmp_path, **{"training.old_log_probs_from_update": "false",
                                                        "checkpoint.save_full_every": 1,
                                                        "checkpoint.save_dir": str(save)})])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1, err[-3:]
    assert err[-1].startswith("error: step 1: the update's first mini-batch is not on-policy"), err[-1]
    assert not (save / "checkpoints").exists() or not any((save / "checkpoints").glob("step_*"))


def _lora_copy_run(tmp_path, **extra):
    from verl import create_trainer, load_config

    return create_trainer(load_config(None, small_overrides(tmp_path, **{
        "rollout.hf_weight_copy": "true", "model.lora.rank": 4, "training.total_steps": 2, **extra})))


def test_a_lora_sync_is_read_back_and_verified(tmp_path, tiny_gpt2):
    """The engine's copy of the first and last layer's weights equals the actor's merged W + B A after
    the first sync (fp32 on the CPU: every element), and is checked again every verify_sync_every steps."""
    trainer = _lora_copy_run(tmp_path, **{"rollout.verify_sync_every": 2})
    first, second = trainer.step(), trainer.step()
    # tiny GPT-2: 2 layers x (c_attn 64x192 + c_proj 64x64 + c_fc 64x256 + mlp.c_proj 256x64) = 2 x 49,152
    assert first["rollout/sync_verified_elements"] == 98304
    assert second["rollout/sync_verified_elements"] == 98304  # step 2 of every 2


def test_a_lora_that_never_reaches_the_engine_stops_the_run(tmp_path, tiny_gpt2, monkeypatch):
    """A sync that sends the base weights without the LoRA deltas (the bug that made users chase the
    wrong cause for weeks): the read-back differs on most elements of the adapted layers; step 1 stops."""
    import verl.rollout.hf_rollout as hf_mod
    from verl.models.lora import base_model

    def unmerged(model, skip=None, checkpoint_layout=True):  # the base weights, as if the merge were forgotten
        for name, tensor in base_model(model).state_dict().items():
            if ".lora_" not in name:
                yield name.replace(".base_layer.", "."), tensor.detach()

    monkeypatch.setattr(hf_mod, "hf_named_weights", unmerged)
    trainer = _lora_copy_run(tmp_path)
    with pytest.raises(InvariantBroken, match=r"^step 1: after the weight sync, \d+ of 98304 compared weight "
                                              r"elements differ between the engine and the actor"):
        trainer.step()
