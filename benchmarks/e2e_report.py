"""benchmarks/e2e_grpo.py's report: one row per (system, work) from a worker's step records, the ratios
against the peers within the same work mode, the table; and `merge`, which combines the result JSONs of
runs on separate machine starts into one table:

    python benchmarks/e2e_report.py merge run1/e2e_grpo.json run2/e2e_grpo.json --out merged/

A merged row's step_s is the median of the runs' medians, runs_min_s / runs_max_s the spread of those
medians across runs, step_min_s / step_max_s the spread of every timed step of every run.

Floors (benchmarks/floor.py): every row carries its step's floor quantities (decode bytes, update FLOPs, sync
bytes, from its own recorded lengths), and on a known card the share of each stage's floor it reaches:
gen_floor_pct (rollout_s), update_mfu_pct (update_s: the update's MFU), sync_floor_pct (sync_s)."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402
import floor  # noqa: E402
import lengths  # noqa: E402

COLUMNS = ["system", "work", "step_s", "step_min_s", "step_max_s", "step_iqr_s", "steps_timed", "engine_logprob_steps",
           "logprob_diff", "is_ratio_p999", "runs", "runs_min_s", "runs_max_s", "tokens_per_step", "tokens_per_s",
           "x_trl_vllm", "x_real_verl", "x_trl", "x_best_trl", "completion_len", "resp_len_median", "at_max_share",
           "rollout_s", "engine_call_s", "around_engine_s", "old_logprob_s", "update_s", "sync_s", "gen_floor_pct",
           "update_mfu_pct", "sync_floor_pct", "sleep_s", "wake_s", "freed_gib", "peak_gib", "rollout_gib",
           "update_gib", "device_rollout_gib", "device_update_gib", "error"]
# the engine-vs-actor mismatch columns and the step metrics they come from
MISMATCH = {"logprob_diff": "rollout/logprob_diff", "is_ratio_p999": "rollout/is_ratio_p999"}


def spread(values: list[float]) -> dict:
    """Median, min, max and interquartile range (statistics.quantiles, 'inclusive': defined from 2 values on)."""
    if not values:
        raise ValueError("no timed steps")
    q = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else [values[0]] * 3
    return dict(median=statistics.median(values), min=min(values), max=max(values), iqr=q[2] - q[0])


def summarize(system: str, result: dict, args) -> dict:
    steps = result["steps"][args.warmup:]
    walls = spread([s["wall_s"] for s in steps])
    wall = walls["median"]
    tokens = statistics.median(s["tokens"] for s in steps)
    row = dict(system=system, step_s=round(wall, 3), step_min_s=round(walls["min"], 3),
               step_max_s=round(walls["max"], 3), step_iqr_s=round(walls["iqr"], 3), steps_timed=len(steps),
               tokens_per_step=round(tokens), tokens_per_s=round(tokens / wall),
               completion_len=round(statistics.median(s.get("completion_len", 0) for s in steps), 1))
    if steps and steps[0].get("stages"):  # median seconds of each stage of the step
        names = steps[0]["stages"].keys()
        med = {k: round(statistics.median(s["stages"].get(k, 0.0) for s in steps), 3) for k in names}
        row.update(rollout_s=med.get("rollout"), old_logprob_s=med.get("old_log_prob"),
                   update_s=med.get("update_actor", med.get("rest")), sync_s=med.get("update_weights"), stages=med)
    if any("engine" in s for s in steps):  # verl on vLLM/SGLang: the timed steps whose engine returned log-probs
        # (their check, rollout/logprob_diff): the like-for-like caption says every step, defaults 1 in 10
        row["engine_logprob_steps"] = sum("rollout/logprob_diff" in s.get("engine", {}) for s in steps)
        # the engine-vs-actor mismatch (mean |log pi_engine - log pi_actor| a token, and the 99.9th percentile of
        # pi_actor / pi_engine): medians over the steps that measured it, not over every step
        for col, key in MISMATCH.items():
            vals = [s["engine"][key] for s in steps if key in s.get("engine", {})]
            if vals:
                row[col] = round(statistics.median(vals), 4)
    if steps and steps[0].get("engine"):  # verl-vllm: sleep/wake seconds and memory freed, log-prob diff
        names = steps[0]["engine"].keys()
        row["engine"] = {k: round(statistics.median(s["engine"].get(k, 0.0) for s in steps), 3) for k in names}
        row.update(sleep_s=row["engine"].get("rollout/sleep_s"), wake_s=row["engine"].get("rollout/wake_s"),
                   freed_gib=row["engine"].get("rollout/sleep_freed_gib"),
                   engine_call_s=row["engine"].get("rollout/engine_call_s"),
                   around_engine_s=row["engine"].get("rollout/around_engine_s"))
    peaks = [s["peak_gib"] for s in result["steps"] if s.get("peak_gib") is not None]
    if peaks:
        row["peak_gib"] = max(peaks)
    if steps and steps[0].get("memory"):  # verl on CUDA: the largest of each stage's peaks over the steps
        names = set().union(*(s["memory"] for s in result["steps"]))
        row["memory"] = {k: max(s["memory"].get(k, 0.0) for s in result["steps"]) for k in sorted(names)}
        row.update(rollout_gib=row["memory"].get("rollout"), update_gib=row["memory"].get("update_actor"),
                   device_rollout_gib=row["memory"].get("device/rollout"),
                   device_update_gib=row["memory"].get("device/update_actor"))
    if result.get("gen_probe"):
        row["gen_probe"] = result["gen_probe"]
    if "arch" in vars(args):
        row.update(step_floor_work(steps, row, args))
    return row


def step_floor_work(steps: list[dict], row: dict, args) -> dict:
    """The row's floor quantities (floor.step_work: decode bytes, update FLOPs, sync bytes; medians over the
    timed steps) from each step's own [prompt, response] lengths where the worker recorded them ("measured"),
    else from the row's mean lengths ("nominal": n sequences of tokens_per_step / n tokens, completion_len of
    them response); with measured lengths also their median, maximum and share at max_new_tokens."""
    cfg = common.hf_config(args.arch)
    rank = getattr(args, "lora_rank", 0) or 0
    measured = [s["lengths"] for s in steps if s.get("lengths")]
    out = {}
    if measured and len(measured) == len(steps):
        works = [floor.step_work(cfg, [p for p, _ in ls], [r for _, r in ls], rank) for ls in measured]
        stats = lengths.length_stats([r for ls in measured for _, r in ls], args.max_new_tokens)
        out.update(resp_len_median=stats["resp_len_median"], at_max_share=stats["at_max_share"],
                   resp_len_max=stats["resp_len_max"],
                   prompt_len_mean=round(statistics.mean(p for ls in measured for p, _ in ls), 1))
        source = "measured"
    else:
        n = args.prompts * args.group
        resp = max(1, round(row.get("completion_len") or args.max_new_tokens))
        prompt = max(0, round(row["tokens_per_step"] / n) - resp)
        works = [floor.step_work(cfg, [prompt] * n, [resp] * n, rank)]
        source = "nominal"
    out["floor_work"] = dict({k: statistics.median(w[k] for w in works) for k in works[0]}, lengths=source)
    return out


def add_floors(rows: list[dict], gpu_name) -> None:
    """Each row's floors on the card (floor.floors of its floor_work) and the share of each a stage reaches:
    gen_floor_pct = 100 floor / rollout_s, update_mfu_pct = 100 floor / update_s (the update's MFU: its FLOPs
    over update_s at the bf16 peak), sync_floor_pct = 100 floor / sync_s. Nothing without a known card."""
    card = floor.card(gpu_name)
    if card is None:
        return
    for r in rows:
        if not r.get("floor_work"):
            continue
        f = floor.floors(r["floor_work"], card)
        r.update(gen_floor_s=round(f["generation"], 4), update_floor_s=round(f["update"], 4),
                 sync_floor_s=round(f["sync"], 4))
        for col, key, stage in (("gen_floor_pct", "generation", "rollout_s"), ("update_mfu_pct", "update", "update_s"),
                                ("sync_floor_pct", "sync", "sync_s")):
            frac = floor.fraction(f[key], r.get(stage))
            r[col] = round(100 * frac, 1) if frac is not None else None


def floor_notes(rows: list[dict], gpu_name) -> str:
    """The floors behind the *_pct columns, one line a row (benchmarks/floor.py has the formulas)."""
    card = floor.card(gpu_name)
    if card is None:
        return ""
    lines = [f"Floors on the {card.name} ({card.hbm_bytes_s / 1e12:g} TB/s HBM, {card.bf16_flops / 1e12:g} TFLOP/s "
             f"dense bf16; benchmarks/floor.py): generation = bytes every engine step reads (weights + KV cache) / "
             f"HBM bandwidth, summed over the steps; update = its FLOPs (forward + backward; LoRA: forward + "
             f"activation gradients + the adapters) / peak, so update_mfu_pct is its MFU; weight sync = a "
             f"device-to-device copy of the changed bf16 weights (read + write) / HBM bandwidth. Each row's floors "
             f"come from its own lengths; the *_pct columns are floor / measured stage seconds (TRL's update_s is "
             f"the rest of its step besides generation and sync: rewards and its bookkeeping included).", ""]
    for r in rows:
        w = r.get("floor_work")
        if not w or r.get("gen_floor_s") is None:
            continue
        lines.append(f"- {r['system']} ({r.get('work', 'defaults')}, {w['lengths']} lengths): generation "
                     f"{r['gen_floor_s']:.3f} s ({w['decode_bytes'] / 1e12:.2f} TB), "
                     f"update {r['update_floor_s']:.3f} s "
                     f"({w['update_flops'] / 1e12:.1f} TFLOP), sync {r['sync_floor_s']:.4f} s "
                     f"({w['sync_bytes'] / 1e9:.2f} GB)"
                     + (f"; responses: median {r['resp_len_median']}, max {r['resp_len_max']}, "
                        f"{100 * r['at_max_share']:.1f}% at the maximum, prompts {r['prompt_len_mean']} tokens on "
                        f"average" if r.get("resp_len_median") is not None else ""))
    return "\n".join(lines)


def add_ratios(rows: list[dict]) -> None:
    """x_<peer> = tokens/s over that peer's row of the SAME work mode (a defaults row is never divided by a
    like-for-like one)."""
    for work in {r.get("work", "defaults") for r in rows}:
        same = [r for r in rows if r.get("work", "defaults") == work and "tokens_per_s" in r]
        trl_rows = [r for r in same if r["system"].startswith("trl")]
        refs = {"x_trl": next((r for r in trl_rows if r["system"] == "trl"), None),
                "x_trl_vllm": next((r for r in trl_rows if r["system"] == "trl-vllm"), None),
                "x_best_trl": max(trl_rows, key=lambda r: r["tokens_per_s"]) if trl_rows else None,
                "x_real_verl": next((r for r in same if r["system"] == "real-verl"), None)}
        for r in same:
            for key, ref in refs.items():
                if ref is not None:
                    r[key] = round(r["tokens_per_s"] / ref["tokens_per_s"], 2)


def table_columns(rows: list[dict]) -> list[str]:
    return [c for c in COLUMNS if c in ("system", "error") or any(r.get(c) is not None for r in rows)]


def caption_notes(rows: list[dict]) -> str:
    """What each row computed, one line per (system, work) (the captions are too long for a table column)."""
    lines = [f"- {r['system']} ({r.get('work', 'defaults')}): {r['caption']}" for r in rows if r.get("caption")]
    for r in rows:  # TRL's generation call against its own engine call replayed (trl_generation_probe.py)
        if r.get("gen_probe"):
            lines.append(f"- {r['system']} ({r.get('work', 'defaults')}) generation probe: "
                         + ", ".join(f"{k} {v}" for k, v in r["gen_probe"].items() if k != "sampling_params"))
    return "What each row computed:\n\n" + "\n".join(lines)


def profile_stages(row: dict) -> dict:
    """A row's step in three parts every system reports alike (seconds, medians): generation (rollout_s), weight
    sync (sync_s) and the rest of the step (the update with rewards, advantages, engine sleep/wake and bookkeeping:
    TRL times those together, as its 'rest')."""
    gen, sync = row.get("rollout_s") or 0.0, row.get("sync_s") or 0.0
    return {"generation": gen, "weight sync": sync, "update and the rest": round(row["step_s"] - gen - sync, 3)}


def stage_profile(rows: list[dict], ours: str = "verl-vllm") -> str:
    """For each work mode, our row's stages (profile_stages) beside each peer's, the stages
    where ours is behind, and the ceiling: the step-time ratio ours would reach if everything but its generation
    took no time, peer step_s / our rollout_s. Both sides drive the same vLLM in these works, so a goal above
    the ceiling cannot be met by faster training code; the line says so instead of leaving a missed ratio
    unexplained. Where our row has its update floor (add_floors: the update at 100% MFU), also the best
    ratio with that update and nothing else besides the generation, and our update's share of the peak rate."""
    lines = []
    for work in sorted({r.get("work", "defaults") for r in rows}):
        same = [r for r in rows if r.get("work", "defaults") == work and r.get("step_s") is not None]
        mine = next((r for r in same if r["system"] == ours), None)
        if mine is None or not mine.get("rollout_s"):
            continue
        floor_s = mine.get("update_floor_s")
        for peer in (r for r in same if r is not mine and r.get("rollout_s")):
            a, b = profile_stages(mine), profile_stages(peer)
            behind = [k for k in a if a[k] > b[k]]
            lines.append(f"- {work}, {ours} vs {peer['system']} (s a step, ours first): "
                         + "; ".join(f"{k} {a[k]:.2f} vs {b[k]:.2f}" for k in a)
                         + f"; step {mine['step_s']:.2f} vs {peer['step_s']:.2f}. Behind in: "
                         + (", ".join(behind) or "no stage")
                         + (f" (our weight sync holds the sleeping engine's wake-up, {mine['wake_s']:.2f} s with the "
                            f"reload, and the rest its sleep, {mine.get('sleep_s') or 0:.2f} s)" if mine.get("wake_s") else "")
                         + f". Ceiling (ours with only its generation left): {peer['step_s'] / mine['rollout_s']:.2f}x"
                         + (f"; with its update at the GPU's peak bf16 rate ({floor_s:.2f} s; ours runs at "
                            f"{100 * floor_s / mine['update_s']:.0f}% of it) and no sync: "
                            f"{peer['step_s'] / (mine['rollout_s'] + floor_s):.2f}x"
                            if floor_s and mine.get("update_s") else ""))
    return ("Stage profile:\n\n" + "\n".join(lines)) if lines else ""


