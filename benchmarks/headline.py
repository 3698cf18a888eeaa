"""The headline results, rendered from the stored result files that benchmarks/results/headline.yaml names:
the speed table (kept in README.md and docs/performance.md between `<!-- results:begin -->` and
`<!-- results:end -->`) and the learning table (README.md, `<!-- learning:... -->`). One source:
tests/cli_docs/test_readme_docs.py fails when a page's copy differs from what the files say.

    python3 benchmarks/headline.py            # print the table
    python3 benchmarks/headline.py --write    # rewrite the table in README.md and docs/performance.md

Per row: the card, the work, verl's median s/step, the fastest TRL configuration in the same run (TRL with
vLLM colocate on a GPU), real verl's when that run has it, verl's speed-up in tokens/s over each, and the
command that reproduces the run. Ratios compare systems of the same run only (the machines are noisy).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results")
SPEC = os.path.join(RESULTS, "headline.yaml")
# page -> (the prefix of its links to the repository root, the blocks it holds)
PAGES = {"README.md": ("", ("results", "learning")), "docs/performance.md": ("../", ("results",))}


def markers(block: str) -> tuple[str, str]:
    return f"<!-- {block}:begin -->", f"<!-- {block}:end -->"


def _card(machine: dict) -> str:
    if machine.get("device") == "cpu":
        return f"CPU, {machine.get('cpu_count')} cores"
    return str(machine.get("gpu", "GPU")).removeprefix("NVIDIA ")


def _fastest(rows: list[dict], prefix: str) -> dict | None:
    """The fastest row (most tokens/s) of the systems named `prefix`..., with a measured step."""
    found = [r for r in rows if str(r.get("system", "")).startswith(prefix) and r.get("tokens_per_s")]
    return max(found, key=lambda r: r["tokens_per_s"], default=None)


def row_figures(entry: dict) -> dict:
    """One spec entry's figures from its result file: card, verl / TRL / real verl s/step and ratios."""
    with open(os.path.join(RESULTS, entry["results"]), encoding="utf-8") as fh:
        data = json.load(fh)
    rows = data["rows"]
    verl = _fastest([r for r in rows if r.get("system", "").startswith("verl-")], "verl-")
    if verl is None:
        raise ValueError(f"{entry['results']}: no verl row with a measured step")
    trl, real = _fastest(rows, "trl"), _fastest(rows, "real-verl")
    out = {"card": _card(data.get("machine", {})), "verl_s": verl["step_s"], "verl_system": verl["system"]}
    for name, peer in (("trl", trl), ("real", real)):
        out[f"{name}_s"] = peer["step_s"] if peer else None
        out[f"{name}_system"] = peer["system"] if peer else None
        out[f"x_{name}"] = round(verl["tokens_per_s"] / peer["tokens_per_s"], 2) if peer else None
    return out


def _s(value) -> str:
    return "-" if value is None else f"{value:.3g}"


def _spec() -> dict:
    with open(SPEC, encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def _link(link_prefix: str, stored: str) -> str:
    """A link to a run's table (its .md beside the JSON when stored, else the file itself)."""
    table = os.path.splitext(stored)[0] + ".md"
    shown = table if stored.endswith(".json") and os.path.exists(os.path.join(RESULTS, table)) else stored
    return f"[result]({link_prefix}benchmarks/results/{shown})"


def render_speed(link_prefix: str = "") -> str:
    """The speed table; links to result files start with `link_prefix` (the page's way to the root)."""
    lines = ["| card | work | mode | verl s/step | TRL s/step | real verl s/step | verl's speed-up (tokens/s) | reproduce |",
             "|---|---|---|---|---|---|---|---|"]
    for entry in _spec()["speed"]:
        f = row_figures(entry)
        trl = _s(f["trl_s"]) + (f" ({f['trl_system']})" if f["trl_system"] not in (None, "trl-vllm") else "")
        ups = [f"{f['x_trl']}x TRL" if f["x_trl"] else "", f"{f['x_real']}x real verl" if f["x_real"] else ""]
        lines.append(f"| {f['card']} | {entry['work']} | {entry['mode']} | {_s(f['verl_s'])} | {trl} | "
                     f"{_s(f['real_s'])} | {', '.join(u for u in ups if u)} | `{entry['command']}` "
                     f"({_link(link_prefix, entry['results'])}) |")
    return "\n".join(lines)


def accuracy_at(metrics_path: str, at_step: int | None) -> tuple[float, int, float]:
    """(accuracy at step 0, the step read, accuracy there) from a run's metrics.jsonl: val/all/acc@1 at
    `at_step`, or at its last validation."""
    with open(os.path.join(RESULTS, metrics_path), encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    val = {r["step"]: r["val/all/acc@1"] for r in rows if r.get("val/all/acc@1") is not None}
    if 0 not in val:
        raise ValueError(f"{metrics_path}: no validation at step 0")
    step = max(val) if at_step is None else at_step
    if step not in val:
        raise ValueError(f"{metrics_path}: no validation at step {step}")
    return val[0], step, val[step]


def render_learning(link_prefix: str = "") -> str:
    """Held-out accuracy before and after training, read from the runs' own metrics."""
    lines = ["| card | recipe | held-out accuracy, step 0 | after | reproduce |", "|---|---|---|---|---|"]
    for entry in _spec()["learning"]:
        before, step, after = accuracy_at(entry["metrics"], entry.get("at_step"))
        lines.append(f"| {entry['card']} | {entry['recipe']} | {before:.1%} | **{after:.1%}** (step {step}) | "
                     f"`{entry['command']}` ({_link(link_prefix, entry['metrics'])}) |")
    return "\n".join(lines)


RENDER = {"results": render_speed, "learning": render_learning}


def embedded(text: str, block: str = "results") -> str | None:
    """The table a page holds between `block`'s markers (None: no markers)."""
    begin, end = markers(block)
    if begin not in text or end not in text:
        return None
    return text.split(begin, 1)[1].split(end, 1)[0].strip("\n")


def write(page: str) -> bool:
    prefix, blocks = PAGES[page]
    path = os.path.join(ROOT, page)
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    new = text
    for block in blocks:
        begin, end = markers(block)
        if embedded(new, block) is None:
            raise ValueError(f"{page}: no {begin} ... {end} block to fill")
        head, rest = new.split(begin, 1)
        new = f"{head}{begin}\n{RENDER[block](prefix)}\n{end}{rest.split(end, 1)[1]}"
    if new != text:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(new)
    return new != text


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the tables in " + " and ".join(PAGES))
    args = parser.parse_args(argv)
    if not args.write:
        print(render_speed() + "\n\n" + render_learning())
        return 0
    for page in PAGES:
        try:
            print(f"{page}: {'rewritten' if write(page) else 'unchanged'}")
        except (OSError, ValueError) as exc:
            print(f"headline: {exc}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
