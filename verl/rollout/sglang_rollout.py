"""SGLang backend: one in-process `sglang.Engine` (its scheduler runs in a child process on the same
GPU), fed token ids, synced from the actor in memory.

    engine = SGLangRollout(model_path, tokenizer, config.rollout, dtype="bfloat16", device="cuda")
    engine.sync_weights(actor.model)      # actor -> engine through CUDA IPC, no disk
    batch = engine.generate(prompts, SamplingParams(n=4, max_new_tokens=64))
    engine.sleep(); ...train...; engine.sync_weights(actor.model)   # wakes, reloads, maps the KV cache

Requests. One `Engine.generate` call per step with every sample: each prompt row is sent n times
(one request per sample, samples of a prompt adjacent, as the Batch lays them out); SGLang's radix
cache computes the shared prompt prefix once. The engine keeps every generated token
(`no_stop_trim`: EOS and stop strings stay in the response, as with the other engines).

Log-probs. `return_logprob=True` reports, per generated token, log_softmax(logits / temperature)
before top-k/top-p filtering (SGLang's default; the environment variable
SGLANG_RETURN_ORIGINAL_LOGPROB would switch it to the raw, pre-temperature distribution, which the
actor does not recompute, so it is refused). With top_p=1 and top_k off this is exactly what the
actor recomputes (`verl.workers.logprobs`); greedy requests report log_softmax(logits).

Seeds. SGLang draws from the engine's generator, seeded once with `rollout.seed` (`random_seed`);
per-request seeds only take effect in its deterministic-inference mode, which this backend does
not turn on (it costs throughput). Runs are reproducible per engine start, not per request.

Weight sync. `Engine.update_weights_from_tensor` with Hugging Face names: the tensors travel to the
scheduler process as CUDA IPC handles (no copy through host memory) and the model's own weight
loaders copy them in, in buckets of at most SYNC_BUCKET_BYTES; the radix cache is flushed with the
last bucket (its entries were computed with the old weights).

Sleep mode (`rollout.enable_sleep_mode`, the engine started with SGLang's memory saver). Once
synced from a module (the trainer's case), `sleep()` releases all of the engine's GPU memory
(weights, KV cache, CUDA graphs) and the next `sync_weights()` (or `wake_up()`, which re-syncs from
the module last synced) maps the weights back, reloads them and only then maps the rest, so the
two are never held twice. An engine never synced from a module releases its KV cache only.
Metrics as the vLLM backend's: rollout/sleep_s, rollout/sleep_freed_gib, rollout/wake_s,
rollout/wake_taken_gib.

Signals. SGLang's own SIGTERM/SIGQUIT handlers would replace the trainer's graceful stop; the
engine keeps them out (`keep_signal_handlers`), and a failing SGLang child (SIGQUIT; or, for one
killed outright, our ChildWatch within about a second) ends the run with one line naming it and the
checkpoint to resume from, exit 3 (`scheduler_failed`).
"""

from __future__ import annotations

import json
import operator
import os
import sys
import threading
import time
from typing import Optional

import torch

from verl.batch import Batch
from verl.install_hint import pip_extra
from verl.rollout.base import SamplingParams, assemble_rollout
from verl.rollout.child_watch import ChildWatch, child_pids, process_name
from verl.rollout.hf_weights import SYNC_BUCKET_BYTES, hf_named_weights, weight_buckets
from verl.rollout.in_process import InProcessEngine
from verl.rollout.engine_routing import model_text_config, routed_columns_from_engine, sglang_routed_experts
from verl.rollout.token_io import RustBatchDecode, free_gib, release_cached_blocks, tokenizer_path, unpadded_rows


INSTALL_HINT = (f"rollout.name: sglang needs SGLang; install it with {pip_extra('sglang')} "
                "(a CUDA GPU; it cannot share an environment with the vllm extra)")
NO_GPU_HINT = ("rollout.name: sglang needs a CUDA GPU (SGLang has no CPU build); "
               "use rollout.name: vllm or rollout.name: hf")