def merge_rows(results: list[dict]) -> list[dict]:
    """Rows of several result JSONs (each {"rows": [...]}, one per machine start) by (system, work): step_s the
    median of the runs' medians, runs_min_s / runs_max_s their spread, step_min_s / step_max_s the extremes
    of all timed steps, stage columns the median over runs; tokens_per_s from the merged step; ratios redone."""
    groups: dict[tuple, list[dict]] = {}
    for res in results:
        for r in res["rows"]:
            if "step_s" in r:
                groups.setdefault((r["system"], r.get("work", "defaults")), []).append(r)
    out = []
    for (system, work), rs in groups.items():
        step = statistics.median(r["step_s"] for r in rs)
        tokens = statistics.median(r["tokens_per_step"] for r in rs)
        row = dict(system=system, work=work, step_s=round(step, 3), runs=len(rs),
                   runs_min_s=min(r["step_s"] for r in rs), runs_max_s=max(r["step_s"] for r in rs),
                   step_min_s=min(r.get("step_min_s", r["step_s"]) for r in rs),
                   step_max_s=max(r.get("step_max_s", r["step_s"]) for r in rs),
                   steps_timed=sum(r.get("steps_timed", 0) for r in rs),
                   tokens_per_step=round(tokens), tokens_per_s=round(tokens / step))
        for col in ("rollout_s", "engine_call_s", "around_engine_s", "old_logprob_s", "update_s", "sync_s",
                    "sleep_s", "wake_s", "completion_len", *MISMATCH):
            vals = [r[col] for r in rs if r.get(col) is not None]
            if vals:  # the mismatch to 4 places, as summarize rounds it
                row[col] = round(statistics.median(vals), 4 if col in MISMATCH else 3)
        works = [r["floor_work"] for r in rs if r.get("floor_work")]
        if works:  # the floor quantities: medians over the runs (their lengths' kind from the first)
            row["floor_work"] = dict({k: statistics.median(w[k] for w in works) for k in
                                      ("decode_bytes", "update_flops", "sync_bytes")}, lengths=works[0]["lengths"])
        for col in ("resp_len_median", "resp_len_max", "at_max_share", "prompt_len_mean"):
            vals = [r[col] for r in rs if r.get(col) is not None]
            if vals:
                row[col] = statistics.median(vals)
        if any("engine_logprob_steps" in r for r in rs):
            row["engine_logprob_steps"] = sum(r.get("engine_logprob_steps", 0) for r in rs)
        captions = {r.get("caption") for r in rs}
        if len(captions) > 1:  # runs of different work under one name would make a meaningless median
            raise ValueError(f"{system} ({work}): the runs' captions differ: {sorted(map(str, captions))}")
        row["caption"] = captions.pop()
        out.append(row)
    add_ratios(out)
    return out


