"""Secrets stay secret: an API reward server that echoes the request's Authorization header (in an
error body, in the HTTP reason phrase, in a malformed 200 body) does not get the key printed,
logged or written anywhere -- the key is redacted to "***" in exception messages, the CLI's error
line, warnings, log records and every tracker backend (docs/reliability.md, "Secrets")."""

import json
import logging
import os
import subprocess
import sys
import threading
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch

import verl.rewards.api as api_mod
from conftest import small_overrides
from verl.batch import Batch
from verl.cli import main
from verl.config import RewardFnConfig
from verl.redact import redact, register_secret
from verl.rewards import RewardError, build_reward_manager

SECRET = "sk-echo-test-9d8c7b6a5f4e3d2c1b0a"
ENV = "VERL_TEST_ECHO_KEY"


class Echo(BaseHTTPRequestHandler):
    """/500: error body and reason phrase repeat the Authorization header; /200: a malformed
    body that repeats it (JSON-escaped and URL-quoted too)."""

    def log_message(self, *args):
        pass

    def do_POST(self):  # noqa: N802 - http.server naming
        self.rfile.read(int(self.headers["Content-Length"]))
        auth = self.headers.get("Authorization", "")
        if self.path == "/500":
            body = f"upstream rejected request with headers {{'Authorization': '{auth}'}}".encode()
            self.send_response(500, f"bad key {auth}")
        else:
            body = (json.dumps({"error": f"unauthorized: {auth}"}) + f" quoted={auth.replace(' ', '%20')}").encode()
            self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def echo_server(monkeypatch):
    monkeypatch.setattr(api_mod, "BACKOFF_S", 0.01)
    monkeypatch.setenv(ENV, SECRET)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def batch(n=2):
    return Batch(prompt_text=[f"p{i}" for i in range(n)], response_text=[f"r{i}" for i in range(n)],
                 response_mask=torch.ones(n, 2))


def test_redact_hides_every_spelling_in_text_logs_and_warnings(caplog):
    key = "sk-unit/test+key 42"  # characters that JSON-escape and URL-quote differently
    register_secret(key)
    assert redact(f"a {key} b") == "a *** b"
    assert redact(json.dumps({"k": f"Bearer {key}"})) == '{"k": "Bearer ***"}'
    assert redact("x=sk-unit%2Ftest%2Bkey%2042 y=sk-unit%2Ftest%2Bkey+42") == "x=*** y=***"
    caplog.set_level(logging.INFO)
    logging.getLogger("some.library").info("sent header Bearer %s", key)  # a third-party logger too
    assert key not in caplog.text and "sent header Bearer ***" in caplog.text
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        text = warnings.formatwarning(f"token {key} rejected", UserWarning, "f.py", 1)
    assert key not in text and "token *** rejected" in text


def test_api_errors_never_carry_the_key(echo_server, caplog):
    caplog.set_level(logging.DEBUG)
    # on_error fail: the RewardError (what the CLI prints) shows the server's body, key redacted
    for path in ("/500", "/200"):
        cfg = RewardFnConfig(type="api", url=echo_server + path, api_key_env=ENV, max_retries=1)
        with pytest.raises(RewardError) as info:
            build_reward_manager(cfg).score(batch())
        message = str(info.value)
        assert SECRET not in message and "***" in message, message
        assert ("HTTP 500" in message and "upstream rejected" in message) if path == "/500" else "malformed" in message
    # on_error zero: the retry warnings and the zeroed-samples warning are logged, key redacted
    cfg = RewardFnConfig(type="api", url=echo_server + "/500", api_key_env=ENV, max_retries=1, on_error="zero")
    scores, metrics = build_reward_manager(cfg).score(batch())
    assert metrics["reward/errors"] == 2.0 and scores.tolist() == [0.0, 0.0]
    assert "retry 1/1" in caplog.text and "scored 0 under on_error=zero" in caplog.text
    assert SECRET not in caplog.text and "***" in caplog.text


