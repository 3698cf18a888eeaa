"""End to end on CPU with tiny models: the loop trains, saves, and is micro-batch invariant."""

import math
import os
import subprocess
import sys

import pytest
import torch

from conftest import capture_first_grads, small_overrides
from verl import create_trainer, load_config


def _params(module):
    return {n: p.detach().clone() for n, p in module.named_parameters() if p.requires_grad}


def _assert_all_changed(before, module, what):
    unchanged = [n for n, p in module.named_parameters() if p.requires_grad and torch.equal(before[n], p.detach())]
    assert not unchanged, f"{what}: parameters that did not change: {unchanged[:5]}"


@pytest.mark.parametrize("arch,algo", [("gpt2", "ppo"), ("qwen2", "grpo")])
def test_short_run_updates_every_parameter(tmp_path, arch, algo, request):
    request.getfixturevalue(f"tiny_{arch}")
    cfg = load_config(None, small_overrides(tmp_path, **{"model.name": f"tiny:{arch}", "algorithm.name": algo}))
    trainer = create_trainer(cfg)
    actor_before = _params(trainer.actor.model)
    critic_before = _params(trainer.critic.model) if trainer.critic else None
    for _ in range(cfg.training.total_steps):
        metrics = trainer.step()
        for key in ("reward", "kl", "entropy", "pg_loss", "response_length", "timing_s/step", "perf/tokens_per_s"):
            assert math.isfinite(metrics[key]), (key, metrics[key])
        if algo == "ppo":
            assert math.isfinite(metrics["vf_loss"])
    _assert_all_changed(actor_before, trainer.actor.model, "actor")
    if critic_before is not None:
        _assert_all_changed(critic_before, trainer.critic.model, "critic")
    else:
        assert algo == "grpo"  # GRPO needs no critic
    # The final actor is a Hugging Face folder that loads as-is, with its metrics log.
    from transformers import AutoModelForCausalLM

    out = cfg.checkpoint.save_dir
    loaded = AutoModelForCausalLM.from_pretrained(out)
    for name, p in loaded.named_parameters():  # a save/load round trip of float32 tensors: bitwise
        assert torch.equal(p, trainer.actor.model.state_dict()[name].float()), name
    assert os.path.exists(os.path.join(out, "metrics.jsonl"))
    # The seed calls .generate on trainer.actor.model.
    ids = trainer.tokenizer("I love", return_tensors="pt")
    assert trainer.actor.model.generate(**ids, max_new_tokens=4, do_sample=True).shape[1] > ids["input_ids"].shape[1]


def _one_step_grads(tmp_path, monkeypatch, micro, tag, extra=None):
    """The actor's and critic's gradients of one step's first optimizer step."""
    captured = capture_first_grads(monkeypatch)
    over = {"training.batch_size": 8, "training.micro_batch_size": micro, "training.total_steps": 1,
            "checkpoint.save_dir": str(tmp_path / tag)}
    over.update(extra or {})
    trainer = create_trainer(load_config(None, small_overrides(tmp_path, **over)))
    trainer.step()
    return captured


def _assert_same_grads(a, b, roles=("actor", "critic")):
    """Two computation paths (other micro-batch shapes: rows trimmed to their own padding, so
    other matmul and attention sizes; float32 gradients summed in another order). Each element
    is off by a few ulps of the terms summed into it, which are bounded by the tensor's largest
    element: observed <= 8e-7 of max|g| (1 and 2 threads, AVX2 and the default ISA), whereas
    per-micro-batch normalisation or a mask bug moves gradients by > 1e-2. atol 1e-5 * max|g|,
    rtol 1e-4."""
    for role in roles:
        assert len(a[role]) == len(b[role]) > 0
        for i, (ga, gb) in enumerate(zip(a[role], b[role])):
            atol = 1e-5 * float(ga.abs().max())
            assert torch.allclose(ga, gb, atol=atol, rtol=1e-4), (role, i, (ga - gb).abs().max())


@pytest.mark.parametrize("extra", [{}, {"algorithm.loss_agg_mode": "seq-mean-token-mean"},
                                   {"critic.share_actor": "true"}])
def test_micro_batch_1x8_equals_8x1(tmp_path, monkeypatch, tiny_gpt2, extra):
    """Gradient accumulation over 8 micro-batches of 1 == one micro-batch of 8."""
    _assert_same_grads(_one_step_grads(tmp_path, monkeypatch, 1, "m1", extra),
                       _one_step_grads(tmp_path, monkeypatch, 8, "m8", extra))


