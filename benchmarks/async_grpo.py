"""Synchronous against asynchronous training on the same work: seconds per step, throughput and GPU
busy fraction of `async_training.max_staleness` 1 and 2 (and 1 with partial rollouts, `--segment-tokens`
per segment) next to the synchronous loop; and, with
--recipe, the held-out accuracy each reaches in the same wall-clock time.

    python benchmarks/async_grpo.py --device cpu --threads 1 --steps 6            # tiny GPT-2, seconds a step
    python benchmarks/async_grpo.py --device cuda --model MODEL --engine vllm --prompts 32 --group 8 \\
        --max-new-tokens 1024 --steps 8                                            # the H200 run
    python benchmarks/async_grpo.py --device cuda --model random:smollm2 --engine vllm --prompts 32 --group 8 \
        --lengths tail:128 --steps 8 --systems sync async-k1 async-k1-stream async-k2-stream   # drawn lengths
    python benchmarks/async_grpo.py --device cuda --recipe examples/arithmetic_grpo.yaml --minutes 4 \\
        --engine vllm --systems sync async-k1                                      # accuracy at equal wall-clock

Response lengths: `--lengths sampled` (the default): a stop string (one sentence) under a large
max_new_tokens, so they vary widely, but each system draws its own (on 2026-12-01 the synchronous run's
longest was 389 tokens, the asynchronous runs' 1024: not the same work). `--lengths tail:M` (vLLM): each
prompt's length is drawn from its token ids (`lengths.drawn_length`: median M, 1 prompt in 16 at 8 M), with
ignore_eos, so every system generates exactly the same tokens' worth; the table gives the median and
maximum per system either way. Systems -stream run async_training.streaming (the next batches' requests
in the engine while the current one's tail decodes; columns prefetched = share of timed batches submitted
ahead, switched = samples per batch that spanned a weight sync). Each system is a fresh trainer
with the same seed, in a process of its own (vLLM and SGLang keep one engine per process), timed
over `--steps` after `--warmup` steps (the wall time between step returns: for async this includes
waiting for the producer); step_s is the mean and tokens_per_s the total over those steps (an
asynchronous run's steps are uneven; step_s_median is also given). The asynchronous systems generate with an engine of their own (the HF
weight copy, or vLLM / SGLang), the synchronous one with its default.

GPU busy: the share of 0.1 s samples of `torch.cuda.utilization()` (NVML's "a kernel ran in the last
sample period", averaged) over the timed steps; needs NVML (the nvidia-ml-py package, which vLLM
brings); without a GPU or NVML the column is empty and the reason is printed.

--recipe: each system trains the recipe for `--minutes` of wall-clock time (training.max_minutes,
validation included) and the table gives its last held-out figure (val/*acc*, the recipe's
validation metric) and the steps it reached.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import common
from lengths import drawn_length  # --lengths tail:M (benchmarks/lengths.py, the benchmarks' lengths in one place)

# -partial: async_training.partial_rollout; -stream: async_training.streaming (vLLM)
SYSTEMS = ("sync", "async-k1", "async-k2", "async-k1-partial", "async-k1-stream", "async-k2-stream")
RESULT_TAG = "ASYNC_RESULT "
PARTS = ("rollout", "async_wait", "old_log_prob", "update_actor", "update_weights")  # timing_s/* of a step
# -stream: the batch's collect (async/stream_*): engine steps, seconds inside them and in the hook between them
# (syncs, submissions), requests in the engine per step; engine_call = rollout/engine_call_s (sync: LLM.generate)
STREAM = ("stream_steps", "stream_step_s", "stream_hook_s", "stream_requests_mean")
DETAIL = ("timing_s/", "actor/oom", "actor/micro", "memory_gb/", "memory/", "rollout/", "async/")  # the JSON's "detail"


def _async_overrides(args, system: str, engine: str) -> dict:
    if system == "sync":
        return {}
    k, _, mode = system[len("async-k"):].partition("-")
    o = {"async_training.enable": "true", "async_training.max_staleness": int(k)}
    if mode == "partial":  # generation in segments, an update published meanwhile used for the rest
        o.update({"async_training.partial_rollout": "true", "async_training.segment_tokens": args.segment_tokens})
    elif mode == "stream":  # the next batches' requests in the engine while this one's tail decodes
        o["async_training.streaming"] = "true"
    if engine == "hf":  # the HF engine generates with the actor's module unless it has a copy of its own
        o["rollout.hf_weight_copy"] = "true"
    return o


def tail_median(args):
    """--lengths tail:M -> M (None for --lengths sampled)."""
    return int(args.lengths.split(":", 1)[1]) if args.lengths.startswith("tail:") else None


def impose_lengths(trainer, median: int) -> None:
    """Every request of the trainer's vLLM engine generates exactly its drawn length (ignore_eos and a
    per-request max_tokens): the work is then the same for every system, whatever the weights say."""
    from verl.rollout.vllm_rollout import VLLMRollout

    engine = trainer.rollout_engine  # the engine itself, under the async lock and the streaming driver
    if not isinstance(engine, VLLMRollout):
        raise SystemExit("--lengths tail:M needs --engine vllm")
    engine.extra_sampling_kwargs = {**engine.extra_sampling_kwargs, "ignore_eos": True}

    def with_lengths(requests, params):
        drawn = []
        for request, p in zip(requests, params):
            q = p.clone()
            q.max_tokens = drawn_length(request["prompt_token_ids"], median)
            drawn.append(q)
        return requests, drawn

    engine.request_hook = with_lengths


def _overrides(args, system: str, out: str) -> list[str]:
    median = tail_median(args)
    model = common.resolve_model(args.model) if args.model.startswith("random:") else args.model
    o = {"model.name": model, "rollout.name": args.engine, "device": args.device, "algorithm.name": "grpo",
         "rollout.n": args.group, "training.batch_size": args.prompts, "training.total_steps": args.warmup + args.steps,
         "rollout.max_new_tokens": 8 * median if median else args.max_new_tokens,
         "rollout.stop": "[]" if median else "['.']", "training.lr": 1e-5,
         "logging.backends": "[jsonl]", "logging.progress_bar": "false", "checkpoint.save_dir": out,
         "data.baseline_prompt": "null", "training.micro_batch_size": args.prompts * args.group}
    o.update(_async_overrides(args, system, args.engine))
    return [f"{k}={v}" for k, v in o.items()] + list(args.verl_set or [])  # --verl-set last: it wins


class GpuBusy:
    """Samples torch.cuda.utilization() every `period` s in a thread while active; `mean()` is the
    busy share (0-1), or None with `why` set when there is no GPU or no NVML."""

    def __init__(self, device: str, period: float = 0.1):
        self.period, self.samples, self.why = period, [], None
        self._stop, self._thread, self._on = threading.Event(), None, threading.Event()
        try:
            import torch

            if not str(device).startswith("cuda") or not torch.cuda.is_available():
                self.why = "no CUDA device"
                return
            torch.cuda.utilization()  # raises without NVML
            self._read = torch.cuda.utilization
        except Exception as exc:  # noqa: BLE001 - reported, not hidden
            self.why = f"torch.cuda.utilization unavailable: {type(exc).__name__}: {exc}"
            return
        self._thread = threading.Thread(target=self._run, daemon=True, name="gpu-busy")
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            if self._on.is_set():
                self.samples.append(self._read() / 100.0)

    def active(self, on: bool) -> None:
        (self._on.set if on else self._on.clear)()

    def close(self) -> None:
        self._stop.set()

    def mean(self):
        return round(statistics.mean(self.samples), 3) if self.samples else None


def run_system(args, system: str) -> dict:
    from verl import create_trainer, load_config

    cfg = load_config(None, _overrides(args, system, tempfile.mkdtemp(prefix=f"async-bench-{system}-")))
    trainer = create_trainer(cfg)
    if tail_median(args):
        impose_lengths(trainer, tail_median(args))
    busy = GpuBusy(args.device)
    seconds, tokens, lengths, stream, parts, timings = [], [], [], [], [], []
    m: dict = {}
    try:
        last = time.perf_counter()
        for k in range(args.warmup + args.steps):
            busy.active(k >= args.warmup)
            with profiled(args, system, k):
                m = trainer.step()
            now = time.perf_counter()
            if k >= args.warmup:
                seconds.append(now - last)
                tokens.append(m["perf/total_tokens"])
                b = trainer.run.last_batch
                lengths += b.attention_mask[:, b.prompt_length:].sum(dim=1).tolist()
                stream.append((m.get("async/stream_prefetched"), m.get("async/stream_switched_samples")))
                parts.append({**{k: m.get(f"timing_s/{k}") for k in PARTS}, **{k: m.get(f"async/{k}") for k in STREAM},
                              "engine_call": m.get("rollout/engine_call_s"),
                              # one engine call per batch: it steps once per token of the batch's longest response
                              "longest": int(b.attention_mask[:, b.prompt_length:].sum(dim=1).max())})
                timings.append({k: v for k, v in m.items() if k.startswith(DETAIL) and isinstance(v, (int, float))})
            last = now
        actor = trainer.actor  # how the update ran: packed or padded, and its token budget per micro-batch
        setup = {"model_dtype": cfg.model.dtype, "packing_mode": getattr(actor, "packing_mode", None),
                 "budget_tokens": getattr(getattr(actor, "budget", None), "tokens", None) or actor.micro.max_tokens}
    finally:
        busy.close()
        trainer.run.close()
    # Totals over the timed steps, not medians: an asynchronous run's steps are uneven (a batch already
    # waiting is handed over at once, the next one not), and only the total says what a run gets done.
    step_s = sum(seconds) / len(seconds)
    return {"system": system, "step_s": round(step_s, 3), "step_s_median": round(statistics.median(seconds), 3),
            "tokens_per_s": round(sum(tokens) / sum(seconds)),
            "gpu_busy": busy.mean(), "gpu_busy_note": busy.why,
            "resp_len_median": statistics.median(lengths), "resp_len_max": max(lengths),
            "staleness_max": m.get("async/staleness_max", 0.0),
            # streaming: the share of timed batches submitted ahead, and samples per batch that spanned a sync
            "prefetched": _mean(p for p, _ in stream), "switched": _mean(w for _, w in stream),
            # where the trainer's step went (means over the timed steps; async: rollout is the wait for the batch)
            **{f"{k}_s": _mean(p[k] for p in parts) for k in PARTS},
            "engine_call_s": _mean(p["engine_call"] for p in parts),
            **{k: _mean(p[k] for p in parts) for k in STREAM},
            "engine_step_ms": _step_ms(parts), **setup,
            # every stage and counter of the step (means over the timed steps), for the JSON only
            "detail": {k: _mean(t.get(k) for t in timings) for k in sorted({k for t in timings for k in t})}}


def profiled(args, system: str, k: int):
    """torch.profiler around step `k` when it is --profile's step (CPU ops and the device's CUDA kernels;
    meant for the sync system, whose step runs in this thread), its op tables written beside --out; else
    nothing."""
    import contextlib

    if args.profile is None or k != args.warmup + args.profile:
        return contextlib.nullcontext()
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])

    @contextlib.contextmanager
    def run():
        with profile(activities=activities, record_shapes=False) as prof:
            yield
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        path = _side_file(args, f"{system}_profile.txt")
        with open(path, "w") as fh:
            for key in ("self_cuda_time_total", "self_cpu_time_total", "cpu_time_total"):
                if key == "self_cuda_time_total" and ProfilerActivity.CUDA not in activities:
                    continue
                fh.write(f"# step {k} of {system}, sorted by {key}\n")
                fh.write(prof.key_averages().table(sort_by=key, row_limit=30, max_name_column_width=70) + "\n\n")
        print(f"profile of step {k}: {path}", file=sys.stderr, flush=True)

    return run()


def _side_file(args, name: str) -> str:
    """A file beside --out's results (or under benchmarks/results): <out stem>_<name>."""
    out = args.out or "benchmarks/results"
    stem = out[:-len(".json")] if out.endswith(".json") else os.path.join(out, "async_grpo")
    os.makedirs(os.path.dirname(stem) or ".", exist_ok=True)
    return f"{stem}_{name}"


