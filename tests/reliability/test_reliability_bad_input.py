"""Bad input through `python -m verl.cli train`: one line on stderr naming the problem, exit
code 2, no traceback (unless --debug). The cases run as parallel subprocesses.

(Further data and reward-loading errors -- missing files, rows without a prompt key, empty
datasets, a missing reward function -- are covered in-process by the data and reward tests;
they go through the same DataError/ConfigError -> one line, exit 2 path.)"""

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import small_overrides

REWARDS = '''
def boom(prompts, responses, samples):
    raise ValueError("boom in my reward")

def words(prompts, responses, samples):
    return ["high" for _ in responses]

def hang(prompts, responses, samples):
    import time
    time.sleep(600)
'''


def _cases(tmp):
    (tmp / "malformed.yaml").write_text("training:\n  total_steps: [1, 2\nmodel:\n  name: x\n")
    (tmp / "unknown.yaml").write_text("training:\n  totl_steps: 3\n")
    (tmp / "wrong_type.yaml").write_text("training:\n  total_steps: many\n")
    (tmp / "bad_row.jsonl").write_text('{"prompt": "hello"}\n{"prompt": "oops", \n')
    (tmp / "empty_row.jsonl").write_text('{"prompt": "hello"}\n{"prompt": "  "}\n')
    (tmp / "rewards.py").write_text(REWARDS)

    def run(*extra, **over):
        base = small_overrides(tmp, **{"training.total_steps": 1, "training.batch_size": 2,
                                       "rollout.max_new_tokens": 4, **over})
        return [*base, *extra]

    r = str(tmp / "rewards.py")
    changed = _checkpoint_with_config(tmp, run(**{"training.lr": 0.5}))
    return {
        "malformed_yaml": [str(tmp / "malformed.yaml")],
        "unknown_key": [str(tmp / "unknown.yaml")],
        "wrong_type_yaml": [str(tmp / "wrong_type.yaml")],
        "wrong_type_override": run(**{"training.lr": "fast"}),
        "missing_config": [str(tmp / "nope.yaml")],
        "batch_arithmetic": run(**{"training.batch_size": 3, "training.micro_batch_size": 2}),
        "mini_batch_arithmetic": run(**{"training.batch_size": 4, "training.mini_batch_size": 3,
                                        "training.micro_batch_size": 1}),
        "missing_model": run(**{"model.name": str(tmp / "no_such_model")}),
        "malformed_row": run(**{"data.train_files": str(tmp / "bad_row.jsonl")}),
        "empty_row": run(**{"data.train_files": str(tmp / "empty_row.jsonl")}),
        "reward_raises": run(**{"reward_fn.type": "python", "reward_fn.function": f"{r}:boom"}),
        "reward_not_number": run(**{"reward_fn.type": "python", "reward_fn.function": f"{r}:words"}),
        "resume_missing": run("--resume", str(tmp / "no_checkpoint")),
        "resume_changed_config": run("--resume", changed),
        "unknown_option": run("--sav_dir", "x"),
        "bad_tool_pattern": run(**{"rollout.tools": "[calculator]", "rollout.multi_turn.tool_format": "regex",
                                   "rollout.multi_turn.tool_call_pattern": "(?P<name>[a-z+"}),
        # with async_training the reward runs in the producer thread: the same line and exit code as in sync
        "async_reward_raises": run(**{"reward_fn.type": "python", "reward_fn.function": f"{r}:boom",
                                      "async_training.enable": "true", "rollout.hf_weight_copy": "true"}),
        "async_reward_hangs": run(**{"reward_fn.type": "python", "reward_fn.function": f"{r}:hang",
                                     "reward_fn.timeout_s": 2, "async_training.enable": "true",
                                     "rollout.hf_weight_copy": "true"}),
        # policy on_error: zero scores such samples 0, counts them, and trains on
        "reward_raises_zero": run(**{"reward_fn.type": "python", "reward_fn.function": f"{r}:boom",
                                     "reward_fn.on_error": "zero", "checkpoint.save_dir": str(tmp / "zero")}),
    }


