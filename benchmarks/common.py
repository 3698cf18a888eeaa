"""The one harness of the benchmarks: machine facts, real architecture configs with random
weights, FLOP counting, timing (`timed`, `timed_interleaved`), the shared command-line flags
(`arg_parser`) and the results writer (`write_results`: a table, JSON and Markdown).

Every benchmark runs on a CPU with `--device cpu --tiny` (small sizes, seconds) and on a GPU
with real sizes. Figures are only comparable within one run: each script measures all its
variants in the same process, on the same inputs.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from typing import Callable, Optional

import torch

from floor import flop_terms  # noqa: F401  (the one count of a model's matmul weights)
from gc_probe import GcTally
from synthetic_tokenizer import synthetic_tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# Dense bf16 tensor-core peaks (no sparsity), FLOP/s, by datasheet.
PEAK_BF16 = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A10G": 125e12, "4090": 165e12}

# Architecture configs of real models (from their config.json), built with random weights.
ARCHS = {
    "smollm2-135m": dict(model_type="llama", hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                         num_attention_heads=9, num_key_value_heads=3, vocab_size=49152, tie_word_embeddings=True,
                         max_position_embeddings=8192, rope_theta=100000.0, rms_norm_eps=1e-5, head_dim=64),
    "qwen2-0.5b": dict(model_type="qwen2", hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                       num_attention_heads=14, num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True,
                       max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6),
    "qwen2-1.5b": dict(model_type="qwen2", hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                       num_attention_heads=12, num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True,
                       max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6),
    "qwen2.5-3b": dict(model_type="qwen2", hidden_size=2048, intermediate_size=11008, num_hidden_layers=36,
                       num_attention_heads=16, num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True,
                       max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6),
    "qwen2-7b": dict(model_type="qwen2", hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                     num_attention_heads=28, num_key_value_heads=4, vocab_size=152064, tie_word_embeddings=False,
                     max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6),
    "qwen2.5-14b": dict(model_type="qwen2", hidden_size=5120, intermediate_size=13824, num_hidden_layers=48,
                        num_attention_heads=40, num_key_value_heads=8, vocab_size=152064, tie_word_embeddings=False,
                        max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6),
    "qwen2.5-32b": dict(model_type="qwen2", hidden_size=5120, intermediate_size=27648, num_hidden_layers=64,
                        num_attention_heads=40, num_key_value_heads=8, vocab_size=152064, tie_word_embeddings=False,
                        max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6),
    # Mixture-of-experts decoders (docs/moe.md). qwen3-moe-1.5b is a shape of our own, Qwen3-MoE-like at about
    # 1.5B parameters (0.4B active: 32 experts, top-4) for the (b)-style comparison; the others are the real
    # models' shapes: OLMoE-1B-7B, Qwen1.5-MoE-A2.7B (14.3B, with its shared expert) and Qwen3-30B-A3B.
    "qwen3-moe-1.5b": dict(model_type="qwen3_moe", hidden_size=1024, intermediate_size=3072, moe_intermediate_size=512,
                           num_hidden_layers=24, num_attention_heads=16, num_key_value_heads=4, head_dim=128,
                           num_experts=32, num_experts_per_tok=4, norm_topk_prob=True, vocab_size=151936,
                           tie_word_embeddings=True, max_position_embeddings=32768, rope_theta=1000000.0,
                           rms_norm_eps=1e-6),
    "olmoe-1b-7b": dict(model_type="olmoe", hidden_size=2048, intermediate_size=1024, num_hidden_layers=16,
                        num_attention_heads=16, num_key_value_heads=16, num_experts=64, num_experts_per_tok=8,
                        norm_topk_prob=False, vocab_size=50304, tie_word_embeddings=False,
                        max_position_embeddings=4096, rope_theta=10000.0, rms_norm_eps=1e-5),
    "qwen1.5-moe-a2.7b": dict(model_type="qwen2_moe", hidden_size=2048, intermediate_size=5632,
                              moe_intermediate_size=1408, shared_expert_intermediate_size=5632, num_hidden_layers=24,
                              num_attention_heads=16, num_key_value_heads=16, num_experts=60, num_experts_per_tok=4,
                              norm_topk_prob=False, vocab_size=151936, tie_word_embeddings=False,
                              max_position_embeddings=8192, rope_theta=1000000.0, rms_norm_eps=1e-6),
    "qwen3-30b-a3b": dict(model_type="qwen3_moe", hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
                          num_hidden_layers=48, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
                          num_experts=128, num_experts_per_tok=8, norm_topk_prob=True, vocab_size=151936,
                          tie_word_embeddings=False, max_position_embeddings=40960, rope_theta=1000000.0,
                          rms_norm_eps=1e-6),
    # Tiny stand-ins for --tiny runs on a CPU (same code paths, seconds).
    "tiny-qwen2": dict(model_type="qwen2", hidden_size=128, intermediate_size=384, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, vocab_size=4096, tie_word_embeddings=True,
                       max_position_embeddings=4096, rope_theta=10000.0, rms_norm_eps=1e-6),
    "tiny-llama": dict(model_type="llama", hidden_size=192, intermediate_size=512, num_hidden_layers=4,
                       num_attention_heads=3, num_key_value_heads=1, vocab_size=8192, tie_word_embeddings=True,
                       max_position_embeddings=4096, rope_theta=10000.0, rms_norm_eps=1e-5, head_dim=64),
}


def hf_config(arch: str):
    from transformers import AutoConfig

    spec = dict(ARCHS[arch])
    model_type = spec.pop("model_type")
    return AutoConfig.for_model(model_type, **spec)


def build_model(arch: str, device, dtype=torch.float32, attn: str = "sdpa") -> torch.nn.Module:
    """A causal LM of architecture `arch` with random weights, built directly on `device`
    (GPU init of a 7B model takes seconds; on the CPU it would take minutes)."""
    from transformers import AutoModelForCausalLM

    from verl.models.loading import disable_dropout

    cfg = hf_config(arch)
    cfg._attn_implementation = attn
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation=attn)
    disable_dropout(model)
    model.generation_config.pad_token_id = 0
    return model


def save_random_model(arch: str, path: str, dtype=torch.bfloat16) -> str:
    """A random `arch` model + `synthetic_tokenizer` written as a Hugging Face folder (for
    engines that load from disk: vLLM; TRL and verl load it the same way). Built once, on the
    GPU where there is one (random init of 1.5B parameters takes a minute on a CPU)."""
    if os.path.exists(os.path.join(path, "tokenizer.json")):
        return path
    tok = synthetic_tokenizer(ARCHS[arch]["vocab_size"])
    model = build_model(arch, "cuda" if torch.cuda.is_available() else "cpu", dtype)
    for cfg in (model.config, model.generation_config):
        cfg.eos_token_id = tok.eos_token_id
        cfg.pad_token_id = tok.pad_token_id
        cfg.bos_token_id = tok.bos_token_id
    tmp = path + f".tmp{os.getpid()}"
    model.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    os.replace(tmp, path) if not os.path.exists(path) else None
    del model
    free_memory(torch.device("cuda" if torch.cuda.is_available() else "cpu"))  # the workers need the GPU
    return path


def param_count(model_or_arch) -> int:
    if isinstance(model_or_arch, str):
        with torch.device("meta"):
            from transformers import AutoModelForCausalLM

            m = AutoModelForCausalLM.from_config(hf_config(model_or_arch))
        return sum(p.numel() for p in m.parameters())
    return sum(p.numel() for p in model_or_arch.parameters())


# ---------------------------------------------------------------------------
# FLOPs
# ---------------------------------------------------------------------------


def train_flops(cfg, seq_lens, resp_lens, backward: bool = True) -> float:
    """Model FLOPs of one forward (+ backward) over packed sequences, counting useful work only:

        trunk     2 * N_trunk per token               (all real tokens; N_trunk = decoder matmul weights)
        LM head   2 * hidden * vocab per token        (response tokens only: only they need logits)
        attention 2 * L * Hq * d * s * (s + 1) per sequence of length s (causal QK^T and AV)

    times 3 with the backward pass (6 * N * tokens for the matmuls). Padding, recomputation
    (gradient checkpointing, the chunked head's backward) and the embedding lookup count zero.
    """
    t = flop_terms(cfg)
    n_tok = float(sum(seq_lens))
    n_resp = float(sum(resp_lens))
    fwd = 2 * t["trunk"] * n_tok + 2 * t["head"] * n_resp + sum(2 * t["attn_width"] * s * (s + 1) for s in seq_lens)
    return fwd * (3 if backward else 1)


def peak_flops(device) -> Optional[float]:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    for key, value in PEAK_BF16.items():
        if key in name:
            return value
    return None


# ---------------------------------------------------------------------------
# Machine, timing, memory, output
# ---------------------------------------------------------------------------


def machine_info(device) -> dict:
    info = dict(date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                host=platform.node(), python=platform.python_version(), torch=torch.__version__,
                cpu_count=os.cpu_count(), device=str(device), command=" ".join([os.path.basename(sys.executable)] + sys.argv))
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:
        pass
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(gpu=props.name, gpu_memory_gib=round(props.total_memory / 2 ** 30, 1),
                    peak_bf16_tflops=(peak_flops(device) or 0) / 1e12)
    else:
        info["cpu"] = platform.processor() or platform.machine()
    if hasattr(os, "getloadavg"):  # other processes on the machine skew CPU timings
        info["load_avg_1m"] = round(os.getloadavg()[0], 2)
    info["torch_threads"] = torch.get_num_threads()
    try:
        # "-dirty" when the tracked files differ from HEAD: the GPU machine's copy of the checkout carries the
        # session's first commit in .git beside a newer working tree (a run of 2026-12-02 reported bdf77e9 for f34e518)
        info["git_commit"] = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=7"], cwd=ROOT,
                                            capture_output=True, text=True, timeout=5).stdout.strip()
    except Exception:
        pass
    return info


def sync(device) -> None:
    """Wait for the device's queued work (CUDA); nothing for the CPU or no device."""
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak(device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def peak_gib(device) -> Optional[float]:
    if device.type != "cuda":
        return None
    return round(torch.cuda.max_memory_allocated(device) / 2 ** 30, 2)


def timed(fn: Callable, device, repeats: int = 1) -> tuple[list[float], object]:
    """Wall seconds of each of `repeats` calls (device synchronised), and the last result."""
    times, out = [], None
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        out = fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return times, out


AROUND_SPLIT = ("around_engine_s", "readout_parse_s", "readout_batch_s", "readout_decode_s")


def with_around_engine(engine, fn):
    """(fn wrapped, list): after each call of fn (verl's generate), the list gets a dict of the seconds
    verl spent around the engine's own call (rollout/around_engine_s: the requests, reading the results,
    the Batch) and, where the backend records it, that time's split (readout_parse_s: the outputs into
    lists; readout_batch_s: the Batch's arrays; readout_decode_s: the texts), so a gap to the raw engine
    can be split into verl's part and the engine's, and verl's part into its stages."""
    seconds: list[dict] = []

    def call():
        out = fn()
        m = engine.metrics()
        seconds.append({k: m[f"rollout/{k}"] for k in AROUND_SPLIT if f"rollout/{k}" in m})
        return out

    return call, seconds


def failure_summary(returncode: int, stderr: str, stdout: str = "") -> str:
    """One line for a results table about a system's process that failed: "OOM " when it ran out of
    memory, its exit code, and the last line that names an error or exception (else its last three
    lines). The last lines alone can hide the cause: on the H200 on 2026-12-01 they were NCCL's
    exit-time warning, after the line with the CUDA out-of-memory error."""
    text = (stderr or stdout or "").strip()
    lines = text.splitlines()
    oom = "OOM " if "OutOfMemoryError" in text or "out of memory" in text.lower() else ""
    named = [ln.strip() for ln in lines if re.search(r"[A-Za-z]*(Error|Exception)\b", ln) and "Warning" not in ln]
    what = named[-1] if named else " | ".join(lines[-3:])
    return f"{oom}exit {returncode}: {what[-300:]}"


def rollout_rows(timings: dict, paths: list, batch: int, expected: int, raw_tokens,
                 around: Optional[dict] = None, gc_stats: Optional[dict] = None) -> list[dict]:
    """The rollout benchmarks' rows (vLLM and SGLang): for each (key, label) of `paths`, the tokens
    each path returned (verl's: its Batch's response mask; a raw engine's: `raw_tokens(output)`),
    tokens/s, and the ratios to the raw paths with the same parameters and as a user calls it.
    around: {key: [per call, the seconds around the engine and their split]} (`with_around_engine`),
    each kept as the median;
    gc_stats: timed_interleaved's, kept as gc_s (median seconds in the garbage collector per call)
    and gc_full (full collections over all calls)."""
    rows = []
    for key, label in paths:
        out, seconds, times = timings[key]
        tokens = int(out.response_mask.sum()) if key.startswith("ours") else raw_tokens(out)
        rows.append(dict(batch=batch, path=label, key=key, tokens=tokens, seconds=round(seconds, 4),
                         tokens_per_s=round(tokens / seconds), seconds_per_round=[round(t, 4) for t in times],
                         ok=tokens == expected))
        marks = (around or {}).get(key, [])
        for name in AROUND_SPLIT:  # the median of each part over the calls
            values = [m[name] for m in marks if m.get(name) is not None]
            if values:
                rows[-1][name] = round(statistics.median(values), 4)
        if gc_stats and key in gc_stats:
            rows[-1]["gc_s"] = round(statistics.median(sec for sec, _ in gc_stats[key]), 4)
            rows[-1]["gc_full"] = sum(full for _, full in gc_stats[key])
    same = next(r for r in rows if r["key"] == "raw_same")["tokens_per_s"]
    plain = next(r for r in rows if r["key"] == "raw_plain")["tokens_per_s"]
    for r in rows:
        r["x_raw_same"] = round(r["tokens_per_s"] / same, 3)
        r["x_raw_plain"] = round(r["tokens_per_s"] / plain, 3)
    return rows


def timed_interleaved(fns: dict, rounds: int, device=None, before=None, gc_stats: Optional[dict] = None) -> dict:
    """Round-robin timing: every round calls each fn once (a burst of load on a shared machine then
    lands on every path, not on one), round r starting at the r-th fn, so that no path always runs
    right after the same other one (an engine still busy with the previous call's clean-up, or its
    prefix cache warmed by it, would otherwise favour or cost one path every round). `before()`, if
    given, runs untimed before every call (e.g. an engine's prefix-cache reset: each path then starts
    from the state the trainer's generation starts from after a weight sync). Returns {name: (last
    output, median seconds, all seconds)}; `gc_stats`, if given, gets {name: [(seconds in the garbage
    collector, full collections) per call]} (`GcTally`)."""
    names = list(fns)
    outs, times = {}, {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            if before is not None:
                before()
            with GcTally() as tally:
                t, outs[name] = timed(fns[name], device)
            times[name] += t
            if gc_stats is not None:
                gc_stats.setdefault(name, []).append((tally.seconds, tally.full))
    return {name: (outs[name], statistics.median(times[name]), times[name]) for name in names}


def free_memory(device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def format_table(rows: list[dict], columns: list[str]) -> str:
    def fmt(v):
        if v is None:
            return "-"
        if isinstance(v, float):
            return f"{v:,.3g}" if abs(v) < 100 else f"{v:,.0f}"
        return str(v)

    cells = [[fmt(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) if cells else len(c) for i, c in enumerate(columns)]
    line = "| " + " | ".join(c.ljust(w) for c, w in zip(columns, widths)) + " |"
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    body = ["| " + " | ".join(v.ljust(w) for v, w in zip(row, widths)) + " |" for row in cells]
    return "\n".join([line, sep] + body)


def write_results(out: str, name: str, info: dict, rows: list[dict], columns: list[str], extra: dict = None,
                  notes: str = "", quiet: bool = False) -> str:
    """Print the table and write `<name>.json` and `<name>.md` under the folder `out`, or, when
    `out` ends in `.json`, that file and the `.md` beside it (called after every row with
    quiet=True, so a run stopped midway keeps what it measured)."""
    table = format_table(rows, columns)
    header = f"## {name}\n\n{info.get('date')} | {info.get('gpu') or info.get('cpu')} | torch {info.get('torch')}\n\n"
    text = header + table + ("\n\n" + notes if notes else "") + f"\n\ncommand: `{info.get('command')}`\n"
    if not quiet:
        print("\n" + text, flush=True)
    if out:
        json_path = out if out.endswith(".json") else os.path.join(out, f"{name}.json")
        os.makedirs(os.path.dirname(json_path) or ".", exist_ok=True)
        with open(json_path, "w") as fh:
            json.dump(dict(benchmark=name, machine=info, rows=rows, **(extra or {})), fh, indent=2, default=str)
        with open(json_path[:-len(".json")] + ".md", "w") as fh:
            fh.write(text)
    return table


# ---------------------------------------------------------------------------
# Command line: the flags every benchmark shares
# ---------------------------------------------------------------------------

# name -> (option strings, add_argument keywords). A script names the ones it takes and may
# change a keyword (`arch="qwen2-1.5b"` sets the default, `tiny={"help": ...}` any keyword).
SHARED_FLAGS = {
    "device": (["--device"], dict(default="auto", help="cpu | cuda | auto (cuda when there is one)")),
    "tiny": (["--tiny"], dict(action="store_true", help="small CPU-sized problem (seconds)")),
    "arch": (["--arch"], dict(default="qwen2-1.5b", choices=sorted(ARCHS),
                              help="architecture of a real model, built with random weights")),
    "model": (["--model"], dict(default="tiny:llama",
                                help="model folder, tiny:ARCH (verl's tiny models), or random:ARCH (an --arch name; "
                                     "random:smollm2 = random:smollm2-135m)")),
    "dtype": (["--dtype"], dict(default="bfloat16", choices=["bfloat16", "float32"], help="compute dtype")),
    "threads": (["--threads"], dict(type=int, default=0,
                                    help="torch intra-op threads (0: PyTorch's default); 1 keeps CPU timings sane on "
                                         "a busy machine")),
    "prompt_len": (["--prompt-len"], dict(type=int, nargs=2, default=[128, 512], metavar=("MIN", "MAX"),
                                          help="prompt lengths, uniform in [MIN, MAX]")),
    "response_len": (["--response-len"], dict(type=int, nargs=2, default=[64, 2048], metavar=("MIN", "MAX"),
                                              help="response lengths, uniform in [MIN, MAX]")),
    "max_new_tokens": (["--max-new-tokens", "--max_new_tokens"], dict(type=int, default=128,
                                                                      help="new tokens per sequence")),
    "micro_batch": (["--micro-batch"], dict(type=int, default=8, help="training.micro_batch_size (padded)")),
    "budget": (["--budget"], dict(type=int, default=16384, help="training.max_tokens_per_micro_batch")),
    "chunk": (["--chunk"], dict(type=int, default=4096, help="training.logprob_chunk_size")),
    "repeats": (["--repeats"], dict(type=int, default=3, help="timed repetitions after one warm-up")),
    "out": (["--out"], dict(default=None, help="folder for <benchmark>.json / .md (or a path ending in .json)")),
}


def arg_parser(doc: str, *names: str, **changed) -> argparse.ArgumentParser:
    """An ArgumentParser with the shared flags `names` (keys of SHARED_FLAGS, in that order)
    plus those named in `changed`; a value there is the flag's new default, or a dict of
    add_argument keywords to change. The script then adds its own flags."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name in list(names) + [n for n in changed if n not in names]:
        flags, kwargs = SHARED_FLAGS[name]
        kwargs = dict(kwargs)
        change = changed.get(name)
        if isinstance(change, dict):
            kwargs.update(change)
        elif name in changed:
            kwargs["default"] = change
        ap.add_argument(*flags, **kwargs)
    return ap


def resolve_model(name: str, cache: Optional[str] = None) -> str:
    """A model folder for `--model`: tiny:ARCH -> a verl tiny model with head size 32 (vLLM's CPU
    kernels need >= 32); random:ARCH -> `save_random_model(ARCH)` (random weights of a real
    architecture, synthetic tokenizer); anything else is a path."""
    from verl.models.tiny import build_tiny_model, cache_root

    if name.startswith("tiny:"):
        arch = name[len("tiny:"):]
        out = os.path.join(cache_root(), "tiny-h128", arch)
        if not os.path.exists(os.path.join(out, "config.json")):
            build_tiny_model(arch, out, hidden=128, pretrain_steps=0)
        return out
    if name.startswith("random:"):
        arch = {"smollm2": "smollm2-135m"}.get(name[len("random:"):], name[len("random:"):])
        if arch not in ARCHS:
            raise SystemExit(f"--model {name}: unknown architecture {arch!r}; one of {', '.join(sorted(ARCHS))}")
        cache = cache or os.path.join(cache_root(), "random-archs")
        return save_random_model(arch, os.path.join(cache, arch))
    return os.path.expanduser(name)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def is_oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in str(exc).lower()
