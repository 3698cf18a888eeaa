"""A synthetic arithmetic dataset with verifiable answers: `verl data arithmetic`.

    verl data arithmetic --n 2000 --out data/arith.jsonl      # -> arith.jsonl + arith.val.jsonl

Half the prompts are bare sums ("What is 17 + 25?"), half short word problems ("Mia has
17 apples and gets 25 more. How many apples does Mia have now?"). Each record is a flat
row that `verl.data` reads as it is:

    {"prompt": "What is 17 + 25? Give the final answer after ####.",
     "answer": "42", "data_source": "arithmetic",
     "extra_info": {"index": 0, "a": 17, "op": "+", "b": 25, "kind": "bare"}}

Problems are unique by (a, op, b), so the held-out split shares no sum with training.
Operands have up to `digits` digits; for "*" the second operand has one digit fewer
(at least one), so products stay small; for "-" the larger operand comes first
(no negative answers).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys

INSTRUCTION = "Give the final answer after ####."
OPS = "+-*"

_NAMES = ("Mia", "Tom", "Ana", "Leo", "Sara", "Ben", "Lily", "Omar", "Zoe", "Sam")
_ITEMS = ("apples", "books", "coins", "stickers", "marbles", "pencils", "shells", "cards")
_WORD = {
    "+": "{name} has {a} {item} and gets {b} more. How many {item} does {name} have now?",
    "-": "{name} has {a} {item} and gives away {b}. How many {item} does {name} have left?",
    "*": "{name} has {a} boxes with {b} {item} in each box. How many {item} does {name} have in total?",
}


def _solve(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b if op == "-" else a * b


def _space_size(digits: int, ops: str) -> int:
    hi = 10**digits - 1
    sizes = {"+": hi * hi, "-": hi * (hi + 1) // 2, "*": hi * (10 ** max(1, digits - 1) - 1)}
    return sum(sizes[o] for o in set(ops))


def generate_arithmetic(n: int, digits: int = 2, ops: str = OPS, seed: int = 0, instruction: bool = True,
                        word_fraction: float = 0.5, data_source: str = "arithmetic") -> list[dict]:
    """`n` unique problems (records as in the module doc), deterministic for a given seed."""
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    if digits < 1:
        raise ValueError(f"digits must be at least 1, got {digits}")
    bad = sorted(set(ops) - set(OPS))
    if not ops or bad:
        raise ValueError(f"ops must be made of '+', '-', '*', got {ops!r}")
    space = _space_size(digits, ops)
    if n > space:
        raise ValueError(f"only {space} distinct problems exist with digits={digits} ops={ops!r}; "
                         f"ask for fewer (--n) or more digits")
    rng = random.Random(seed)
    ops = "".join(sorted(set(ops), key=OPS.index))
    seen: set[tuple[int, str, int]] = set()
    records = []
    while len(records) < n:
        op = rng.choice(ops)
        a = rng.randint(1, 10**digits - 1)
        b = rng.randint(1, 10 ** (max(1, digits - 1) if op == "*" else digits) - 1)
        if op == "-" and b > a:
            a, b = b, a
        if (a, op, b) in seen:
            continue
        seen.add((a, op, b))
        if rng.random() < word_fraction:
            kind = "word"
            question = _WORD[op].format(name=rng.choice(_NAMES), item=rng.choice(_ITEMS), a=a, b=b)
        else:
            kind = "bare"
            question = f"What is {a} {op} {b}?"
        prompt = f"{question} {INSTRUCTION}" if instruction else question
        records.append({"prompt": prompt, "answer": str(_solve(a, op, b)), "data_source": data_source,
                        "extra_info": {"index": len(records), "a": a, "op": op, "b": b, "kind": kind}})
    return records


def split_path(out: str, suffix: str = "val") -> str:
    """train.jsonl -> train.val.jsonl (the held-out file next to `out`)."""
    root, ext = os.path.splitext(out)
    return f"{root}.{suffix}{ext}"


def write_records(records: list[dict], path: str, fmt: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(records), path)
    else:
        with open(path, "w", encoding="utf-8") as fh:
            for r in records:
                fh.write(json.dumps(r) + "\n")


def _fraction(text: str) -> float:
    value = float(text)
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {value}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `verl data arithmetic`."""
    from verl.cli_flags import add_flag

    add_flag(parser, "--n", type=int, default=1000, help="problems in total (train + held-out; default 1000)")
    add_flag(parser, "--out", required=True, help="training file (.jsonl or .parquet); the held-out "
                                                  "split goes next to it as NAME.val.EXT")
    add_flag(parser, "--val_fraction", type=_fraction, default=0.1, help="share of problems held out, in [0, 1) "
                                                                       "(default 0.1)")
    add_flag(parser, "--digits", type=int, default=2, help="operands have up to this many digits (default 2)")
    add_flag(parser, "--ops", default=OPS, help=f"operations to draw from, e.g. '+-' (default '{OPS}')")
    add_flag(parser, "--seed", type=int, default=0, help="random seed (default 0)")
    add_flag(parser, "--data_source", default="arithmetic",
             help="label of these rows; validation reports accuracy per data source")
    add_flag(parser, "--format", choices=("jsonl", "parquet"), default=None,
             help="default: from the --out extension, else jsonl")
    add_flag(parser, "--instruction", action=argparse.BooleanOptionalAction, default=True,
             help=f"end each prompt with '{INSTRUCTION}' (--no-instruction to leave it out)")


def run(args: argparse.Namespace) -> int:
    fmt = args.format or ("parquet" if args.out.lower().endswith(".parquet") else "jsonl")
    try:
        records = generate_arithmetic(args.n, args.digits, args.ops, args.seed, args.instruction,
                                      data_source=args.data_source)
    except ValueError as exc:
        print(f"verl data arithmetic: {exc}", file=sys.stderr)
        return 2
    n_val = int(round(args.n * args.val_fraction))
    train, val = records[: args.n - n_val], records[args.n - n_val:]
    write_records(train, args.out, fmt)
    print(f"wrote {len(train)} problems to {args.out}")
    if val:
        val_path = split_path(args.out)
        write_records(val, val_path, fmt)
        print(f"wrote {len(val)} held-out problems to {val_path}")
    return 0


DESCRIPTION = "Write a synthetic arithmetic prompt set with ground-truth answers (train + held-out files)."


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="verl data arithmetic", description=DESCRIPTION)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
