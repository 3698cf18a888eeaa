"""Exact resume on CPU (HF backend, fixed seeds): 2 steps + resume 2 steps == 4 steps; a
finished run says so; a changed config is refused; logs continue without duplicates;
LoRA adapters are saved and restored."""

import json
import os
import subprocess
import sys

import pytest
import torch

from conftest import small_overrides
from verl import create_trainer, load_config
from verl.config import ConfigError

# PPO with a critic, adaptive KL in the reward, shuffled mini-batches over 2 epochs and a
# decaying LR: every piece of state an exact resume needs is exercised.
PPO = {"training.total_steps": 4, "training.batch_size": 2, "training.micro_batch_size": 1,
       "training.mini_batch_size": 1, "training.num_epochs": 2, "training.lr_scheduler": "linear",
       "rollout.max_new_tokens": 4, "algorithm.use_kl_in_reward": "true", "algorithm.kl_coef": 0.05,
       "algorithm.kl_ctrl.type": "adaptive", "algorithm.kl_ctrl.horizon": 10,
       "checkpoint.save_full_every": 2, "checkpoint.save_actor_every": 1, "checkpoint.keep_last": 5}
DETERMINISTIC = ("reward/", "actor/", "critic/", "response_length/", "training/")


def _config(tmp_path, name, **extra):
    over = dict(PPO)
    over.update(extra)
    over["checkpoint.save_dir"] = str(tmp_path / name)
    return load_config(None, small_overrides(tmp_path, **over))


