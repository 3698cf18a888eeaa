"""`api` reward against a local HTTP server: chunking, auth, timeouts, retries, errors."""

import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch

import verl.rewards.api as api_mod
from verl.batch import Batch
from verl.config import ConfigError, RewardFnConfig
from verl.rewards import RewardError, build_reward_manager

SECRET = "sk-test-very-secret-0123456789"


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # keep test output quiet
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        state = self.server.state
        with state["lock"]:
            state["requests"].append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
            count = sum(1 for r in state["requests"] if r["path"] == self.path)
        if self.path == "/slow" and count == 1:
            time.sleep(1.0)  # longer than the client's timeout; the retry is fast
        if self.path == "/error" or (self.path == "/partial" and any("bad" in r for r in body["responses"])):
            self.send_response(500)
            self.end_headers()
            self.wfile.write(b"internal error")
            return
        if self.path == "/drop_always" or (self.path == "/drop_once" and count == 1):
            self.close_connection = True  # hang up without any response
            return
        if self.path == "/malformed":
            payload = b"<html>not json</html>"
        else:
            payload = json.dumps({"scores": [float(len(r)) for r in body["responses"]]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@pytest.fixture
def server(monkeypatch):
    monkeypatch.setattr(api_mod, "BACKOFF_S", 0.01)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    httpd.handle_error = lambda request, address: None  # the slow reply hits a closed socket
    httpd.state = {"lock": threading.Lock(), "requests": []}
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def url(server, path):
    return f"http://127.0.0.1:{server.server_address[1]}{path}"


def batch(responses):
    n = len(responses)
    return Batch(prompt_text=[f"prompt {i}" for i in range(n)], response_text=responses,
                 ground_truth=[str(i) for i in range(n)], extra=[{"id": i} for i in range(n)],
                 response_mask=torch.ones(n, 3))


def test_chunks_schema_and_bearer_token(server, monkeypatch):
    monkeypatch.setenv("VERL_TEST_RM_KEY", SECRET)
    cfg = RewardFnConfig(type="api", url=url(server, "/ok"), rm_batch_size=2, concurrency=3,
                         api_key_env="VERL_TEST_RM_KEY")
    responses = ["a", "bb", "ccc", "dddd", "eeeee"]
    scores, metrics = build_reward_manager(cfg).score(batch(responses))
    assert scores.tolist() == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert metrics["reward/api"] == 3.0 and metrics["reward/errors"] == 0.0
    reqs = server.state["requests"]
    assert len(reqs) == 3 and all(r["auth"] == f"Bearer {SECRET}" for r in reqs)
    first = next(r["body"] for r in reqs if r["body"]["responses"][0] == "a")
    assert first["prompts"] == ["prompt 0", "prompt 1"] and first["responses"] == ["a", "bb"]
    assert first["samples"][1] == {"ground_truth": "1", "data_source": None, "extra": {"id": 1},
                                   "response_length": 3, "max_response_length": 3, "truncated": False}


def test_missing_key_env_is_an_error(monkeypatch):
    monkeypatch.delenv("VERL_TEST_UNSET_KEY", raising=False)
    with pytest.raises(ConfigError, match="VERL_TEST_UNSET_KEY"):
        build_reward_manager(RewardFnConfig(type="api", url="http://127.0.0.1:9/x", api_key_env="VERL_TEST_UNSET_KEY"))


def test_slow_endpoint_times_out_then_retry_succeeds(server):
    cfg = RewardFnConfig(type="api", url=url(server, "/slow"), timeout_s=0.3, max_retries=2)
    start = time.time()
    scores, metrics = build_reward_manager(cfg).score(batch(["ab", "c"]))
    assert scores.tolist() == [2.0, 1.0] and metrics["reward/errors"] == 0.0
    assert len(server.state["requests"]) == 2 and time.time() - start < 3


def test_slow_endpoint_without_retries_fails(server):
    cfg = RewardFnConfig(type="api", url=url(server, "/slow"), timeout_s=0.3, max_retries=0)
    with pytest.raises(RewardError, match="timed out"):
        build_reward_manager(cfg).score(batch(["ab"]))


def test_server_error_fail_vs_zero(server, monkeypatch, caplog, capsys):
    monkeypatch.setenv("VERL_TEST_RM_KEY", SECRET)
    common = dict(type="api", url=url(server, "/error"), max_retries=2, api_key_env="VERL_TEST_RM_KEY")
    caplog.set_level(logging.DEBUG)
    with pytest.raises(RewardError) as info:
        build_reward_manager(RewardFnConfig(**common)).score(batch(["x", "y"]))
    message = str(info.value)
    assert "HTTP 500" in message and "/error" in message and "after 3 attempts" in message
    assert "prompt 0" in message and SECRET not in message
    assert len(server.state["requests"]) == 3  # 1 + max_retries

    scores, metrics = build_reward_manager(RewardFnConfig(on_error="zero", **common)).score(batch(["x", "y"]))
    assert scores.tolist() == [0.0, 0.0] and metrics["reward/errors"] == 2.0
    out = capsys.readouterr()
    logged = caplog.text + out.out + out.err
    assert "HTTP 500" in logged and SECRET not in logged


def test_zero_policy_is_per_chunk(server):
    cfg = RewardFnConfig(type="api", url=url(server, "/partial"), rm_batch_size=2, max_retries=0, on_error="zero")
    scores, metrics = build_reward_manager(cfg).score(batch(["aa", "bbb", "bad", "c"]))
    assert scores.tolist() == [2.0, 3.0, 0.0, 0.0] and metrics["reward/errors"] == 2.0


def test_dropped_connection_is_retried(server):
    cfg = RewardFnConfig(type="api", url=url(server, "/drop_once"), max_retries=1)
    scores, _ = build_reward_manager(cfg).score(batch(["abc"]))
    assert scores.tolist() == [3.0]
    cfg = RewardFnConfig(type="api", url=url(server, "/drop_always"), max_retries=1, on_error="zero")
    scores, metrics = build_reward_manager(cfg).score(batch(["abc"]))
    assert scores.tolist() == [0.0] and metrics["reward/errors"] == 1.0
    with pytest.raises(RewardError, match="drop_always"):
        build_reward_manager(RewardFnConfig(type="api", url=url(server, "/drop_always"), max_retries=0)).score(
            batch(["abc"]))


def test_malformed_response_not_retried(server):
    cfg = RewardFnConfig(type="api", url=url(server, "/malformed"), max_retries=3)
    with pytest.raises(RewardError, match="malformed response"):
        build_reward_manager(cfg).score(batch(["abc"]))
    assert len(server.state["requests"]) == 1
