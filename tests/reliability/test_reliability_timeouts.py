"""Nothing hangs: a reward call has a time limit (reward_fn.timeout_s) with the on_error policy of an
exception, and SIGINT/SIGTERM take effect within checkpoint.stop_grace_s in every phase -- a hung
reward function, the validation before step 1, model loading, a main thread stuck in a C call --
saving what can be saved (docs/reliability.md, "Timeouts and stops")."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch

from conftest import small_overrides
from verl.batch import Batch
from verl.cli import main
from verl.config import RewardFnConfig
from verl.rewards import RewardError, build_reward_manager

HANGING_REWARDS = textwrap.dedent("""
    import os, threading, time

    def hang(prompts, responses, samples):
        time.sleep(60)  # far beyond any limit of the tests
        return [1.0] * len(responses)

    def batch_raises_then_each_hangs(prompts, responses, samples):
        if len(responses) > 1:
            raise ValueError("batch call fails: the manager retries per sample")
        time.sleep(60)
        return [1.0]

    def where_am_i(prompts, responses, samples):
        return [1.0 if threading.current_thread() is threading.main_thread() else 0.0] * len(responses)
""")


@pytest.fixture
def rewards_file(tmp_path):
    path = tmp_path / "hanging_rewards.py"
    path.write_text(HANGING_REWARDS)
    return path


def batch(n=3):
    return Batch(prompt_text=[f"p{i}" for i in range(n)], response_text=[f"answer {i}" for i in range(n)],
                 response_mask=torch.ones(n, 2))


def test_hung_python_reward_fails_after_timeout_naming_function_and_limit(rewards_file):
    cfg = RewardFnConfig(type="python", function=f"{rewards_file}:hang", timeout_s=0.5)
    start = time.monotonic()
    with pytest.raises(RewardError) as info:
        build_reward_manager(cfg).score(batch())
    elapsed = time.monotonic() - start
    message = str(info.value)
    # the limit, not the function's 60 s (the upper bound leaves room for a loaded 2-core machine)
    assert 0.5 <= elapsed < 15.0, elapsed
    assert "hanging_rewards.py:hang" in message and "reward_fn.timeout_s=0.5s" in message
    assert "background thread" in message and "on_error: zero" in message


def test_timeout_with_on_error_zero_scores_zero_and_counts_every_sample(rewards_file):
    # combined: the hung component scores 0 for the whole batch, the other one still counts
    cfg = RewardFnConfig(type="combined", on_error="zero", timeout_s=0.5, components=[
        RewardFnConfig(type="python", function=f"{rewards_file}:hang"),
        RewardFnConfig(type="string_match", target="answer 1")])
    start = time.monotonic()
    scores, metrics = build_reward_manager(cfg).score(batch(3))
    assert time.monotonic() - start < 15.0  # one 0.5 s limit, not the hung function's 60 s
    assert metrics["reward/errors"] == 3.0 and metrics["reward/python"] == 0.0
    alone, _ = build_reward_manager(RewardFnConfig(type="string_match", target="answer 1")).score(batch(3))
    assert torch.equal(scores, alone)  # the same per-sample code path: exactly the string_match scores
    assert scores[1] == 1.0 and scores[0] < 1.0


def test_one_budget_covers_the_per_sample_retries(rewards_file):
    """The batch call raises, so the manager calls again per sample; every one of those would hang:
    the whole component still takes one timeout_s, not one per sample."""
    cfg = RewardFnConfig(type="python", function=f"{rewards_file}:batch_raises_then_each_hangs", timeout_s=1.0,
                         on_error="zero")
    start = time.monotonic()
    scores, metrics = build_reward_manager(cfg).score(batch(12))
    assert time.monotonic() - start < 6.0  # one 1 s budget; 12 samples x 1 s would be 12 s
    assert metrics["reward/errors"] == 12.0 and scores.tolist() == [0.0] * 12


def test_timeout_zero_calls_the_function_in_the_calling_thread(rewards_file):
    cfg = RewardFnConfig(type="python", function=f"{rewards_file}:where_am_i", timeout_s=0)
    scores, _ = build_reward_manager(cfg).score(batch(2))
    assert scores.tolist() == [1.0, 1.0]  # main thread: signal-based checkers work there
    cfg = RewardFnConfig(type="python", function=f"{rewards_file}:where_am_i")  # default: 300 s in a worker
    scores, _ = build_reward_manager(cfg).score(batch(2))
    assert scores.tolist() == [0.0, 0.0]


class Trickle(BaseHTTPRequestHandler):
    """Answers 200 and then one byte every 0.1 s: each read returns well within the socket timeout."""

    def log_message(self, *args):
        pass

    def do_POST(self):  # noqa: N802 - http.server naming
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "1000")
        self.end_headers()
        try:
            for _ in range(300):
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(0.1)
        except OSError:
            pass  # the client gave up


def test_api_call_is_bounded_even_when_the_server_trickles():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Trickle)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        # worst case of one call: 1 round x (max_retries + 1 = 1 attempt) x 2 x timeout_s = 0.6 s
        cfg = RewardFnConfig(type="api", url=f"http://127.0.0.1:{server.server_port}/score", timeout_s=0.3,
                             max_retries=0)
        start = time.monotonic()
        with pytest.raises(RewardError) as info:
            build_reward_manager(cfg).score(batch(2))
        assert time.monotonic() - start < 10.0  # the 0.6 s worst case; the trickle would take 30 s
        assert "worst case" in str(info.value) and "0.6s" in str(info.value)
    finally:
        server.shutdown()
        server.server_close()


def test_stop_request_ends_the_run_before_the_next_model_load(tiny_gpt2):
    from verl.models.loading import load_tokenizer
    from verl.signals import GracefulStop, StopTraining, request_stop

    with GracefulStop():
        request_stop("SIGTERM")
        with pytest.raises(StopTraining, match="while loading the models .*nothing to save"):
            load_tokenizer(tiny_gpt2, "model.name")


# ---------------------------------------------------------------------------
# Signals in a child process
# ---------------------------------------------------------------------------

STUCK_IN_C = textwrap.dedent("""
    import ctypes, time
    from verl.signals import GracefulStop
    with GracefulStop(grace_s=1.0):
        print("ready", flush=True)
        # glibc's system() retries waitpid on EINTR: the main thread never returns to Python,
        # so no Python-level signal handler can run; only the listener thread sees SIGTERM.
        ctypes.CDLL(None).system(b"sleep 20 </dev/null >/dev/null 2>&1")  # not holding our pipes open
    print("not reached", flush=True)