def import_sglang():
    try:
        import sglang
    except ImportError as exc:
        raise ImportError(INSTALL_HINT) from exc
    if os.environ.get("SGLANG_RETURN_ORIGINAL_LOGPROB", "").lower() in ("1", "true"):
        raise ValueError("SGLANG_RETURN_ORIGINAL_LOGPROB is set: SGLang would report pre-temperature log-probs, "
                         "which are not the sampling distribution the trainer corrects for; unset it")
    return sglang


_WATCHES: list = []  # the ChildWatch of each live engine (the SIGQUIT handler names what died)


def engine_loss_line(dead: list) -> str:
    """The one line for an SGLang engine process that died: which ones ([(pid, name)]) and what is saved."""
    from verl.signals import resume_note

    what = ", ".join(f"{name} (pid {pid})" for pid, name in dead) or "its scheduler or detokenizer process"
    return (f"error: SGLang engine process lost: {what} died (killed, out of memory or crashed; SGLang's log is "
            f"above); {resume_note()}")


def scheduler_failed(signum, frame) -> None:
    """SIGQUIT: an SGLang child process failed. Its own handler sends it when it fails in Python, SGLang's
    watchdog or ours (ChildWatch, for a child killed outright) when it is gone. One line naming it and the
    checkpoint to resume from, the other children stopped, exit 3 (a lost engine process, as under Ray).
    Checkpoints already written are complete files (verl/checkpoint/durable_files.py)."""
    dead = [d for w in _WATCHES for d in w.dead()]
    print(engine_loss_line(dead), file=sys.stderr, flush=True)
    try:
        from sglang.srt.utils import kill_process_tree

        kill_process_tree(os.getpid(), include_parent=False)
    finally:
        os._exit(3)


def engine_processes(new_children: set) -> set:
    """The engine's own processes among the children that appeared while it started: those SGLang titled
    ("sglang::scheduler", "sglang::detokenizer"), so that a helper that ends by itself (a JIT compiler
    run) is not taken for a death; all of them where this SGLang titles none."""
    titled = {pid for pid in new_children if "sglang" in process_name(pid).lower()}
    return titled or set(new_children)


def _signal_engine_loss(dead: list) -> None:
    """ChildWatch's callback (its own thread): hand over to scheduler_failed on the main thread."""
    import signal

    os.kill(os.getpid(), signal.SIGQUIT)


def keep_signal_handlers(engine) -> None:
    """Keep SIGTERM/SIGINT with the trainer's graceful stop (verl/signals.py) and SIGQUIT with
    `scheduler_failed`. SGLang's request loop, created at the engine's first call, adds asyncio
    signal handlers of its own (SIGTERM: drain, shut the scheduler down, then SIGKILL this process;
    SIGQUIT: SIGKILL the process tree). The engine's loop is given an add_signal_handler that
    declines (main thread only; SGLang registers none elsewhere). On the H200 (2026-12-01) a SIGTERM
    to the trainer printed the graceful-stop line and then ended with exit -9 while an earlier
    version of this guard (restoring the handlers after the first call) was in place; that SGLang's
    SIGTERM path was the cause is the likeliest reading, not a checked one, and this version has not
    run on the GPU yet (tests/gpu/test_gpu_sglang.py has the check)."""
    loop = getattr(engine, "loop", None)
    if loop is None:
        return

    def decline(sig, callback, *args):  # noqa: ARG001 - the signature of loop.add_signal_handler
        return None

    loop.add_signal_handler = decline


def supported_architectures() -> Optional[set]:
    """The model classes SGLang can run (None when its registry is not where this version keeps it)."""
    try:
        from sglang.srt.models.registry import ModelRegistry
    except ImportError:
        return None
    return set(ModelRegistry.get_supported_archs())


def check_architecture(model_path: str, supported: Optional[set]) -> None:
    cfg_file = os.path.join(model_path, "config.json")
    if supported is None or not os.path.exists(cfg_file):
        return
    with open(cfg_file, encoding="utf-8") as fh:
        archs = json.load(fh).get("architectures") or []
    if archs and not any(a in supported for a in archs):
        raise ValueError(f"rollout.name: sglang does not support the architecture {', '.join(archs)} of "
                         f"{model_path}; use rollout.name: vllm or rollout.name: hf for this model")