def _step_ms(parts):
    """Milliseconds per engine step: the streaming collects' counted steps; without streaming, a batch per
    engine call (sync, plain async), whose call steps once per token of the batch's longest response (step 1
    prefills and draws token 1), so its engine seconds over that length."""
    steps = sum(p["stream_steps"] or 0 for p in parts)
    if steps:
        return round(1000 * sum(p["stream_step_s"] or 0 for p in parts) / steps, 2)
    calls = [p for p in parts if p["engine_call"] is not None]
    steps = sum(p["longest"] for p in calls)
    return round(1000 * sum(p["engine_call"] for p in calls) / steps, 2) if steps else None


def _mean(values):
    values = [v for v in values if v is not None]
    return round(statistics.mean(values), 3) if values else None


def run_recipe(args, system: str) -> dict:
    """The recipe for args.minutes of wall-clock time; the last held-out figure and the steps reached."""
    from verl.config import load_config
    from verl.tracking.plot import pick_val_key, read_metrics
    from verl.trainer.launch import run_training

    out = tempfile.mkdtemp(prefix=f"async-recipe-{system}-")
    over = {"training.max_minutes": args.minutes, "checkpoint.save_dir": out, "logging.progress_bar": "false",
            "logging.backends": "[jsonl]", "device": args.device}
    if args.engine:
        over["rollout.name"] = args.engine
    engine = load_config(args.recipe, [f"{k}={v}" for k, v in over.items()]).rollout.name  # after rollout.name auto
    over.update(_async_overrides(args, system, engine))
    started = time.perf_counter()
    run_training(args.recipe, [f"{k}={v}" for k, v in over.items()])
    rows = read_metrics(out)
    if args.keep:  # the run's small files (not its checkpoints) for curves: --keep DIR/SYSTEM
        keep = os.path.join(args.keep, system)
        os.makedirs(keep, exist_ok=True)
        for name in ("metrics.jsonl", "config.yaml", "samples.jsonl", "text.jsonl", "run_info.json"):
            if os.path.exists(os.path.join(out, name)):
                shutil.copy(os.path.join(out, name), keep)
    key = pick_val_key([rows])
    val = [r for r in rows if key and r.get(key) is not None]
    return {"system": system, "minutes": args.minutes, "wall_s": round(time.perf_counter() - started, 1),
            "steps": max((r["step"] for r in rows if "step" in r), default=0), "val_key": key,
            "val_first": val[0][key] if val else None, "val_last": val[-1][key] if val else None,
            "val_last_step": val[-1]["step"] if val else None, "run_dir": out}