def _params(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def _rows(run_dir):
    return [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]


def _same_metrics(a, b):
    keys = [k for k in a if k.startswith(DETERMINISTIC)]
    assert keys and all(k in b for k in keys)
    for k in keys:
        assert a[k] == pytest.approx(b[k], rel=1e-5, abs=1e-7), (a["step"], k, a[k], b[k])


@pytest.fixture(scope="module")
def full_run(tmp_path_factory, tiny_gpt2):
    """4 uninterrupted steps; full checkpoints at steps 2 and 4, actor-only at 1 and 3."""
    tmp = tmp_path_factory.mktemp("full")
    trainer = create_trainer(_config(tmp, "a"))
    trainer.train()
    return {"tmp": tmp, "dir": str(tmp / "a"), "actor": _params(trainer.actor.model),
            "critic": _params(trainer.critic.model), "kl": trainer.kl_ctrl.value}


def test_resume_equals_uninterrupted(full_run, tmp_path):
    """Start a new trainer from the step-2 checkpoint (as after a crash) and train to step 4:
    parameters within 1e-6 of the uninterrupted run, and the same metrics per step."""
    ckpt = os.path.join(full_run["dir"], "checkpoints", "step_000002")
    assert json.load(open(os.path.join(ckpt, "trainer_state.json")))["global_step"] == 2
    trainer = create_trainer(_config(tmp_path, "b", **{"checkpoint.resume": ckpt}))
    assert trainer.global_step == 2
    trainer.train()
    assert trainer.global_step == 4
    for role in ("actor", "critic"):
        model = getattr(trainer, role).model
        for name, p in model.named_parameters():
            assert torch.allclose(p, full_run[role][name], atol=1e-6, rtol=0), (role, name)
    assert trainer.kl_ctrl.value == pytest.approx(full_run["kl"], rel=1e-9)
    resumed = {r["step"]: r for r in _rows(tmp_path / "b")}
    assert sorted(resumed) == [3, 4]
    for row in _rows(full_run["dir"])[2:]:
        _same_metrics(row, resumed[row["step"]])


def test_cadence_and_actor_only_checkpoints(full_run):
    """save_full_every=2 and save_actor_every=1: full at 2 and 4, actor-only at 1 and 3; an
    actor checkpoint is a Hugging Face folder (safetensors + tokenizer) that loads as-is."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verl.checkpoint.manager import CheckpointManager, read_manifest

    mgr = CheckpointManager(full_run["dir"])
    kinds = {step: read_manifest(path)["kind"] for step, path in mgr.list()}
    assert kinds == {1: "actor", 2: "full", 3: "actor", 4: "full"}
    actor = os.path.join(mgr.root, "step_000003", "actor")
    files = os.listdir(actor)
    assert "model.safetensors" in files and "tokenizer.json" in files and not any(f.endswith(".bin") for f in files)
    AutoModelForCausalLM.from_pretrained(actor)
    AutoTokenizer.from_pretrained(actor)
    # The final actor (save_mode actor) sits in save_dir itself and equals the trained weights.
    final = AutoModelForCausalLM.from_pretrained(full_run["dir"])
    for name, p in final.named_parameters():
        assert torch.equal(p, full_run["actor"][name]), name


def test_resume_finished_run_trains_nothing(full_run, capsys):
    """`--resume auto` on a finished run loads its final state, says so, trains nothing."""
    before = open(os.path.join(full_run["dir"], "metrics.jsonl")).read()
    trainer = create_trainer(_config(full_run["tmp"], "a", **{"checkpoint.resume": "auto"}))
    assert trainer.global_step == 4 and trainer.train() == {}
    assert "already finished at step 4" in capsys.readouterr().out
    for name, p in trainer.actor.model.named_parameters():
        assert torch.equal(p, full_run["actor"][name]), name
    assert open(os.path.join(full_run["dir"], "metrics.jsonl")).read() == before  # no duplicated steps


def test_cli_resume_finished_run_exits_0(full_run):
    before = open(os.path.join(full_run["dir"], "metrics.jsonl")).read()
    over = dict(PPO, **{"checkpoint.save_dir": full_run["dir"]})
    args = small_overrides(full_run["tmp"], **over)
    proc = subprocess.run([sys.executable, "-m", "verl.cli", "train", *args, "--resume", "auto"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "already finished at step 4" in proc.stdout and "nothing to train" in proc.stdout
    assert open(os.path.join(full_run["dir"], "metrics.jsonl")).read() == before


def test_changed_config_is_refused_unless_forced(full_run):
    ckpt = os.path.join(full_run["dir"], "checkpoints", "step_000002")
    cfg = _config(full_run["tmp"], "c", **{"checkpoint.resume": ckpt, "training.lr": 0.5, "rollout.n": 2,
                                          "training.total_steps": 8})
    from verl.checkpoint.resume import resolve_resume

    with pytest.raises(ConfigError) as err:
        resolve_resume(cfg)
    message = str(err.value)
    assert "training.lr: 0.001 -> 0.5" in message and "rollout.n: 1 -> 2" in message
    assert "total_steps" not in message and "--resume_force" in message
    cfg.checkpoint.resume_force = True
    warnings = []
    point = resolve_resume(cfg, warn=warnings.append)
    assert point.step == 2 and not point.finished and "training.lr" in warnings[0]


def test_resume_rejects_missing_and_actor_only(tmp_path, full_run):
    from verl.checkpoint.manager import CheckpointManager
    from verl.checkpoint.resume import resolve_resume

    cfg = _config(tmp_path, "d", **{"checkpoint.resume": str(tmp_path / "nope")})
    with pytest.raises(ConfigError, match="does not exist"):
        resolve_resume(cfg)
    mgr = CheckpointManager(str(tmp_path / "d"))
    actor_only = mgr.save(3, "actor", lambda folder: open(os.path.join(folder, "x"), "w").close())
    cfg.checkpoint.resume = actor_only
    with pytest.raises(ConfigError, match="full-state"):
        resolve_resume(cfg)
    # auto with nothing to resume from starts fresh, and says so
    cfg = _config(tmp_path, "empty", **{"checkpoint.resume": "auto"})
    point = resolve_resume(cfg)
    assert point.path is None and point.step == 0 and "starting from step 0" in point.note


def test_logs_continue_without_duplicates_and_fresh_start_moves_old_run(tmp_path):
    """Resuming from step 2 drops the rows logged after it. A new run over an earlier one is
    refused unless allowed (--overwrite); then each earlier run moves to its own numbered
    previous_run_N/ and nothing is deleted (a third run keeps the first one's files)."""
    from verl.checkpoint.resume import ResumePoint, prepare_run_dir

    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "x": s}) + "\n" for s in (1, 2, 3))
                                       + '{"step": 4, "x"')  # a line cut short by a crash
    (run / "text.jsonl").write_text(json.dumps({"step": 0, "key": "baseline"}) + "\n")
    prepare_run_dir(str(run), ResumePoint(path=str(run / "checkpoints" / "step_000002"), step=2))
    assert [r["step"] for r in _rows(run)] == [1, 2]
    assert (run / "text.jsonl").read_text().count("baseline") == 1
    notes = []
    with pytest.raises(ConfigError, match="holds an earlier run"):  # resume none, no --overwrite
        prepare_run_dir(str(run), ResumePoint(), warn=notes.append)
    assert [r["step"] for r in _rows(run)] == [1, 2] and not notes
    prepare_run_dir(str(run), ResumePoint(move_earlier=True), warn=notes.append)  # --overwrite
    assert not (run / "metrics.jsonl").exists() and (run / "previous_run_1" / "metrics.jsonl").exists()
    assert "previous_run_1" in notes[0] and "--resume auto" in notes[0] and "nothing deleted" in notes[0]
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "x": 10}) + "\n")  # the second run
    prepare_run_dir(str(run), ResumePoint(move_earlier=True), warn=notes.append)  # a third one
    assert [r["x"] for r in _rows(run / "previous_run_1")] == [1, 2]
    assert [r["x"] for r in _rows(run / "previous_run_2")] == [10]
    assert sorted(os.listdir(run)) == ["previous_run_1", "previous_run_2"]