""")

SAVE_AT_DEADLINE = textwrap.dedent("""
    import time
    from verl.signals import GracefulStop, checkpoint_write, note_checkpoint
    with GracefulStop(grace_s=1.0):
        note_checkpoint("/ckpt/step_000001")
        print("ready", flush=True)
        time.sleep(0.5)
        with checkpoint_write():  # a checkpoint write still running when the grace period ends
            time.sleep(1.5)
            note_checkpoint("/ckpt/step_000002")
        time.sleep(30)  # stuck after the save: the forced exit names what was saved
""")


def _child(tmp_path, code):
    """The child's stdout and stderr go to files: a grandchild (the shell of system()) outliving
    the child must not keep a pipe open, and exit times are taken from the child itself."""
    script = tmp_path / "child.py"
    script.write_text(code)
    out, err = open(tmp_path / "out.txt", "w"), open(tmp_path / "err.txt", "w")
    proc = subprocess.Popen([sys.executable, str(script)], stdout=out, stderr=err, text=True)
    deadline = time.monotonic() + 120
    while "ready" not in (tmp_path / "out.txt").read_text() and time.monotonic() < deadline:
        assert proc.poll() is None, (tmp_path / "err.txt").read_text()
        time.sleep(0.05)
    return proc


def _stop_child(tmp_path, proc) -> tuple[float, str, str]:
    """SIGTERM; (seconds until the child exited, its stdout, its stderr)."""
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    elapsed = time.monotonic() - start
    return elapsed, (tmp_path / "out.txt").read_text(), (tmp_path / "err.txt").read_text()


def test_watchdog_exits_within_grace_when_main_thread_is_stuck_in_c(tmp_path):
    proc = _child(tmp_path, STUCK_IN_C)
    time.sleep(0.3)  # inside system()
    elapsed, out, err = _stop_child(tmp_path, proc)
    assert proc.returncode == 143, err
    assert 1.0 <= elapsed < 12.0, elapsed  # grace_s=1 plus the exit on a loaded machine (the C call takes 20 s)
    assert "not reached" not in out
    assert "not stopped within checkpoint.stop_grace_s=1s" in err and "exiting now with code 143" in err
    assert "this run wrote no checkpoint" in err


def test_watchdog_lets_a_checkpoint_write_finish_then_names_it(tmp_path):
    proc = _child(tmp_path, SAVE_AT_DEADLINE)
    elapsed, _, err = _stop_child(tmp_path, proc)
    assert proc.returncode == 143, err
    assert 1.8 <= elapsed < 15.0, elapsed  # past grace_s=1: the write ended at ~2 s, then the exit (else 30 s)
    assert "the state at the stop was saved to /ckpt/step_000002" in err


def _verl(args, env=None):
    return subprocess.Popen([sys.executable, "-m", "verl.cli", "train", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})


def _wait_for(path, proc, seconds=240):
    """Until `path` exists and is not empty (metrics.jsonl is created empty when the run starts)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and proc.poll() is None and not (path.exists() and path.stat().st_size):
        time.sleep(0.05)
    assert path.exists() and path.stat().st_size, proc.communicate(timeout=60)[1][-3000:]


TRAIN_ROWS = [{"prompt": f"Say something about the number {i}."} for i in range(8)]