def test_token_budget_micro_batches_equal_fixed(tmp_path, monkeypatch, tiny_gpt2):
    _assert_same_grads(_one_step_grads(tmp_path, monkeypatch, 8, "fixed"),
                       _one_step_grads(tmp_path, monkeypatch, 8, "budget",
                                       {"training.max_tokens_per_micro_batch": 20}))


def test_seed_script_runs_unchanged(tmp_path, tiny_gpt2):
    """examples/train_gpt2.py as the seed wrote it, with a config pointing at a local
    GPT-2-architecture folder and the HF backend."""
    import yaml

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    cfg = yaml.safe_load(open(os.path.join(root, "examples", "config_gpt2.yaml")))
    cfg["model"]["name"] = tiny_gpt2
    cfg["rollout"]["name"] = "hf"
    cfg["training"].update(total_steps=11, batch_size=4)
    cfg["rollout"]["max_new_tokens"] = 6
    cfg["logging"] = {"backends": ["jsonl"], "progress_bar": False}
    (tmp_path / "config_gpt2.yaml").write_text(yaml.safe_dump(cfg))
    script = os.path.join(root, "examples", "train_gpt2.py")
    proc = subprocess.run([sys.executable, script], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Step 0: reward=" in proc.stdout and "Step 10: reward=" in proc.stdout
    out = tmp_path / "outputs" / f"{os.path.basename(tiny_gpt2)}-ppo"
    assert (out / "model.safetensors").exists() and (out / "tokenizer.json").exists()


def _grpo_step(tmp_path, monkeypatch, tag, **extra):
    captured = capture_first_grads(monkeypatch)
    over = {"model.name": "tiny:qwen2", "algorithm.name": "grpo", "training.total_steps": 1,
            "checkpoint.save_dir": str(tmp_path / tag), "rollout.max_new_tokens": 10}
    over.update(extra)
    trainer = create_trainer(load_config(None, small_overrides(tmp_path, **over)))
    return captured, trainer.step()


@pytest.mark.parametrize("extra", [{}, {"training.use_packed_samples": "true"}])
def test_old_log_probs_from_update_change_nothing_but_speed(tmp_path, monkeypatch, tiny_qwen2, extra):
    """One optimizer step per batch: pi_old taken from the update's own first forward (ratio 1)
    gives the same gradients and metrics as the separate no-grad pass, without that pass."""
    g_sep, m_sep = _grpo_step(tmp_path, monkeypatch, "sep", **{"training.old_log_probs_from_update": "false"},
                              **extra)
    g_upd, m_upd = _grpo_step(tmp_path, monkeypatch, "upd", **extra)
    assert "timing_s/old_log_prob" in m_sep and "timing_s/old_log_prob" not in m_upd
    for key in ("reward", "actor/entropy", "actor/kl", "actor/pg_loss", "actor/kl_loss", "actor/grad_norm"):
        assert m_upd[key] == pytest.approx(m_sep[key], rel=1e-4, abs=1e-6), key
    assert m_upd["actor/pg_clipfrac"] == 0.0  # ratio exactly 1 at the first (only) step
    _assert_same_grads(g_sep, g_upd, roles=("actor",))


def test_multi_epoch_keeps_the_separate_old_log_prob_pass(tmp_path, monkeypatch, tiny_qwen2):
    _, m = _grpo_step(tmp_path, monkeypatch, "ep2", **{"training.num_epochs": 2})
    assert "timing_s/old_log_prob" in m


def test_close_ends_the_run_and_lets_the_folder_go(tmp_path):
    """`with create_trainer(...) as t:` closes on leaving the block: the run is done and its folder is free for
    another process (the lock released); a second close does nothing more."""
    cfg = load_config(None, small_overrides(tmp_path, **{"training.total_steps": 1}))
    with create_trainer(cfg) as trainer:
        trainer.step()
    assert trainer.run.done
    trainer.close()
    probe = subprocess.run([sys.executable, "-c", "import sys; from verl.checkpoint.run_lock import hold_run_folder; "
                            "hold_run_folder(sys.argv[1]); print('held')", cfg.checkpoint.save_dir],
                           capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0 and "held" in probe.stdout, probe.stderr[-2000:]
