"""`verl data gsm8k`: GSM8K-style rows in real verl's parquet layout, written offline, so that real verl's
GSM8K command lines (docs/real_verl.md) run as printed.

    verl data gsm8k                                   # -> ~/data/gsm8k/train.parquet, test.parquet
    verl data gsm8k --train my_gsm8k_train.jsonl --test my_gsm8k_test.jsonl --out ~/data/gsm8k

Real verl's own preprocessing script downloads openai/gsm8k from the hub; this machine may have no hub,
so the rows come from local files in GSM8K's layout ({"question": ..., "answer": "... #### 42"}, jsonl or
parquet) or, without them, from synthetic grade-school word problems (verl.data.arithmetic's, each answer
worked in one line and ended by '#### n'). The synthetic set has GSM8K's split sizes (7473 / 1319), so an
epoch is as many steps as on the real data; it is NOT GSM8K, and its scores say nothing about GSM8K.

Each written row, as real verl's preprocessing writes it:

    {"data_source": "openai/gsm8k",
     "prompt": [{"role": "user", "content": QUESTION + " " + INSTRUCTION}],
     "ability": "math",
     "reward_model": {"style": "rule", "ground_truth": "42"},
     "extra_info": {"split": "train", "index": 0, "answer": "<the worked answer>", "question": QUESTION}}
"""

from __future__ import annotations

import argparse
import os
import sys

from verl.data.arithmetic import generate_arithmetic, write_records

DATA_SOURCE = "openai/gsm8k"  # real verl's default reward scores this source with its GSM8K rule
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
SPLIT_SIZES = {"train": 7473, "test": 1319}  # openai/gsm8k's main config
DESCRIPTION = ("Write GSM8K-style rows in real verl's parquet layout (train.parquet, test.parquet), from your "
               "local GSM8K files or synthetic word problems, for real verl's GSM8K command lines.")


def final_answer(worked: str, where: str) -> str:
    """'42' from GSM8K's worked answer '... #### 42' (its text after the last '####', commas dropped)."""
    if "####" not in worked:
        raise ValueError(f"{where}: the answer has no '#### <number>' line (GSM8K's layout)")
    return worked.rsplit("####", 1)[1].strip().replace(",", "")


def to_real_verl_row(question: str, worked: str, split: str, index: int, where: str) -> dict:
    """One row of real verl's GSM8K layout (the module docstring)."""
    return {"data_source": DATA_SOURCE,
            "prompt": [{"role": "user", "content": f"{question} {INSTRUCTION}"}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": final_answer(worked, where)},
            "extra_info": {"split": split, "index": index, "answer": worked, "question": question}}


def synthetic_splits(n_train: int, n_test: int, seed: int) -> dict[str, list[dict]]:
    """{"train": n_train rows, "test": n_test rows} of word problems with one-line worked answers, from one
    draw of distinct problems (verl.data.arithmetic), so no problem is in both splits."""
    problems = generate_arithmetic(n_train + n_test, digits=2, ops="+-*", seed=seed, instruction=False,
                                   word_fraction=1.0)
    splits = {"test": problems[:n_test], "train": problems[n_test:]}
    out = {}
    for split, chosen in splits.items():
        out[split] = []
        for i, p in enumerate(chosen):
            e = p["extra_info"]
            worked = f"{e['a']} {e['op']} {e['b']} = {p['answer']}\n#### {p['answer']}"
            out[split].append(to_real_verl_row(p["prompt"], worked, split, i, f"synthetic {split} row {i}"))
    return out


def rows_from_file(path: str, split: str) -> list[dict]:
    """Rows of a local file in GSM8K's layout (question / answer columns; .jsonl, .json or .parquet)."""
    import json

    if not os.path.isfile(path):
        raise ValueError(f"{path}: no such file")
    if path.lower().endswith(".parquet"):
        import pyarrow.parquet as pq

        records = pq.read_table(path).to_pylist()
    else:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        records = json.loads(text) if path.lower().endswith(".json") else [
            json.loads(line) for line in text.splitlines() if line.strip()]
    rows = []
    for i, r in enumerate(records):
        where = f"{path} row {i}"
        if not isinstance(r, dict) or not isinstance(r.get("question"), str) or not isinstance(r.get("answer"), str):
            raise ValueError(f"{where}: needs string fields 'question' and 'answer' (GSM8K's layout)")
        rows.append(to_real_verl_row(r["question"], r["answer"], split, i, where))
    if not rows:
        raise ValueError(f"{path}: no rows")
    return rows


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `verl data gsm8k`."""
    from verl.cli_flags import add_flag

    add_flag(parser, "--out", default="~/data/gsm8k", help="folder for train.parquet and test.parquet "
                                                           "(default ~/data/gsm8k, the path real verl's docs use)")
    add_flag(parser, "--train", default=None, help="your GSM8K training rows (question/answer, .jsonl or .parquet); "
                                                   "default: synthetic word problems")
    add_flag(parser, "--test", default=None, help="your GSM8K test rows; default: synthetic word problems")
    add_flag(parser, "--n_train", type=int, default=SPLIT_SIZES["train"],
             help=f"synthetic training rows (default {SPLIT_SIZES['train']}, GSM8K's)")
    add_flag(parser, "--n_test", type=int, default=SPLIT_SIZES["test"],
             help=f"synthetic test rows (default {SPLIT_SIZES['test']}, GSM8K's)")
    add_flag(parser, "--seed", type=int, default=0, help="random seed of the synthetic rows (default 0)")


def run(args: argparse.Namespace) -> int:
    out = os.path.expanduser(args.out)
    try:
        for split in ("train", "test"):
            if getattr(args, f"n_{split}") < 1:
                raise ValueError(f"--n_{split} must be at least 1, got {getattr(args, f'n_{split}')}")
        synthetic = synthetic_splits(args.n_train, args.n_test, args.seed) if not (args.train and args.test) else {}
        for split in ("train", "test"):
            source = getattr(args, split)
            rows = rows_from_file(source, split) if source else synthetic[split]
            path = os.path.join(out, f"{split}.parquet")
            write_records(rows, path, "parquet")
            print(f"wrote {len(rows)} {'rows of ' + source if source else 'synthetic GSM8K-style rows'} to {path}")
    except ValueError as exc:
        print(f"verl data gsm8k: {exc}", file=sys.stderr)
        return 2
    return 0