HANG_AT_CALL = textwrap.dedent("""
    import os, pathlib, time

    CALLS = [0]

    def score(prompts, responses, samples):
        CALLS[0] += 1  # one call per step (no validation, no baseline scoring)
        if str(CALLS[0]) == os.environ.get("VERL_TEST_HANG_AT_CALL"):
            pathlib.Path(os.environ["VERL_TEST_DIR"], "hanging").write_text("yes")
            time.sleep(120)  # hung: only the stop gets the run out
        return [float(len(r)) / 10 for r in responses]
""")


TEARDOWN_S = 15  # after the stop, the interpreter's own exit (torch and friends unloading: ~3 s on a busy 2-core box)


def test_sigterm_while_reward_hangs_saves_last_step_and_resume_completes(tmp_path, tiny_gpt2, monkeypatch, capsys):
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in TRAIN_ROWS))
    (tmp_path / "reward.py").write_text(HANG_AT_CALL)
    out = tmp_path / "run"
    grace = 6
    args = small_overrides(tmp_path, **{
        "training.total_steps": 2, "training.batch_size": 2, "rollout.max_new_tokens": 4,
        "data.train_files": str(tmp_path / "train.jsonl"), "data.shuffle": "false",
        "reward_fn.type": "python", "reward_fn.function": f"{tmp_path / 'reward.py'}:score",
        "checkpoint.stop_grace_s": grace, "checkpoint.save_dir": str(out)})
    proc = _verl(args, {"VERL_TEST_DIR": str(tmp_path), "VERL_TEST_HANG_AT_CALL": "2"})  # step 2's call hangs
    _wait_for(tmp_path / "hanging", proc)
    signalled = time.time()
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr[-3000:]
    assert time.time() - signalled < grace + TEARDOWN_S  # the function would sleep 120 s
    pointer = out / "checkpoints" / "latest_full"
    # The save is complete (its pointer written last) within stop_grace_s of the signal.
    assert pointer.stat().st_mtime - signalled < grace
    assert "SIGTERM received" in stderr
    assert "during the reward call python" in stdout and "of step 2 of 2; that step was abandoned" in stdout
    assert "full state after step 1 is saved" in stdout
    state = json.loads((out / "checkpoints" / pointer.read_text().strip() / "trainer_state.json").read_text())
    assert state["global_step"] == 1 and state["reason"] == "signal SIGTERM"
    assert state["data"]["position"] == 2 and state["data"]["epoch"] == 0  # rewound to where step 2 began

    monkeypatch.delenv("VERL_TEST_HANG_AT_CALL", raising=False)
    assert main(["train", *args, "--resume", "auto"]) == 0  # in this process: no second start-up
    assert "training finished at step 2" in capsys.readouterr().out
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]


SLOW_VALIDATION = textwrap.dedent("""
    import os, pathlib, time

    def score(prompts, responses, samples):
        with open(pathlib.Path(os.environ["VERL_TEST_DIR"], "calls.txt"), "a") as fh:
            fh.write(f"{time.time()}\\n")  # when each call began
        time.sleep(0.5)  # a slow scorer: the held-out pass (10 batches) takes over 5 s
        return [0.0] * len(responses)
""")


def test_sigterm_during_pre_step_validation_stops_it_at_once(tmp_path, tiny_gpt2):
    (tmp_path / "val.jsonl").write_text("".join(json.dumps(r) + "\n" for r in TRAIN_ROWS * 10))  # 80 rows
    (tmp_path / "reward.py").write_text(SLOW_VALIDATION)
    out = tmp_path / "run"
    grace = 4
    args = small_overrides(tmp_path, **{
        "training.batch_size": 2, "rollout.max_new_tokens": 2, "training.val_every": 1,
        "data.val_files": str(tmp_path / "val.jsonl"), "data.baseline_prompt": "null",
        "reward_fn.type": "python", "reward_fn.function": f"{tmp_path / 'reward.py'}:score",
        "checkpoint.stop_grace_s": grace, "checkpoint.save_dir": str(out)})
    proc = _verl(args, {"VERL_TEST_DIR": str(tmp_path)})
    _wait_for(tmp_path / "calls.txt", proc)  # validation batch 1 is being scored
    signalled = time.time()
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr[-3000:]
    assert time.time() - signalled < grace + TEARDOWN_S
    starts = [float(t) for t in (tmp_path / "calls.txt").read_text().split()]
    # Noticed between validation batches: at most the batch after the one in flight began (had the
    # signal come between its check and its call); without the check all 10 batches run.
    assert len([t for t in starts if t > signalled]) <= 1 and len(starts) < 10, (signalled, starts)
    assert "stopped by SIGTERM during the validation before step 1" in stdout
    assert "nothing was trained yet, so there is nothing to save" in stdout
    assert not (out / "checkpoints").exists() or not os.listdir(out / "checkpoints")