def test_every_checkpoint_corrupted_is_named_in_the_last_line(tmp_path):
    """--resume auto when no full checkpoint verifies: the one-line error names each corrupted
    file (not "saved no full state"), whether the run had finished (and total_steps was raised)
    or not; the checkpoints are left as they are."""
    from verl.checkpoint.manager import CheckpointManager
    from verl.checkpoint.resume import resolve_resume
    from verl.checkpoint.run_folder import write_run_state

    run = tmp_path / "run"
    mgr = CheckpointManager(str(run), keep_last=5)
    for step in (1, 2):
        def write(folder, step=step):
            with open(os.path.join(folder, "rng.pt"), "wb") as fh:
                fh.write(bytes([step]) * 64)
        path = mgr.save(step, "full", write)
        with open(os.path.join(path, "rng.pt"), "r+b") as fh:
            fh.write(b"\xff")  # same size, different checksum
    for finished in (False, True):
        if finished:
            write_run_state(str(run), finished=True, global_step=2, total_steps=2, save_mode="full")
        cfg = _config(tmp_path, "run", **{"checkpoint.resume": "auto", "training.total_steps": 4})
        warnings = []
        with pytest.raises(ConfigError) as err:
            resolve_resume(cfg, warn=warnings.append)
        message = str(err.value)
        assert "saved no full state" not in message and message.count("'rng.pt'") == 2, message
        assert "step_000001" in message and "step_000002" in message and "sha256" in message
        assert sum("skipping checkpoint" in w for w in warnings) == 2
    assert [step for step, _ in mgr.list()] == [1, 2]


def _peft_gpt2(path):
    import peft
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(path)
    model = peft.get_peft_model(base, peft.LoraConfig(r=4, lora_alpha=8, target_modules=["c_attn"], fan_in_fan_out=True,
                                                      init_lora_weights=False))
    return model


def test_lora_adapters_and_merged_actor(tmp_path, tiny_gpt2):
    """--save_lora writes a PEFT adapter folder; the actor save of a LoRA model is a merged
    plain Hugging Face folder; a full state restores the adapter weights."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verl.checkpoint.model_files import load_module_weights, save_hf_model, save_lora_adapters

    tok = AutoTokenizer.from_pretrained(tiny_gpt2)
    model = _peft_gpt2(tiny_gpt2)
    ids = torch.tensor([[1, 5, 9, 3]])
    with torch.no_grad():
        expected = model(input_ids=ids).logits

    save_lora_adapters(model, tok, str(tmp_path / "lora"))
    files = set(os.listdir(tmp_path / "lora"))
    assert {"adapter_model.safetensors", "adapter_config.json", "tokenizer.json"} <= files
    assert not any(f.endswith((".bin", ".pt")) for f in files)
    reloaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_gpt2), str(tmp_path / "lora"))
    with torch.no_grad():
        assert torch.allclose(reloaded(input_ids=ids).logits, expected, atol=1e-5)

    save_hf_model(model, tok, str(tmp_path / "merged"))
    assert isinstance(model, PeftModel)  # the training model keeps its adapters
    merged = AutoModelForCausalLM.from_pretrained(str(tmp_path / "merged"))
    with torch.no_grad():
        assert torch.allclose(merged(input_ids=ids).logits, expected, atol=1e-4)

    other = _peft_gpt2(tiny_gpt2)
    with torch.no_grad():
        for p in other.parameters():
            if p.requires_grad:
                p.zero_()
    load_module_weights(other, str(tmp_path / "lora"))
    with torch.no_grad():
        assert torch.allclose(other(input_ids=ids).logits, expected, atol=1e-5)


def test_trainer_save_lora_mode(tmp_path, tiny_gpt2):
    """model.lora.rank > 0 with --save_lora: the final save is the adapter folder, and a full
    checkpoint of the LoRA actor resumes with the same adapter weights."""
    import peft  # noqa: F401
    lora = {"model.name": tiny_gpt2, "model.lora.rank": 4, "algorithm.name": "grpo", "rollout.n": 2,
            "training.batch_size": 2, "rollout.max_new_tokens": 4}
    cfg = load_config(None, small_overrides(tmp_path, **lora, **{"training.total_steps": 1,
                                                                 "checkpoint.save_full_every": 1,
                                                                 "checkpoint.save_mode": "lora"}))
    trainer = create_trainer(cfg)
    trainer.train()
    out = cfg.checkpoint.save_dir
    assert os.path.exists(os.path.join(out, "adapter_model.safetensors"))
    assert not os.path.exists(os.path.join(out, "model.safetensors"))
    ckpt = os.path.join(out, "checkpoints", "step_000001")
    assert os.path.exists(os.path.join(ckpt, "actor", "adapter_model.safetensors"))
    trained = {n: p.detach().clone() for n, p in trainer.actor.model.named_parameters() if p.requires_grad}
    assert trained
    cfg2 = load_config(None, small_overrides(tmp_path, **lora, **{"training.total_steps": 2,
                                                                  "checkpoint.save_dir": str(tmp_path / "lora2"),
                                                                  "checkpoint.resume": ckpt}))
    resumed = create_trainer(cfg2)
    assert resumed.global_step == 1
    for n, p in resumed.actor.model.named_parameters():
        if p.requires_grad:
            assert torch.equal(p, trained[n]), n
