"""Numerical guards: a NaN/Inf step is skipped, warned about and counted; K bad steps in a
row stop training (exit 1) with the likely causes and the state saved; out-of-memory is
turned into a list of memory knobs."""

import json
import os

import torch

from conftest import small_overrides
from verl import create_trainer, load_config
from verl.cli import OOM_HINT, main


def test_nan_step_is_skipped_counted_and_training_continues(tmp_path, tiny_gpt2, monkeypatch, capsys):
    import verl.workers.actor as actor_mod

    real = actor_mod.compute_policy_loss
    poison = {"on": False}

    def maybe_nan(*args, **kwargs):
        loss, metrics = real(*args, **kwargs)
        return (loss * float("nan"), metrics) if poison["on"] else (loss, metrics)

    monkeypatch.setattr(actor_mod, "compute_policy_loss", maybe_nan)
    cfg = load_config(None, small_overrides(tmp_path, **{"training.total_steps": 3, "training.batch_size": 2,
                                                         "rollout.max_new_tokens": 4, "algorithm.name": "grpo",
                                                         "rollout.n": 2}))
    trainer = create_trainer(cfg)
    trainer.step()
    after_first = {n: p.detach().clone() for n, p in trainer.actor.model.named_parameters()}
    poison["on"] = True
    bad = trainer.step()
    poison["on"] = False
    assert bad["actor/nonfinite_updates"] > 0 and bad["training/skipped_steps"] == 1
    assert "step 2: non-finite loss or gradient norm; update skipped" in capsys.readouterr().out
    for n, p in trainer.actor.model.named_parameters():
        assert torch.equal(p, after_first[n]), n  # the poisoned update was dropped
    last = trainer.step()  # a good step resets the streak; training goes on
    assert last["training/skipped_steps"] == 1 and last["actor/nonfinite_updates"] == 0
    assert trainer.run.bad_steps == 0
    rows = [json.loads(line) for line in open(os.path.join(cfg.checkpoint.save_dir, "metrics.jsonl"))]
    assert [r["training/skipped_steps"] for r in rows] == [0, 1, 1]
    assert all("actor/nonfinite_updates" in r for r in rows)


def test_k_bad_steps_stop_with_causes_exit_1(tmp_path, tiny_gpt2, capsys):
    """A python reward returning huge values overflows the losses: after
    training.max_bad_steps bad steps in a row the CLI stops with exit 1 and one line naming
    the likely causes; the full state at the stop is saved and earlier checkpoints kept."""
    reward = tmp_path / "huge.py"
    reward.write_text("def score(prompts, responses, samples):\n"
                      "    return [1e38 * (i + 1) for i in range(len(responses))]\n")
    out = tmp_path / "out"
    args = small_overrides(tmp_path, **{"training.total_steps": 8, "training.batch_size": 2,
                                        "rollout.max_new_tokens": 4, "training.max_bad_steps": 2,
                                        "reward_fn.type": "python", "reward_fn.function": f"{reward}:score",
                                        "checkpoint.save_dir": str(out), "checkpoint.keep_last": 1})
    code = main(["train", *args])
    captured = capsys.readouterr()
    assert code == 1
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "2 steps in a row" in lines[0] and "NaN/Inf" in lines[0]
    for cause in ("training.lr", "model.dtype", "reward_fn", "training.grad_clip"):
        assert cause in lines[0]
    assert "Traceback" not in captured.err
    rows = [json.loads(line) for line in open(out / "metrics.jsonl")]
    assert [r["training/skipped_steps"] for r in rows] == [1, 2]
    saved = out / "checkpoints" / "step_000002"
    assert str(saved) in lines[0]
    assert json.loads((saved / "trainer_state.json").read_text())["reason"] == "diverged"
    for p in load_safetensors(saved / "actor"):
        assert torch.isfinite(p).all()  # the bad updates were dropped


def load_safetensors(folder):
    from safetensors.torch import load_file

    return list(load_file(str(folder / "model.safetensors")).values())


def test_out_of_memory_becomes_knob_list(monkeypatch, capsys, tmp_path):
    import verl.trainer as trainer_pkg

    class Boom:
        output_dir = str(tmp_path)

        def train(self):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")

    monkeypatch.setattr(trainer_pkg, "create_trainer", lambda config, resume_point: Boom())
    code = main(["train", f"checkpoint.save_dir={tmp_path}/o"])
    err = capsys.readouterr().err
    assert code == 1
    assert err.strip().splitlines() == [f"error: {OOM_HINT}"]
    for knob in ("training.micro_batch_size", "model.enable_gradient_checkpointing", "rollout.gpu_memory_utilization",
                 "training.offload_optimizer"):
        assert knob in err


def test_a_finite_update_that_overflows_the_weights_is_one_line_exit_2(tmp_path, tiny_gpt2, capsys):
    """training.lr=1e308: gradients are finite, but AdamW's first step (about lr x sign(g)) takes
    weights to inf; lr=1e30 keeps them finite (~1e30) but the next rollout's logits overflow.
    Either way one line naming training.lr, exit 2, and no checkpoint of the broken weights."""
    for lr in ("1e308", "1e30"):
        save = tmp_path / f"lr{lr}"
        code = main(["train", *small_overrides(tmp_path, **{
            "training.lr": lr, "algorithm.name": "grpo", "rollout.n": 2, "training.batch_size": 2,
            "training.total_steps": 3, "rollout.max_new_tokens": 4, "checkpoint.save_dir": str(save)}),
            "--save_full_state"])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2, (lr, err[-3:])
        assert err[-1].startswith("error: training.lr: "), (lr, err[-1])
        assert "NaN/Inf" in err[-1]
        assert not (save / "checkpoints").exists() or not os.listdir(save / "checkpoints")


def test_weight_check_names_the_role_and_passes_large_finite_weights():
    from verl.workers.optim import NonFiniteWeights, check_weights_finite

    w = torch.nn.Parameter(torch.full((4,), 1e30))  # finite; its 2-norm squared (1e60) overflows fp32
    opt = torch.optim.SGD([w], lr=0.5)
    check_weights_finite({"actor": (opt, [w])}, {"actor": 1.0})  # no error: every weight is finite
    with torch.no_grad():
        w[2] = float("inf")
    try:
        check_weights_finite({"critic": (opt, [w])}, {"critic": 1.0})
    except NonFiniteWeights as exc:
        assert str(exc).startswith("training.critic_lr") and "lr 0.5" in str(exc)
    else:
        raise AssertionError("inf weights passed the check")
