"""What a new user meets on the first day, beyond the quickstart's happy path: the run's own lines say what
they are, defaults nobody set fit a small run, errors name the key and file, long silent work shows
progress, and real verl's documented GSM8K command line runs offline."""

import json
import os
import re
import subprocess
import sys
import threading
import time

import pytest
import yaml

from verl import load_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def verl_cli(*args, cwd=None, env=None):
    return subprocess.run([sys.executable, "-m", "verl.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=600, env=env)


# ---------------------------------------------------------------- what the run prints

def test_quickstart_baseline_is_explained_and_shows_before_and_after(tmp_path):
    """The quickstart's baseline lines: one line saying what the baseline is, its answer before training, and
    after training the same prompt's answer beside the one from before. The quickstart asks a question of its
    own task (the default prompt is off-topic for the tiny model); after its 40 steps the answer is the target."""
    proc = verl_cli("train", os.path.join(ROOT, "examples/quickstart.yaml"), "--save_dir", str(tmp_path / "q"),
                    cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    note = [i for i, line in enumerate(lines) if line.startswith("baseline: data.baseline_prompt is answered")]
    before = [i for i, line in enumerate(lines) if line.startswith("[baseline before training] 'How do you feel today?'")]
    after = [line for line in lines if line.startswith("[baseline after step 40] 'How do you feel today?'")]
    assert len(note) == 1 and len(before) == 1 and note[0] < before[0] and len(after) == 1, proc.stdout[-3000:]
    assert "(before training: '" in after[0]
    assert "I love reinforcement learning" in after[0].split(" (before training:")[0]  # what the 40 steps taught
    texts = [json.loads(r) for r in (tmp_path / "q" / "text.jsonl").read_text().splitlines()]
    assert [t["key"] for t in texts if t["key"].startswith("baseline/")] == ["baseline/before", "baseline/after"]


def test_console_line_shows_each_reward_component():
    """Two reward functions: the line shows their means beside the weighted sum it calls the reward."""
    from verl.tracking.backends import ConsoleBackend

    metrics = {"reward/mean": 0.7, "reward/max": 1.0, "reward/min": 0.1, "reward/errors": 0.0,
               "reward/correct": 0.5, "reward/length": 0.2, "reward/correct/acc": 0.5,
               "reward/arith/mean": 0.7, "actor/kl": 0.01}
    line = ConsoleBackend(total_steps=3).format_line(metrics, 1, None)
    assert "reward 0.7 (correct 0.5, length 0.2) | kl 0.01" in line
    one = {"reward/mean": 0.5, "reward/max": 1.0, "reward/min": 0.0, "reward/errors": 0.0, "reward/correct": 0.5}
    assert "(" not in ConsoleBackend().format_line(one, 1, None)  # one component: its mean is the reward


def test_python_api_small_batch_gets_a_fitting_micro_batch(tmp_path, capsys, tiny_gpt2):
    """batch_size 1 x rollout.n 2 = 2 sequences a step: the micro-batch nobody set (4) would not divide them;
    auto takes 2 and says so, instead of refusing a config the user never wrote that key in."""
    import verl

    trainer = verl.Trainer(model="tiny:gpt2", algorithm="grpo", train_dataset=[{"prompt": "Hi?", "answer": "1"}],
                           reward_funcs=[lambda completions, **kw: [float(len(c) > 3) for c in completions]],
                           training={"batch_size": 1, "total_steps": 1},
                           overrides={"rollout.n": 2, "rollout.max_new_tokens": 4,
                                      "checkpoint.save_dir": str(tmp_path / "api")})
    assert trainer.config.training.micro_batch_size == 2
    trainer.train()
    out = capsys.readouterr().out
    assert "training.micro_batch_size: auto -> 2 (the usual 4 does not divide training.mini_batch_size 2" in out
    # an explicit value is the user's: still checked, never replaced
    from verl.errors import ConfigError

    with pytest.raises(ConfigError, match="training.micro_batch_size: 4 must divide training.mini_batch_size 2"):
        load_config(None, ["training.batch_size=1", "rollout.n=2", "training.micro_batch_size=4"])
    assert load_config(None, ["training.batch_size=3", "rollout.n=2"]).training.micro_batch_size == 3  # 6 seqs


# ---------------------------------------------------------------- error lines

def test_missing_data_file_names_the_key_the_yaml_and_where_it_looked(tmp_path):
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "run.yaml").write_text("data:\n  val_files: [data/heldout_missing.jsonl]\n"
                                               "training: {total_steps: 1}\n")
    proc = verl_cli("train", "cfg/run.yaml", "--save_dir", str(tmp_path / "o"), cwd=tmp_path)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: data.val_files: data/heldout_missing.jsonl: no such file")
    assert "cfg/run.yaml" in lines[0] and str(tmp_path / "cfg") in lines[0] and "working directory" in lines[0]


def test_debug_keeps_the_exit_code_of_a_config_error(tmp_path):
    (tmp_path / "c.yaml").write_text("training:\n  totl_steps: 3\n")
    plain = verl_cli("train", str(tmp_path / "c.yaml"))
    debug = verl_cli("train", str(tmp_path / "c.yaml"), "--debug")
    assert plain.returncode == debug.returncode == 2
    assert "Traceback" in debug.stderr and debug.stderr.strip().splitlines()[-1].startswith("error: unknown config key")


def test_mistyped_option_gets_a_did_you_mean():
    proc = verl_cli("train", "--save-dri", "x")
    assert proc.returncode == 2 and "unknown option --save-dri; did you mean --save-dir?" in proc.stderr
    proc = verl_cli("data", "arithmetic", "--out", "x.jsonl", "--val_fractoin", "0.2")
    assert proc.returncode == 2 and "did you mean --val_fraction?" in proc.stderr


def test_resume_auto_with_nothing_to_resume_does_not_advise_resume_auto(tmp_path):
    """A run stopped before its first full-state save leaves its logs only: --resume auto cannot continue it,
    so the run starts anew (the earlier files moved aside); the note says why, instead of telling the user to
    pass the flag they passed."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "reward/mean": 0.1}) + "\n" for s in (1, 2)))
    again = verl_cli("train", "examples/quickstart.yaml", "training.total_steps=1", "training.val_every=0",
                     "--save_dir", str(out), "--resume", "auto", cwd=ROOT)
    assert again.returncode == 0, again.stderr[-2000:]
    note = [line for line in again.stdout.splitlines() if line.startswith(f"note: {out} held an earlier run")]
    assert len(note) == 1 and "--resume auto found no full-state checkpoint" in note[0], again.stdout[-2000:]
    assert "pass --resume auto" not in note[0] and (out / "previous_run_1" / "metrics.jsonl").is_file()


# ---------------------------------------------------------------- long work shows progress

class _SlowEngine:
    """Greedy answers after a pause, as a CPU generating a real model's validation batch."""

    def __init__(self, pause_s):
        self.pause_s = pause_s

    def generate(self, batch, sampling):
        time.sleep(self.pause_s)
        batch.response_text = ["42"] * len(batch)
        return batch


class _Reward:
    def score(self, batch):
        import torch

        return torch.ones(len(batch)), {}


def test_validation_prints_progress_while_it_runs(tiny_gpt2):
    from verl.data.sources import PromptRow
    from verl.models.loading import load_tokenizer
    from verl.trainer.validation import Validator

    cfg = load_config(None, [f"model.name={tiny_gpt2}", "training.batch_size=2", "rollout.n=1"])
    rows = [PromptRow(prompt=f"What is {i} + 1?", ground_truth=str(i + 1)) for i in range(24)]  # 3 batches of 8
    said = []
    lock = threading.Lock()

    def say(line):
        with lock:
            said.append(line)

    v = Validator(_SlowEngine(0.3), _Reward(), load_tokenizer(tiny_gpt2), cfg, rows, None, say=say)
    v.heartbeat_s = 0.1
    metrics, _ = v.run(step=3)
    assert metrics["val/all/acc@1"] == 1.0
    beats = [line for line in said if line.startswith("validating: ")]
    assert len(beats) >= 3, said  # ~0.9 s of work, a line every 0.1 s
    counts = [int(re.match(r"validating: (\d+)/24 held-out prompts answered, \d+ s", b).group(1)) for b in beats]
    assert counts == sorted(counts) and set(counts) <= {0, 8, 16, 24} and counts[0] == 0
    time.sleep(0.3)
    assert len([line for line in said if line.startswith("validating: ")]) == len(beats)  # stops with the pass


# ---------------------------------------------------------------- real verl's GSM8K line, offline

def _documented_gsm8k_line() -> list[str]:
    """The first command of docs/real_verl.md: real verl's GSM8K PPO line, as printed there."""
    text = open(os.path.join(ROOT, "docs/real_verl.md"), encoding="utf-8").read()
    block = re.search(r"```bash\n(python3 -m verl.trainer.main_ppo.*?)```", text, re.S).group(1)
    words = block.replace("\\\n", " ").split()
    assert words[:3] == ["python3", "-m", "verl.trainer.main_ppo"]
    return words[3:]


def test_verl_data_gsm8k_makes_the_documented_gsm8k_line_run(tmp_path):
    """`verl data gsm8k` writes ~/data/gsm8k/{train,test}.parquet in real verl's layout; real verl's documented
    line then trains, with only the model and the sizes cut for a CPU appended (a later key=value wins)."""
    home = tmp_path / "home"
    env = {**os.environ, "HOME": str(home), "VERL_CACHE": os.environ.get("VERL_CACHE", os.path.expanduser("~/.cache/verl"))}
    made = verl_cli("data", "gsm8k", "--n_train", "8", "--n_test", "4", env=env)
    assert made.returncode == 0, made.stderr
    import pyarrow.parquet as pq

    train = pq.read_table(home / "data/gsm8k/train.parquet").to_pylist()
    test = pq.read_table(home / "data/gsm8k/test.parquet").to_pylist()
    assert len(train) == 8 and len(test) == 4
    row = train[0]
    assert row["data_source"] == "openai/gsm8k" and row["ability"] == "math"
    assert row["prompt"][0]["role"] == "user" and row["prompt"][0]["content"].endswith(
        'output the final answer after "####".')
    answer = row["extra_info"]["answer"]
    assert answer.endswith("#### " + row["reward_model"]["ground_truth"])  # e.g. '18 + 8 = 26\n#### 26'
    assert not {r["extra_info"]["question"] for r in train} & {r["extra_info"]["question"] for r in test}

    cut = ["actor_rollout_ref.model.path=tiny:gpt2", "critic.model.path=tiny:gpt2", "data.train_batch_size=2",
           "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
           "critic.ppo_micro_batch_size_per_gpu=2", "data.max_prompt_length=96", "data.max_response_length=4",
           "actor_rollout_ref.rollout.name=hf", "trainer.total_training_steps=1", "trainer.device=cpu",
           f"trainer.default_local_dir={tmp_path / 'out'}"]
    line = [w.replace("$HOME", str(home)) for w in _documented_gsm8k_line()]
    proc = subprocess.run([sys.executable, "-m", "verl.trainer.main_ppo", *line, *cut], capture_output=True,
                          text=True, timeout=600, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cfg = yaml.safe_load((tmp_path / "out" / "config.yaml").read_text())
    assert cfg["data"]["train_files"] == [str(home / "data/gsm8k/train.parquet")]
    assert cfg["reward_fn"]["type"] == "by_data_source"  # openai/gsm8k rows: real verl's GSM8K rule, exactly


def test_verl_data_gsm8k_reads_local_gsm8k_rows_and_refuses_bad_ones(tmp_path):
    good = tmp_path / "g.jsonl"
    good.write_text(json.dumps({"question": "Ann has 2 cats and gets 1,000 more. How many?",
                                "answer": "2 + 1000 = 1002\n#### 1,002"}) + "\n")
    proc = verl_cli("data", "gsm8k", "--train", str(good), "--test", str(good), "--out", str(tmp_path / "d"))
    assert proc.returncode == 0, proc.stderr
    import pyarrow.parquet as pq

    row = pq.read_table(tmp_path / "d" / "train.parquet").to_pylist()[0]
    assert row["reward_model"]["ground_truth"] == "1002"  # the text after the last '####', commas dropped
    bad = tmp_path / "b.jsonl"
    bad.write_text(json.dumps({"question": "q", "answer": "no final line"}) + "\n")
    proc = verl_cli("data", "gsm8k", "--train", str(bad), "--out", str(tmp_path / "e"))
    assert proc.returncode == 2 and f"{bad} row 0: the answer has no '#### <number>' line" in proc.stderr
