"""Benchmark regression gate: a new run's figures against the stored baseline of the same card.

    python3 benchmarks/regression_gate.py NEW.json [NEW.json ...]      # compare; exit 1 on a regression
    python3 benchmarks/regression_gate.py --record RESULT.json ...     # make these runs the card's baseline

NEW.json is what `benchmarks/e2e_grpo.py --out DIR` writes (DIR/e2e_grpo.json). Each row (one system on one
work) is matched by its signature: system, work mode, architecture, LoRA rank, prompts x group x tokens,
dtype, the lengths (--lengths realistic; fixed ones, the default, leave the signature as before) and the extra
settings of that run (`--verl-set`, packing, compile, ...). The card is the run's GPU
name (`machine.gpu`: "NVIDIA H100 80GB HBM3" -> h100), or cpu. Baselines live in
benchmarks/baselines/<card>.json, one entry per signature with the figures and the result file they came
from. Flagged:

    step time   median s/step more than 15% above the baseline's (STEP_TOLERANCE)
    peak memory torch's allocator peak (peak_gib) more than 5% above the baseline's (MEMORY_TOLERANCE)

A row without a baseline is listed as such and does not fail the gate; a card without any baseline says how
to record one. Faster or smaller is never a failure (record it to raise the bar).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASELINES = os.path.join(ROOT, "benchmarks", "baselines")
STEP_TOLERANCE = 0.15
MEMORY_TOLERANCE = 0.05
# e2e_grpo.py's arguments that change the work or the speed of a row (the rest: paths, timeouts, logs)
SIGNATURE_ARGS = ("arch", "lora_rank", "prompts", "group", "max_new_tokens", "prompt_words", "dtype", "micro_batch",
                  "verl_set", "packed", "keep_logits", "compile", "param_copy", "vllm_compile", "trl_micro_batch",
                  "real_verl_set", "real_verl_token_budget", "tiny", "threads", "lengths")
# values that mean "not set" for an argument added after baselines were recorded (their rows keep their signature)
SIGNATURE_DEFAULTS = {"lengths": "fixed"}


def card_of(machine: dict) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'h100', 'NVIDIA H200' -> 'h200'; no GPU -> 'cpu'."""
    gpu = machine.get("gpu") or ""
    found = re.search(r"\b([A-Z]\d{2,4})\b", gpu.upper())
    return found.group(1).lower() if found else ("cpu" if not gpu else re.sub(r"\W+", "_", gpu.lower()))


def signature(args: dict, row: dict) -> str:
    """The row's identity across runs: system, work mode and the settings that change its figures."""
    parts = [f"system={row['system']}", f"work={row.get('work') or 'defaults'}"]
    for name in SIGNATURE_ARGS:
        value = args.get(name)
        if value not in (None, False, 0, [], "") and value != SIGNATURE_DEFAULTS.get(name):
            parts.append(f"{name}={json.dumps(value, sort_keys=True)}")
    return " ".join(parts)


def read_run(path: str) -> tuple[str, dict]:
    """(card, {signature: figures}) of one e2e_grpo result file."""
    with open(path, encoding="utf-8") as fh:
        run = json.load(fh)
    if run.get("benchmark") != "e2e_grpo" or "rows" not in run:
        raise SystemExit(f"error: {path}: not an e2e_grpo result file (no 'benchmark': 'e2e_grpo' with rows)")
    card = card_of(run.get("machine") or {})
    figures = {}
    for row in run["rows"]:
        if row.get("step_s") is None:  # a system that failed in that run: nothing to compare
            continue
        figures[signature(run.get("args") or {}, row)] = {
            "step_s": float(row["step_s"]), "peak_gib": row.get("peak_gib"),
            "source": os.path.relpath(os.path.abspath(path), ROOT), "date": (run.get("machine") or {}).get("date")}
    return card, figures


def baseline_path(card: str) -> str:
    return os.path.join(BASELINES, f"{card}.json")


def load_baseline(card: str) -> dict:
    path = baseline_path(card)
    if not os.path.isfile(path):
        return {}
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def compare(baseline: dict, new: dict) -> list[dict]:
    """One verdict per new row: figures side by side, relative changes, and which limits they pass.
    change = new / baseline - 1 (positive: slower or larger)."""
    out = []
    for sig, fig in sorted(new.items()):
        base = baseline.get(sig)
        row = {"signature": sig, "new": fig, "base": base, "problems": []}
        if base is not None:
            row["step_change"] = fig["step_s"] / base["step_s"] - 1.0
            if row["step_change"] > STEP_TOLERANCE:
                row["problems"].append(f"step time +{row['step_change']:.1%} (limit +{STEP_TOLERANCE:.0%})")
            if fig.get("peak_gib") is not None and base.get("peak_gib"):
                row["memory_change"] = fig["peak_gib"] / base["peak_gib"] - 1.0
                if row["memory_change"] > MEMORY_TOLERANCE:
                    row["problems"].append(f"peak memory +{row['memory_change']:.1%} (limit +{MEMORY_TOLERANCE:.0%})")
        out.append(row)
    return out


def render(card: str, verdicts: list[dict]) -> str:
    lines = [f"card {card}: baseline benchmarks/baselines/{card}.json", "",
             "| row | s/step baseline | s/step new | change | peak GiB baseline | peak GiB new | change | verdict |",
             "|---|---|---|---|---|---|---|---|"]
    for v in verdicts:
        base, new = v["base"] or {}, v["new"]

        def num(x, fmt="{:.3f}"):
            return "-" if x is None else fmt.format(x)

        verdict = "no baseline" if v["base"] is None else ("REGRESSION: " + "; ".join(v["problems"])
                                                          if v["problems"] else "ok")
        lines.append(f"| {v['signature']} | {num(base.get('step_s'))} | {num(new['step_s'])} | "
                     f"{num(v.get('step_change'), '{:+.1%}')} | {num(base.get('peak_gib'), '{:.2f}')} | "
                     f"{num(new.get('peak_gib'), '{:.2f}')} | {num(v.get('memory_change'), '{:+.1%}')} | {verdict} |")
    return "\n".join(lines)


def record(paths: list[str]) -> None:
    """Make these runs' rows the baseline of their card (other signatures stay)."""
    by_card: dict = {}
    for path in paths:
        card, figures = read_run(path)
        by_card.setdefault(card, {}).update(figures)
    os.makedirs(BASELINES, exist_ok=True)
    for card, figures in sorted(by_card.items()):
        baseline = load_baseline(card)
        baseline.update(figures)
        with open(baseline_path(card), "w", encoding="utf-8") as fh:
            json.dump(baseline, fh, indent=1, sort_keys=True)
            fh.write("\n")
        print(f"benchmarks/baselines/{card}.json: {len(figures)} rows recorded ({len(baseline)} in all)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", help="e2e_grpo.json files of the new run(s)")
    parser.add_argument("--record", action="store_true", help="store these runs as their card's baseline")
    args = parser.parse_args(argv)
    if args.record:
        record(args.results)
        return 0
    failed = False
    for path in args.results:
        card, figures = read_run(path)
        baseline = load_baseline(card)
        if not baseline:
            print(f"{path}: no baseline for card {card} yet; record one with "
                  f"`python3 benchmarks/regression_gate.py --record {path}`")
            continue
        verdicts = compare(baseline, figures)
        print(f"{path}\n{render(card, verdicts)}\n")
        failed |= any(v["problems"] for v in verdicts)
    print("regressions found" if failed else "no regression")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