def memory_types() -> tuple[str, ...]:
    """The kinds of GPU memory the engine can release (weights, kv_cache, cuda_graph in 0.5.x)."""
    try:
        from sglang.srt.constants import GPU_MEMORY_ALL_TYPES
        return tuple(GPU_MEMORY_ALL_TYPES)
    except ImportError:
        return ("weights", "kv_cache")


def sampling_dict(sampling: SamplingParams, extra: dict) -> dict:
    """SGLang's sampling parameters for one sample (n = 1: samples are separate requests)."""
    greedy = sampling.is_greedy
    params = {
        "max_new_tokens": sampling.max_new_tokens,
        "temperature": 0.0 if greedy else sampling.temperature,
        "top_p": 1.0 if greedy else sampling.top_p,
        "top_k": -1 if greedy or sampling.top_k <= 0 else sampling.top_k,  # SGLang's "off" is -1
        "no_stop_trim": True,  # keep EOS / the stop string's tokens: they were sampled and are trained on
        "skip_special_tokens": False,
    }
    if sampling.stop:
        params["stop"] = list(sampling.stop)
    params.update(extra)
    return params


_FIRST, _SECOND = operator.itemgetter(0), operator.itemgetter(1)


def response_of(out: dict, index: int) -> tuple[list, list, bool]:
    """(token ids, log-probs, finished) of one SGLang result; the ids are those the log-probs name."""
    meta = out["meta_info"]
    entries = meta.get("output_token_logprobs") or []
    # entries: (log-prob, token id, text) triples; map(itemgetter) per field: 1024 x 256 tokens in
    # ~27 ms on a 2-core CPU, against 36-40 ms for the transpose list(zip(*entries)), which builds
    # tuples (benchmarks/rollout_readout.py)
    lps, toks = list(map(_FIRST, entries)), list(map(_SECOND, entries))
    ids = out.get("output_ids")
    if ids is not None and list(ids) != toks:
        raise RuntimeError(f"SGLang returned log-probs that do not line up with the sampled tokens (sample {index})")
    reason = meta.get("finish_reason") or {}
    kind = reason.get("type") if isinstance(reason, dict) else str(reason)
    if kind == "abort":
        raise RuntimeError(f"SGLang aborted sample {index}: {reason.get('message', reason)}")
    return toks, lps, kind == "stop"