def worker(args) -> dict:
    if args.switch_interval:  # probe: the producer thread (engine steps) and the trainer share the GIL
        sys.setswitchinterval(args.switch_interval)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    return run_recipe(args, args.worker) if args.recipe else run_system(args, args.worker)


def run_isolated(args, system: str, argv: list) -> dict:
    """One system in a child process (its own engine); its result comes back on one tagged line."""
    cmd = [sys.executable, os.path.abspath(__file__), *argv, "--worker", system]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([common.ROOT, os.environ.get("PYTHONPATH", "")]))
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env)
    except subprocess.TimeoutExpired as exc:
        _keep_log(args, system, exc.stdout, exc.stderr)
        return {"system": system, "error": f"timeout after {args.timeout} s"}
    _keep_log(args, system, proc.stdout, proc.stderr)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(RESULT_TAG)]
    if proc.returncode != 0 or not lines:
        return {"system": system, "error": common.failure_summary(proc.returncode, proc.stderr, proc.stdout)}
    return json.loads(lines[-1][len(RESULT_TAG):])


def _keep_log(args, system: str, stdout, stderr) -> None:
    """The system's console beside the results: verl's own lines (micro-batch budgets, out-of-memory
    retries, engine choices) whole, the rest's last 200 lines."""
    text = "\n".join(x.decode(errors="replace") if isinstance(x, bytes) else (x or "") for x in (stdout, stderr))
    lines = text.splitlines()
    ours = [ln for ln in lines if ln.startswith("verl")]
    with open(_side_file(args, f"{system}.log"), "w") as fh:
        fh.write("# lines starting with 'verl'\n" + "\n".join(ours) + "\n# the last 200 lines\n" + "\n".join(lines[-200:]) + "\n")


