"""The synthetic arithmetic dataset and `verl data arithmetic`."""

import json
import re

import pyarrow.parquet as pq
import pytest

from verl.config import DataConfig
from verl.data.arithmetic import INSTRUCTION, generate_arithmetic, main, split_path
from verl.data.prompts import load_prompt_rows


def _expected(a, op, b):
    return {"+": a + b, "-": a - b, "*": a * b}[op]


def test_answers_are_correct_and_match_the_text():
    records = generate_arithmetic(300, digits=2, ops="+-*", seed=1)
    assert len(records) == 300
    for r in records:
        e = r["extra_info"]
        assert r["answer"] == str(_expected(e["a"], e["op"], e["b"])) and int(r["answer"]) >= 0
        assert r["data_source"] == "arithmetic" and r["prompt"].endswith(INSTRUCTION)
        if e["kind"] == "bare":
            m = re.match(r"What is (\d+) ([+\-*]) (\d+)\?", r["prompt"])
            assert m and (int(m[1]), m[2], int(m[3])) == (e["a"], e["op"], e["b"])
        else:
            numbers = [int(x) for x in re.findall(r"\d+", r["prompt"])]
            assert numbers == [e["a"], e["b"]]
        assert 1 <= e["a"] <= 99 and 1 <= e["b"] <= (9 if e["op"] == "*" else 99)
    kinds = {r["extra_info"]["kind"] for r in records}
    ops = {r["extra_info"]["op"] for r in records}
    assert kinds == {"bare", "word"} and ops == set("+-*")
    assert len({(r["extra_info"]["a"], r["extra_info"]["op"], r["extra_info"]["b"]) for r in records}) == 300


def test_deterministic_with_seed_and_options():
    assert generate_arithmetic(50, seed=7) == generate_arithmetic(50, seed=7)
    assert generate_arithmetic(50, seed=7) != generate_arithmetic(50, seed=8)
    plain = generate_arithmetic(20, ops="+", seed=0, instruction=False)
    assert all("####" not in r["prompt"] and r["extra_info"]["op"] == "+" for r in plain)
    one_digit = generate_arithmetic(30, digits=1, ops="-", seed=0)
    assert all(0 <= int(r["answer"]) <= 8 for r in one_digit)


def test_bad_arguments():
    with pytest.raises(ValueError, match="ops must be made of"):
        generate_arithmetic(5, ops="/")
    with pytest.raises(ValueError, match="only 81 distinct problems"):
        generate_arithmetic(100, digits=1, ops="+")
    generate_arithmetic(81, digits=1, ops="+")  # exactly the whole space


def test_cli_writes_train_and_heldout_jsonl(tmp_path, capsys):
    out = str(tmp_path / "train.jsonl")
    assert main(["--n", "50", "--out", out, "--val_fraction", "0.2", "--seed", "3"]) == 0
    assert split_path(out) == str(tmp_path / "train.val.jsonl")
    train = [json.loads(line) for line in open(out)]
    val = [json.loads(line) for line in open(split_path(out))]
    assert (len(train), len(val)) == (40, 10)
    key = lambda r: (r["extra_info"]["a"], r["extra_info"]["op"], r["extra_info"]["b"])  # noqa: E731
    assert not {key(r) for r in train} & {key(r) for r in val}  # held out means unseen
    assert train + val == generate_arithmetic(50, seed=3)
    rows = load_prompt_rows(DataConfig(), [out])
    assert rows[0].ground_truth == train[0]["answer"] and rows[0].data_source == "arithmetic"
    assert "wrote 40 problems" in capsys.readouterr().out


def test_cli_parquet_and_no_instruction(tmp_path):
    out = str(tmp_path / "arith.parquet")
    assert main(["--n", "20", "--out", out, "--no-instruction", "--ops", "+-", "--digits", "3"]) == 0
    table = pq.read_table(out).to_pylist()
    assert len(table) == 18 and len(pq.read_table(str(tmp_path / "arith.val.parquet"))) == 2
    assert all("####" not in r["prompt"] for r in table)
    rows = load_prompt_rows(DataConfig(), [out])
    assert [r.ground_truth for r in rows] == [r["answer"] for r in table]
    assert rows[0].extra["op"] in "+-"


def test_cli_errors(tmp_path, capsys):
    assert main(["--n", "500", "--digits", "1", "--ops", "+", "--out", str(tmp_path / "x.jsonl")]) == 2
    assert "distinct problems" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--n", "10", "--out", str(tmp_path / "x.jsonl"), "--val_fraction", "1.5"])