class SGLangRollout(InProcessEngine):  # sync_weights: verl/rollout/in_process.py
    record_routing = False  # rollout.routing_replay: engine (__init__)

    def __init__(self, model_path: str, tokenizer, rollout_cfg, dtype: str = "auto", device: str = "cuda",
                 enforce_eager: Optional[bool] = None, max_num_seqs: Optional[int] = None,
                 mm_processor_kwargs: Optional[dict] = None):
        """`max_num_seqs`: the engine's running-request capacity when rollout.max_num_seqs is unset:
        the trainer passes the sequences of one step (training.batch_size x rollout.n).
        `mm_processor_kwargs`: a vision-language model's (engine_start_args); such models are refused."""
        dev = torch.device(device)
        if dev.type != "cuda" or not torch.cuda.is_available():
            raise ValueError(NO_GPU_HINT)
        sgl = import_sglang()
        check_architecture(model_path, supported_architectures())
        self.tokenizer = tokenizer
        self.cfg = rollout_cfg
        self.sleep_enabled = bool(rollout_cfg.enable_sleep_mode)
        self.asleep = False
        self.released: tuple[str, ...] = ()  # the memory kinds released by the current sleep
        self.last_sleep_metrics: dict = {}
        self._pending_metrics: dict = {}
        self._source = None  # the module last synced from (re-synced from after a full release)
        # Extra sampling fields for every request (benchmarks and tests: {"ignore_eos": True}).
        self.extra_sampling_kwargs: dict = {}
        if enforce_eager is None:
            enforce_eager = bool(getattr(rollout_cfg, "enforce_eager", None))  # GPU: CUDA graphs by default
        kwargs = dict(
            model_path=model_path,
            tokenizer_path=tokenizer_path(tokenizer, model_path),
            dtype=dtype,
            random_seed=rollout_cfg.seed if rollout_cfg.seed is not None else 0,
            mem_fraction_static=rollout_cfg.gpu_memory_utilization,
            max_running_requests=rollout_cfg.max_num_seqs or max_num_seqs or 256,
            tp_size=rollout_cfg.tensor_model_parallel_size,
            base_gpu_id=dev.index or 0,
            disable_cuda_graph=enforce_eager,
            enable_memory_saver=self.sleep_enabled,
            log_level="error",
        )
        # SGLang installs its own SIGTERM and SIGQUIT handlers (at start and when its request loop is
        # first created); the trainer's graceful stop (verl/signals.py) must keep SIGTERM and SIGINT.
        self._main_thread = threading.current_thread() is threading.main_thread()
        if self._main_thread:
            kwargs["custom_sigquit_handler"] = scheduler_failed
        if rollout_cfg.max_model_len is not None:
            kwargs["context_length"] = rollout_cfg.max_model_len
        if rollout_cfg.max_num_batched_tokens is not None:
            kwargs["chunked_prefill_size"] = rollout_cfg.max_num_batched_tokens
        # rollout.routing_replay: engine -- SGLang records each token's experts (verl/rollout/engine_routing.py)
        self.record_routing = getattr(rollout_cfg, "routing_replay", "off") == "engine"
        if self.record_routing:
            kwargs["enable_return_routed_experts"] = True
            self._text_config = model_text_config(model_path)
        before = child_pids()
        try:
            self.engine = sgl.Engine(**kwargs)
        except Exception as exc:
            text = str(exc)
            if "rchitecture" in text and "not supported" in text:
                raise ValueError(f"rollout.name: sglang cannot run {model_path}: {text.splitlines()[0]}; "
                                 "use rollout.name: vllm or rollout.name: hf") from exc
            raise
        self._watch = None
        if self._main_thread:
            keep_signal_handlers(self.engine)
            # a child killed outright (SIGKILL, the OOM killer) cannot send SIGQUIT: watch for it (~1 s)
            self._watch = ChildWatch(engine_processes(child_pids() - before), on_death=_signal_engine_loss).start()
            _WATCHES.append(self._watch)

    # ------------------------------------------------------------------ generate
    def build_requests(self, prompts: Batch, sampling: SamplingParams) -> tuple[list, dict]:
        """The exact (input_ids, sampling_params) `generate` hands to `Engine.generate`: every
        prompt row n times (samples adjacent), one sampling dict for all. Public so the benchmark
        can time raw SGLang on the very same requests."""
        prompt_ids = unpadded_rows(prompts.input_ids, prompts.attention_mask)
        rows = [prompt_ids[i] for i in range(len(prompts)) for _ in range(sampling.n)]
        return rows, sampling_dict(sampling, self.extra_sampling_kwargs)

    def generate(self, prompts: Batch, sampling: SamplingParams) -> Batch:
        if self.asleep:
            self.wake_up()
        start = time.perf_counter()
        rows, params = self.build_requests(prompts, sampling)
        call_start = time.perf_counter()
        extra = {"return_routed_experts": True} if self.record_routing else {}
        outputs = self.engine.generate(input_ids=rows, sampling_params=params, return_logprob=True, **extra)
        call_end = time.perf_counter()
        if len(outputs) != len(rows):
            raise RuntimeError(f"SGLang returned {len(outputs)} results for {len(rows)} requests")
        responses, log_probs, finished, routed = [], [], [], []
        for i, out in enumerate(outputs):  # same order as the requests
            toks, lps, done = response_of(out, i)
            responses.append(toks)
            log_probs.append(lps)
            finished.append(done)
            if self.record_routing:
                routed.append(sglang_routed_experts(out["meta_info"], self._text_config))
        parsed, decoder = time.perf_counter(), RustBatchDecode(self.tokenizer)
        repeated = prompts.repeat(sampling.n)
        batch = assemble_rollout(repeated, responses, log_probs, decoder, sampling.max_new_tokens, finished=finished)
        if self.record_routing:
            batch.routed_experts = routed_columns_from_engine(routed, repeated.attention_mask,
                                                              batch.input_ids.shape[1])
            batch.routed_experts[batch.attention_mask == 0] = -1  # padding: nothing to replay
        self._record_generate(start, call_start, call_end, parsed, decoder.seconds)
        return batch

    # -------------------------------------------------------------- weight sync
    def load_weights(self, weights: list) -> int:
        """(HF name, tensor) pairs into the engine; returns the bytes. Asleep: the weights are mapped
        back first and the rest of the engine's memory only after the reload."""
        woke = self._wake_weights() if self.asleep else None
        n_bytes = self._reload(weights, flush=woke is None)
        if woke is not None:
            self._wake_rest(woke)  # flushes the radix cache once the KV cache is mapped again
        return n_bytes

    def _reload(self, weights: list, flush: bool = True) -> int:
        """Bucket by bucket; `flush`: the radix cache is flushed with the last one (not while the KV
        cache is released: `_wake_rest` flushes it after mapping it back)."""
        # all buckets at once: the radix cache is flushed with the last one
        buckets = list(weight_buckets([(name, t.detach()) for name, t in weights], SYNC_BUCKET_BYTES))
        with torch.no_grad():
            for i, bucket in enumerate(buckets):
                result = self.engine.update_weights_from_tensor(named_tensors=bucket,
                                                                flush_cache=flush and i == len(buckets) - 1)
                if isinstance(result, tuple) and result and result[0] is False:
                    raise RuntimeError(f"SGLang refused the weight update: {result[1] if len(result) > 1 else ''}")
        return sum(t.numel() * t.element_size() for _, t in weights)

    # --------------------------------------------------------------- sleep mode
    def can_sleep(self) -> bool:
        return self.sleep_enabled

    def sleep(self) -> dict:
        """With rollout.enable_sleep_mode: release the engine's GPU memory (everything once synced
        from a module, whose weights come back with the next sync; else the KV cache only). Returns
        rollout/sleep_s and rollout/sleep_freed_gib (GPU memory free after minus before)."""
        if not self.sleep_enabled or self.asleep:
            return {}
        kinds = memory_types() if self._source is not None else ("kv_cache",)
        free_before = free_gib()
        start = time.perf_counter()
        self.engine.release_memory_occupation(tags=list(kinds))
        torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        self.asleep, self.released = True, kinds
        self.last_sleep_metrics = {"rollout/sleep_s": seconds, "rollout/sleep_freed_gib": free_gib() - free_before,
                                   "rollout/sleep_level": 2.0 if "weights" in kinds else 1.0}
        self._pending_metrics.update(self.last_sleep_metrics)
        return dict(self.last_sleep_metrics)

    def wake_up(self) -> dict:
        """Map the engine's memory back (weights re-synced from the module last synced when they
        were released). Returns rollout/wake_s (re-sync included) and rollout/wake_taken_gib."""
        if not self.asleep:
            return {}
        woke = self._wake_weights()
        if "weights" in self.released:
            self._reload(list(hf_named_weights(self._source)), flush=False)
        return self._wake_rest(woke)

    def _wake_weights(self) -> tuple[float, float]:
        release_cached_blocks()  # the update's freed activations, still reserved by PyTorch
        start, free_before = time.perf_counter(), free_gib()
        if "weights" in self.released:
            self.engine.resume_memory_occupation(tags=["weights"])
        return start, free_before

    def _wake_rest(self, woke: tuple[float, float]) -> dict:
        start, free_before = woke
        rest = [k for k in self.released if k != "weights"]
        if rest:
            self.engine.resume_memory_occupation(tags=rest)
        self.engine.flush_cache()  # nothing computed before the release is reused
        torch.cuda.synchronize()
        self.asleep, self.released = False, ()
        m = {"rollout/wake_s": time.perf_counter() - start, "rollout/wake_taken_gib": free_before - free_gib()}
        self.last_sleep_metrics.update(m)
        self._pending_metrics.update(m)
        return m

    def shutdown(self) -> None:
        """Stop the scheduler and detokenizer processes (SGLang also does it at exit)."""
        engine = getattr(self, "engine", None)
        watch = getattr(self, "_watch", None)
        if watch is not None:  # its processes are about to exit on purpose
            watch.stop()
            _WATCHES.remove(watch)
            self._watch = None
        if engine is not None:
            engine.shutdown()
            self.engine = None