def parse(argv=None):
    ap = common.arg_parser(__doc__, "device", "threads", "out", model={"default": "tiny:gpt2"},
                           max_new_tokens={"default": 64})
    ap.add_argument("--engine", default=None, choices=["hf", "vllm", "sglang"],
                    help="rollout.name (default: hf, or the recipe's with --recipe)")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS)
    ap.add_argument("--recipe", default=None, help="a config file: compare held-out accuracy at equal wall-clock")
    ap.add_argument("--minutes", type=float, default=4.0, help="--recipe: wall-clock minutes per system")
    ap.add_argument("--segment-tokens", type=int, default=128, help="async-k1-partial: async_training.segment_tokens")
    ap.add_argument("--lengths", default="sampled",
                    help="sampled: responses stop at the first '.' under --max-new-tokens (their lengths are the "
                         "model's); tail:M (vLLM): drawn per prompt, the same for every system, median M and the "
                         "longest 8 M (see drawn_length)")
    ap.add_argument("--keep", default=None, help="--recipe: copy each system's metrics, config and samples to "
                                                 "KEEP/SYSTEM and plot them together in KEEP/dashboard.png")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per system")
    ap.add_argument("--verl-set", nargs="+", default=None, metavar="KEY=VALUE",
                    help="extra verl config overrides for every system, applied last (e.g. "
                         "training.max_tokens_per_micro_batch=16384)")
    ap.add_argument("--profile", type=int, default=None, metavar="K",
                    help="torch.profiler around timed step K (0 = the first after the warm-up) of every system; "
                         "the op tables go to <out>_<system>_profile.txt")
    ap.add_argument("--switch-interval", type=float, default=None,
                    help="a probe, not a verl setting: sys.setswitchinterval(S) in each system's process (Python's "
                         "default 0.005 s: how long a thread waiting for the GIL lets the holder run); do engine "
                         "steps slow down while the trainer thread holds the GIL?")
    ap.add_argument("--worker", default=None, help=argparse_suppress())
    args = ap.parse_args(argv)
    if args.lengths != "sampled" and not (args.lengths.startswith("tail:") and args.lengths[5:].isdigit()
                                          and int(args.lengths[5:]) >= 2):
        ap.error(f"--lengths {args.lengths}: expected sampled or tail:M with M >= 2 tokens")
    if args.engine is None and not args.recipe:
        args.engine = "hf"
    return args