def test_cli_run_against_echoing_server_prints_and_writes_no_key(echo_server, tmp_path, tiny_gpt2, capsys):
    """A real run (on_error zero, so it trains through the failing server): stdout, stderr and every
    file under save_dir are free of the key, while the failures were reported (redacted)."""
    out = tmp_path / "out"
    args = small_overrides(tmp_path, **{
        "training.total_steps": 1, "training.batch_size": 2, "rollout.max_new_tokens": 4,
        "reward_fn.type": "api", "reward_fn.url": echo_server + "/500", "reward_fn.api_key_env": ENV,
        "reward_fn.max_retries": 1, "reward_fn.on_error": "zero",
        "logging.backends": "[console,jsonl,tensorboard]", "checkpoint.save_dir": str(out)})
    proc = subprocess.run([sys.executable, "-m", "verl.cli", "train", *args, "--save_full_state"],
                          capture_output=True, text=True, timeout=300, env={**os.environ, ENV: SECRET})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "HTTP 500" in proc.stderr and "***" in proc.stderr  # the warnings were printed (lastResort handler)
    assert SECRET not in proc.stdout + proc.stderr
    files = [os.path.join(root, f) for root, _, names in os.walk(out) for f in names]
    assert any(f.endswith("metrics.jsonl") for f in files) and any("tfevents" in f for f in files)
    for path in files:
        assert SECRET.encode() not in open(path, "rb").read(), path
    # on_error fail (in this process: the key is in its environment too): the CLI's one-line error
    # names the server's answer, not the key
    args = [a for a in args if not a.startswith(("reward_fn.on_error", "checkpoint.save_dir"))]
    code = main(["train", *args, f"checkpoint.save_dir={tmp_path / 'o2'}"])
    captured = capsys.readouterr()
    assert code == 2, captured.err[-3000:]
    last = captured.err.strip().splitlines()[-1]
    assert last.startswith("error: reward api") and "HTTP 500" in last and "***" in last
    assert SECRET not in captured.out + captured.err


def test_a_secret_given_as_an_env_key_is_refused_without_showing_it(tmp_path, tiny_gpt2, capsys):
    """`reward_fn.api_key_env` names a variable; a value that cannot be one (here a key pasted in by
    mistake) is refused in one line naming the key, exit 2, and the value is never printed."""
    pasted = "sk-live-1234-abcd-pasted"
    args = small_overrides(tmp_path, **{"reward_fn.type": "api", "reward_fn.url": "http://127.0.0.1:9/score",
                                        "reward_fn.api_key_env": pasted})
    code = main(["train", *args])
    captured = capsys.readouterr()
    assert code == 2
    last = captured.err.strip().splitlines()[-1]
    assert last.startswith("error: reward_fn.api_key_env: expects the NAME of an environment variable"), last
    assert pasted not in captured.out + captured.err
    assert not (tmp_path / "out" / "config.yaml").exists()


def test_a_password_in_the_url_is_sent_as_basic_auth_and_never_shown(echo_server, tmp_path, tiny_gpt2):
    """`reward_fn.url=http://user:KEY@host/...`: the request goes to the host with the credentials as
    HTTP Basic (the echoing server repeats that header), and neither the password nor the header's
    token appears in the console, config.yaml, run_info.json or any other file of the run."""
    import base64

    password = "urlkey-5e4d3c2b1a"
    token = base64.b64encode(f"user:{password}".encode()).decode()
    url = echo_server.replace("http://", f"http://user:{password}@") + "/500"
    out = tmp_path / "out"
    args = small_overrides(tmp_path, **{
        "training.total_steps": 1, "training.batch_size": 2, "rollout.max_new_tokens": 4,
        "reward_fn.type": "api", "reward_fn.url": url, "reward_fn.max_retries": 0, "reward_fn.on_error": "zero",
        "checkpoint.save_dir": str(out)})
    env = {k: v for k, v in os.environ.items() if k != ENV}
    proc = subprocess.run([sys.executable, "-m", "verl.cli", "train", *args, "--save_full_state"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "HTTP 500" in proc.stderr and "Basic ***" in proc.stderr  # the server saw the credentials
    assert password not in proc.stdout + proc.stderr and token not in proc.stdout + proc.stderr
    assert "user:***@127.0.0.1" in (out / "config.yaml").read_text()
    files = [os.path.join(root, f) for root, _, names in os.walk(out) for f in names]
    assert any(f.endswith("run_info.json") for f in files)
    for path in files:
        data = open(path, "rb").read()
        assert password.encode() not in data and token.encode() not in data, path


def test_url_userinfo_is_hidden_without_registering_it():
    # What redact does to any text: the userinfo's password (or a lone token) becomes ***; other @ stay.
    assert redact("POST http://user:K3y@h:8/s failed") == "POST http://user:***@h:8/s failed"
    assert redact("https://tok@h/x and a@b.c") == "https://***@h/x and a@b.c"
    assert redact("http://h/path@x") == "http://h/path@x"