def merge_main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description="combine e2e_grpo result JSONs of separate machine starts")
    ap.add_argument("command", choices=["merge"])
    ap.add_argument("results", nargs="+", help="e2e_grpo.json files, one per run")
    ap.add_argument("--out", default=None, help="folder (or .json file) for the merged table")
    args = ap.parse_args(argv)
    results = [json.load(open(p)) for p in args.results]
    rows = merge_rows(results)
    machines = [r.get("machine", {}) for r in results]
    info = dict(machines[0], date=" / ".join(str(m.get("date")) for m in machines),
                command="python benchmarks/e2e_report.py merge " + " ".join(args.results))
    add_floors(rows, machines[0].get("gpu"))
    notes = (f"Merged from {len(results)} runs ({', '.join(args.results)}): step_s = median of the runs' median "
             f"steps; runs_min_s-runs_max_s = the spread of those medians; step_min_s-step_max_s = of every timed "
             f"step; ratios within one work mode.")
    common.write_results(args.out, "e2e_grpo_merged", info, rows, table_columns(rows),
                         notes=notes + "\n\n" + caption_notes(rows) + "\n\n" + floor_notes(rows, machines[0].get("gpu"))
                         + "\n\n" + stage_profile(rows),
                         extra=dict(sources=args.results))
    return rows


if __name__ == "__main__":
    merge_main()