def _checkpoint_with_config(tmp, overrides) -> str:
    """A (stub) full checkpoint whose saved config has the given overrides."""
    from verl.config import load_config
    from verl.checkpoint.manager import CheckpointManager

    config = load_config(None, overrides).to_dict()

    def write(folder):
        with open(f"{folder}/trainer_state.json", "w") as fh:
            json.dump({"global_step": 2, "config": config}, fh)

    return CheckpointManager(str(tmp / "old_run")).save(2, "full", write)


@pytest.fixture(scope="module")
def results(tmp_path_factory, tiny_gpt2):
    tmp = tmp_path_factory.mktemp("bad_input")
    cases = _cases(tmp)

    def go(args):
        try:
            return subprocess.run([sys.executable, "-m", "verl.cli", "train", *args], capture_output=True,
                                  text=True, timeout=600, cwd=tmp)
        except subprocess.TimeoutExpired as exc:  # fail that case only, not the whole module
            return subprocess.CompletedProcess(exc.cmd, -1, exc.stdout or "", f"timed out: {exc}")

    # Each case in its own save_dir: runs at once on one folder are refused (its lock, run_lock.py).
    shared = f"checkpoint.save_dir={tmp / 'out'}"  # small_overrides' default
    cases = {name: [f"checkpoint.save_dir={tmp / name}" if a == shared else a for a in args]
             for name, args in cases.items()}
    with ThreadPoolExecutor(max_workers=4) as pool:
        procs = dict(zip(cases, pool.map(go, cases.values())))
    return tmp, procs


EXPECTED = {  # case -> fragments the single error line must contain
    "malformed_yaml": ["malformed.yaml", "malformed YAML", "line 3, column"],
    "unknown_key": ["unknown config key 'training.totl_steps'", "did you mean 'training.total_steps'"],
    "wrong_type_yaml": ["training.total_steps: expected an integer, got 'many'"],
    "wrong_type_override": ["training.lr: expected a number, got 'fast'"],
    "missing_config": ["config file not found", "nope.yaml"],
    "batch_arithmetic": ["training.micro_batch_size: 2 must divide training.mini_batch_size 3"],
    "mini_batch_arithmetic": ["training.mini_batch_size: 3 does not divide the 4 sequences per step"],
    "missing_model": ["model.name", "no_such_model", "does not exist"],
    "malformed_row": ["bad_row.jsonl line 2", "malformed JSON"],
    "empty_row": ["empty_row.jsonl line 2", "the prompt is empty"],
    "reward_raises": ["rewards.py:boom", "failed on sample", "prompt=", "response=", "ValueError: boom in my reward",
                      "on_error: zero"],
    "reward_not_number": ["rewards.py:words", "failed on sample", "response=", "'high' (not a number)"],
    "resume_missing": ["checkpoint.resume", "no_checkpoint", "does not exist"],
    "resume_changed_config": ["checkpoint.resume", "differs", "training.lr: 0.5 -> 0.001", "--resume_force"],
    "unknown_option": ["unknown option --sav_dir"],
    "bad_tool_pattern": ["rollout.multi_turn.tool_call_pattern: invalid regular expression", "unterminated"],
    "async_reward_raises": ["rewards.py:boom", "failed on sample", "ValueError: boom in my reward"],
    "async_reward_hangs": ["rewards.py:hang", "reward_fn.timeout_s"],
}


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_bad_input_is_one_line_exit_2(results, case):
    _, procs = results
    proc = procs[case]
    assert proc.returncode == 2, (case, proc.returncode, proc.stderr[-3000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, (case, proc.stderr[-3000:])
    assert lines[0].startswith("error: ") and "Traceback" not in proc.stderr
    for fragment in EXPECTED[case]:
        assert fragment in lines[0], (case, fragment, lines[0])


def test_reward_errors_scored_zero_and_counted(results):
    tmp, procs = results
    proc = procs["reward_raises_zero"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in open(tmp / "zero" / "metrics.jsonl")]
    assert rows[0]["reward/errors"] == 2 and rows[0]["reward/mean"] == 0.0


def test_debug_shows_the_traceback(tmp_path):
    (tmp_path / "c.yaml").write_text("training:\n  total_steps: many\n")
    proc = subprocess.run([sys.executable, "-m", "verl.cli", "train", str(tmp_path / "c.yaml"), "--debug"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "Traceback" in proc.stderr and "expected an integer" in proc.stderr