def argparse_suppress():
    import argparse

    return argparse.SUPPRESS


def report(args, argv: list, rows: list, final: bool) -> None:
    """The results table of the systems run so far (the combined dashboard once the last has run)."""
    info = common.machine_info(common.resolve_device(args.device))
    cmd = "python3 benchmarks/async_grpo.py " + " ".join(argv)
    if args.recipe:
        kept = [os.path.join(args.keep, r["system"]) for r in rows if args.keep and "error" not in r]
        if kept and final:  # one dashboard, the systems side by side (held-out accuracy against steps)
            subprocess.run([sys.executable, "-m", "verl.cli", "plot", *kept, "--out",
                            os.path.join(args.keep, "dashboard.png")], check=False, timeout=300)
        cols = ["system", "minutes", "steps", "val_key", "val_first", "val_last", "val_last_step", "wall_s", "error"]
        notes = (f"{args.recipe} on {args.engine or 'its engine'}, {args.minutes} wall-clock minutes per system "
                 f"(training.max_minutes, validation included); val_last = the last held-out figure reached.")
    else:
        base = next((r for r in rows if r["system"] == "sync" and "tokens_per_s" in r), None)
        for r in rows:
            if base and "tokens_per_s" in r:
                r["x_sync"] = round(r["tokens_per_s"] / base["tokens_per_s"], 2)
        cols = ["system", "step_s", "step_s_median", "tokens_per_s", "x_sync", "gpu_busy", "resp_len_median", "resp_len_max",
                "staleness_max", "prefetched", "switched", *[f"{k}_s" for k in PARTS], "engine_call_s",
                *STREAM, "engine_step_ms", "model_dtype", "packing_mode", "budget_tokens", "error"]
        why = next((r.get("gpu_busy_note") for r in rows if r.get("gpu_busy_note")), None)
        if why:
            print(f"gpu_busy not measured: {why}")
        median = tail_median(args)
        work = (f"response lengths drawn per prompt (median {median}, 1 prompt in 16 at {8 * median}; ignore_eos)"
                if median else f"up to {args.max_new_tokens} new tokens (stop at '.')")
        notes = (f"GRPO, {args.model} on {args.engine}, {args.prompts} prompts x {args.group} samples, {work}, "
                 f"step_s = mean and tokens_per_s = total over {args.steps} steps after {args.warmup} "
                 f"warm-up, one process per system; gpu_busy = mean of torch.cuda.utilization() / 100 sampled "
                 f"every 0.1 s over the timed steps" + (f" (not measured: {why})" if why else "") + ".")
    cols = [c for c in cols if c == "system" or any(r.get(c) is not None for r in rows)]
    common.write_results(args.out or "benchmarks/results", "async_grpo", info, rows, cols, extra={"command": cmd},
                         notes=notes)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse(argv)
    if args.worker:
        print(RESULT_TAG + json.dumps(worker(args)), flush=True)
        return 0
    if args.model.startswith("random:"):  # built once here, not inside the first system's timed-out process
        common.resolve_model(args.model)
    rows = []
    for system in args.systems:  # the table is rewritten after each system: a run cut short keeps what it measured
        rows.append(run_isolated(args, system, argv))
        print(json.dumps(rows[-1]), flush=True)
        report(args, argv, rows, final=system == args.systems[-1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
