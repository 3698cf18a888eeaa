"""benchmarks/regression_gate.py: a new e2e run against the stored baseline of its card flags a step
time more than 15% slower or a peak more than 5% larger, matching rows by their settings."""

import importlib.util
import json
from pathlib import Path

import pytest

GATE_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "regression_gate.py"
spec = importlib.util.spec_from_file_location("regression_gate", GATE_PATH)
gate = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gate)

ARGS = {"arch": "qwen2-7b", "lora_rank": 16, "prompts": 16, "group": 8, "max_new_tokens": 512, "dtype": "bfloat16",
        "out": "/tmp/anywhere", "timeout": 300}


def run_file(tmp_path, name, rows, gpu="NVIDIA H100 80GB HBM3", args=ARGS):
    path = tmp_path / name
    path.write_text(json.dumps({"benchmark": "e2e_grpo", "machine": {"gpu": gpu, "date": "d"}, "args": args,
                                "rows": rows}))
    return str(path)


@pytest.fixture
def baselines(tmp_path, monkeypatch):
    monkeypatch.setattr(gate, "BASELINES", str(tmp_path / "baselines"))
    base = run_file(tmp_path, "base.json", [{"system": "verl-vllm", "work": "like-for-like", "step_s": 10.0,
                                             "peak_gib": 90.0}])
    assert gate.main(["--record", base]) == 0
    return tmp_path


def test_card_names():
    assert gate.card_of({"gpu": "NVIDIA H100 80GB HBM3"}) == "h100"
    assert gate.card_of({"gpu": "NVIDIA H200"}) == "h200"
    assert gate.card_of({}) == "cpu"


@pytest.mark.parametrize("step_s,peak,expect", [
    (11.4, 90.0, []),                         # +14%: within the 15% of step time
    (11.6, 90.0, ["step time +16.0%"]),       # 11.6 / 10 - 1 = +16%
    (10.0, 94.4, []),                         # 94.4 / 90 - 1 = +4.9%: within 5%
    (10.0, 94.6, ["peak memory +5.1%"]),      # 94.6 / 90 - 1 = +5.1%
    (8.0, 70.0, []),                          # faster and smaller: never a failure
])
def test_limits(baselines, step_s, peak, expect, capsys):
    new = run_file(baselines, "new.json", [{"system": "verl-vllm", "work": "like-for-like", "step_s": step_s,
                                            "peak_gib": peak}])
    code = gate.main([new])
    out = capsys.readouterr().out
    assert code == (1 if expect else 0), out
    for fragment in expect:
        assert fragment in out
    assert "| 10.000 |" in out and "| 90.00 |" in out  # the baseline's figures beside the new ones


def test_rows_match_by_their_settings_only(baselines, capsys):
    # other output folder and timeout: the same row; another LoRA rank: another row, without a baseline
    moved = dict(ARGS, out="/elsewhere", timeout=999)
    new = run_file(baselines, "new.json", [{"system": "verl-vllm", "work": "like-for-like", "step_s": 12.0,
                                            "peak_gib": 90.0}], args=moved)
    assert gate.main([new]) == 1
    other = run_file(baselines, "other.json", [{"system": "verl-vllm", "work": "like-for-like", "step_s": 99.0,
                                                "peak_gib": 99.0}], args=dict(ARGS, lora_rank=64))
    assert gate.main([other]) == 0 and "no baseline" in capsys.readouterr().out
    # fixed lengths are the rows recorded before the lengths axis: the same row; realistic lengths another one
    fixed = run_file(baselines, "fixed.json", [{"system": "verl-vllm", "work": "like-for-like", "step_s": 12.0,
                                                "peak_gib": 90.0}], args=dict(ARGS, lengths="fixed"))
    assert gate.main([fixed]) == 1
    real = run_file(baselines, "real.json", [{"system": "verl-vllm", "work": "like-for-like", "step_s": 12.0,
                                              "peak_gib": 90.0}], args=dict(ARGS, lengths="realistic"))
    assert gate.main([real]) == 0 and 'lengths="realistic"' in capsys.readouterr().out


def test_a_card_without_a_baseline_says_how_to_record_one(baselines, capsys):
    new = run_file(baselines, "h200.json", [{"system": "verl-vllm", "step_s": 1.0}], gpu="NVIDIA H200")
    assert gate.main([new]) == 0
    assert "no baseline for card h200 yet; record one with" in capsys.readouterr().out


def test_stored_baselines_name_result_files_that_exist():
    for card_file in (GATE_PATH.parent / "baselines").glob("*.json"):
        for sig, fig in json.loads(card_file.read_text()).items():
            assert (GATE_PATH.parents[1] / fig["source"]).is_file(), (card_file.name, sig)
            assert fig["step_s"] > 0
