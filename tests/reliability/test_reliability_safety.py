"""Safety: API secrets come from the environment and never reach logs, configs or
checkpoints; weights are safetensors only; remote code is not run unless asked for."""

import http.server
import json
import os
import shutil
import threading

import torch

from conftest import small_overrides
from verl.cli import main

SECRET = "sk-verl-test-4f1c2b9e8d7a6c5b"


class _Scores(http.server.BaseHTTPRequestHandler):
    seen_auth = []

    def do_POST(self):  # noqa: N802 - http.server naming
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Scores.seen_auth.append(self.headers.get("Authorization"))
        data = json.dumps({"scores": [len(r) / 10.0 for r in body["responses"]]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_api_key_never_written_anywhere(tmp_path, tiny_gpt2, monkeypatch, capsys):
    server = http.server.HTTPServer(("127.0.0.1", 0), _Scores)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("VERL_TEST_REWARD_KEY", SECRET)
    out = tmp_path / "out"
    args = small_overrides(tmp_path, **{"training.total_steps": 1, "training.batch_size": 2,
                                        "rollout.max_new_tokens": 4, "reward_fn.type": "api",
                                        "reward_fn.url": f"http://127.0.0.1:{server.server_port}/score",
                                        "reward_fn.api_key_env": "VERL_TEST_REWARD_KEY",
                                        "logging.backends": "[console,jsonl,tensorboard]",
                                        "checkpoint.save_dir": str(out)})
    try:
        code = main(["train", *args, "--save_full_state"])
    finally:
        server.shutdown()
    captured = capsys.readouterr()
    assert code == 0, captured.err[-2000:]
    assert _Scores.seen_auth and all(a == f"Bearer {SECRET}" for a in _Scores.seen_auth)  # the key was used
    assert SECRET not in captured.out + captured.err
    files = [os.path.join(root, f) for root, _, names in os.walk(out) for f in names]
    assert any(f.endswith("trainer_state.json") for f in files) and any(f.endswith("config.yaml") for f in files)
    for path in files:
        assert SECRET.encode() not in open(path, "rb").read(), path
    assert "VERL_TEST_REWARD_KEY" in (out / "config.yaml").read_text()  # the variable's name, not its value
    # Weights only as safetensors; other state as torch files that load with weights_only=True.
    assert not [f for f in files if f.endswith((".bin", ".pkl", ".pickle"))]
    from verl.checkpoint.durable_files import load_torch

    for path in files:
        if path.endswith(".pt"):
            load_torch(path)


def test_remote_code_not_run_unless_enabled(tmp_path, tiny_gpt2):
    """A model folder that ships its own code (auto_map) does not get it executed when
    model.trust_remote_code is off (the default)."""
    from verl.config import load_config
    from verl.models.loading import load_causal_lm

    folder = tmp_path / "remote_model"
    shutil.copytree(tiny_gpt2, folder)
    marker = tmp_path / "remote_code_ran"
    (folder / "evil_modeling.py").write_text(
        f"open({str(marker)!r}, 'w').write('ran')\n"
        "from transformers import GPT2LMHeadModel\n"
        "class EvilModel(GPT2LMHeadModel):\n    pass\n")
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "evil_modeling.EvilModel"}
    (folder / "config.json").write_text(json.dumps(config))
    cfg = load_config(None, [f"model.name={folder}"])
    assert cfg.model.trust_remote_code is False and cfg.critic.trust_remote_code is False
    try:
        load_causal_lm(cfg.model, torch.float32)
    except Exception:  # noqa: BLE001 - refusing is fine too; running the code is not
        pass
    assert not marker.exists()
    # Control: the folder's code does run once the config turns remote code on.
    cfg = load_config(None, [f"model.name={folder}", "model.trust_remote_code=true"])
    assert type(load_causal_lm(cfg.model, torch.float32)).__name__ == "EvilModel" and marker.exists()
