"""Hugging Face `generate` backend: the plain, always-available path (`rollout.name: vllm` is the
fast one).

Which module generates:
    default                       the actor's own module: generation always sees the current
                                  weights, no sync; with `model.dtype: bfloat16` it runs under
                                  autocast over the fp32 master weights (every weight is re-cast
                                  to bf16 at every decode step).
    rollout.hf_weight_copy: true  a copy of the actor in the compute dtype (bf16 for
                                  `model.dtype: bfloat16`), like vLLM holds its own weights;
                                  `sync_weights` writes the actor's parameters (LoRA merged) into
                                  it in place after every update.

KV cache (`rollout.cache_implementation`):
    dynamic  transformers' default cache (DynamicCache for decoder-only LMs): today's behaviour.
    static   a StaticCache of a fixed `rollout.max_model_len` tokens; on CUDA transformers
             compiles the decode step. The cache takes a single dtype, so it needs weights in the
             compute dtype (the copy, or a LoRA base, which loads in model.dtype).

Decode loop (`rollout.decode_loop`):
    transformers  `model.generate`.
    verl          verl.rollout.decode_loop.StaticDecoder over the weight copy (static cache, sdpa
                  attention, one CUDA graph per decode step on CUDA). Stop strings are applied
                  after decoding: a response is cut where its text first contains one (where
                  generate's stop_strings stops), the extra tokens are only wasted compute.
"""

from __future__ import annotations

import contextlib
import copy
import threading
import time

import torch
from transformers import StoppingCriteria, StoppingCriteriaList

from verl.batch import Batch
from verl.models.lora import base_model
from verl.models.moe import EXPERT_DTYPE, MoeRouting
from verl.rollout.base import RolloutEngine, SamplingParams, assemble_rollout
from verl.rollout.decode_loop import StaticDecoder
from verl.rollout.hf_weights import hf_named_weights
from verl.rollout.sampling import DrawsFrom, token_log_probs
from verl.rollout.token_io import pad_id
from verl.signals import abandon_if_stopped, stop_requested


class StopOnSignal(StoppingCriteria):
    """Ends transformers' generate at the next token once SIGINT/SIGTERM asked the run to stop
    (verl/signals.py): a long generation is the step in progress, abandoned so that the last
    completed step is saved within checkpoint.stop_grace_s."""

    def __call__(self, input_ids, scores, **kwargs):
        return torch.full((input_ids.shape[0],), stop_requested() is not None, dtype=torch.bool,
                          device=input_ids.device)


def abandon_on_stop(where: str) -> None:
    """Interrupted (the step is abandoned) when a stop was requested, on the main thread only: an
    asynchronous producer's thread stops with its source instead."""
    if threading.current_thread() is threading.main_thread():
        abandon_if_stopped(where)


# ---------------------------------------------------------------------------
# The weight copy
# ---------------------------------------------------------------------------


def build_weight_copy(model: torch.nn.Module, dtype: torch.dtype, attn_implementation=None) -> torch.nn.Module:
    """A plain transformers model of the actor's architecture, floating weights in `dtype`, on the
    actor's device, in eval mode with gradients off. Its weights are random until the first
    `copy_weights_into`; the actor is only read. attn_implementation: None = the actor's.

    Built from the actor's config with `_from_config` (not a deepcopy): a deepcopy would briefly
    double the fp32 weights and would carry peft's LoRA layers along. Buffers keep the dtype that
    construction gives them (e.g. rotary `inv_freq` stays fp32), as `from_pretrained(dtype=...)`
    does. The generation config is the actor's own object, so a setting made on the actor's
    `generation_config` (eos ids, min_new_tokens) applies to the copy too.
    """
    base = base_model(model)
    config = copy.deepcopy(base.config)  # _from_config writes its dtype into the config it gets
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # a GGUF-loaded actor holds dequantised weights
    device = next(model.parameters()).device
    with torch.device(device):
        replica = type(base)._from_config(config, dtype=dtype,
                                          attn_implementation=attn_implementation or base.config._attn_implementation)
    replica.generation_config = base.generation_config
    replica.eval().requires_grad_(False)
    return replica


@torch.no_grad()
def copy_weights_into(replica: torch.nn.Module, model: torch.nn.Module) -> int:
    """Write the actor's current weights into `replica` in place; returns the bytes written.

    The actor's weights come as (HF checkpoint name, tensor) from `hf_named_weights` (LoRA
    deltas merged, tied weights once); `copy_` casts them to the replica's dtype and keeps every
    replica tensor's storage, so a compiled decode graph (static addresses) stays valid. Every
    replica tensor must be written: a weight the actor does not have is an error, not a
    leftover random value.
    """
    targets = replica.state_dict(keep_vars=True)  # name -> Parameter / buffer; tied names share one tensor
    written: set[int] = set()
    n_bytes = 0
    for name, value in hf_named_weights(model, checkpoint_layout=False):  # into a model of the same class
        target = targets.get(name)
        if target is None:
            raise RuntimeError(f"rollout.hf_weight_copy: the actor's weight '{name}' has no counterpart in the copy")
        if target.shape != value.shape:  # copy_ would broadcast silently
            raise RuntimeError(f"rollout.hf_weight_copy: '{name}' is {tuple(value.shape)} in the actor but "
                               f"{tuple(target.shape)} in the copy")
        target.copy_(value)
        if id(target) not in written:
            written.add(id(target))
            n_bytes += target.numel() * target.element_size()
    missing = [n for n, t in targets.items() if id(t) not in written]
    if missing:
        raise RuntimeError(f"rollout.hf_weight_copy: the actor gave no value for {missing[:5]} of the copy")
    return n_bytes


def _check_static_cache_dtype(model: torch.nn.Module, compute_dtype) -> None:
    """Refuse a static cache under autocast over weights of another dtype.

    The static cache allocates keys and values in the dtype of the first keys it stores. Under
    bf16 autocast over fp32 weights the hidden states stay fp32, so the rotary-embedded keys come
    out fp32 while the values (a plain linear) are bf16, and index_copy_ fails mid-generation.
    """
    weight_dtype = model.get_input_embeddings().weight.dtype
    if compute_dtype is not None and weight_dtype != compute_dtype:
        raise ValueError(f"rollout.cache_implementation: static cannot generate under {compute_dtype} autocast over "
                         f"{weight_dtype} weights; set rollout.hf_weight_copy: true")


def _static_cache_kwargs(rollout_cfg) -> dict:
    """generate() kwargs for a static cache of a fixed length.

    transformers sizes a static cache as max(max_length - 1, generation_config.max_cache_len),
    max_length = prompt width + max_new_tokens; the prompt width (the longest prompt of the batch)
    changes from step to step, so without a fixed max_cache_len every longer batch would grow the
    cache and recompile the decode step. rollout.max_model_len (finalize_config:
    data.max_prompt_length + rollout.max_new_tokens) bounds every call. The compiled step is still
    specialised on the batch size: a smaller last chunk (rollout.batch_size) compiles once more.
    """
    from transformers import GenerationConfig

    if rollout_cfg.max_model_len is None:
        raise ValueError("rollout.cache_implementation: static needs rollout.max_model_len (the fixed cache length; "
                         "finalize_config sets it to data.max_prompt_length + rollout.max_new_tokens)")
    if not hasattr(GenerationConfig(), "max_cache_len"):
        import transformers

        raise ImportError(f"rollout.cache_implementation: static needs GenerationConfig.max_cache_len, which "
                          f"transformers {transformers.__version__} lacks; upgrade transformers")
    return dict(cache_implementation="static", max_cache_len=rollout_cfg.max_model_len)


# ---------------------------------------------------------------------------
# The engine
# ---------------------------------------------------------------------------


class HFRollout(RolloutEngine):
    @classmethod
    def from_actor(cls, model: torch.nn.Module, tokenizer, config) -> "HFRollout":
        """On the actor's module; forwards in model.dtype unless that is float32 (autocast off)."""
        from verl.models.loading import torch_dtype

        dtype = torch_dtype(config.model.dtype)
        return cls(model, tokenizer, config.rollout, compute_dtype=None if dtype == torch.float32 else dtype)

    def __init__(self, model: torch.nn.Module, tokenizer, rollout_cfg, compute_dtype=None):
        """model: the actor's module; compute_dtype: the dtype forwards run in (None: the weights' own)."""
        self.tokenizer = tokenizer
        self.chunk = rollout_cfg.batch_size  # sequences per generate() call; None = all
        static = rollout_cfg.cache_implementation == "static"
        self.cache_kwargs = _static_cache_kwargs(rollout_cfg) if static else {}
        self.weight_copy = bool(rollout_cfg.hf_weight_copy)
        # rollout.routing_replay: engine -- an MoE model's experts per token, recorded while generating
        self.record_routing = rollout_cfg.routing_replay == "engine"
        self._said_vl_fallback = False
        self._draw_state = None  # ((draw_seed, device), torch.Generator) of the step being generated
        own_loop = rollout_cfg.decode_loop == "verl"
        self.decoder = None
        if self.weight_copy:
            dtype = compute_dtype or base_model(model).dtype
            # The own loop passes 4D additive masks, which sdpa takes and flash-attention does not.
            self.model = build_weight_copy(model, dtype, attn_implementation="sdpa" if own_loop else None)
            self.autocast_dtype = None  # generates in `dtype` directly
            self.sync_weights(model)
            if own_loop:
                self.decoder = StaticDecoder(self.model, rollout_cfg.max_model_len, pad_id(tokenizer),
                                             tokenizer.eos_token_id)
        else:
            self.model = model  # the actor's module itself: generation always sees current weights
            self.autocast_dtype = compute_dtype
            if static:
                _check_static_cache_dtype(model, compute_dtype)

    def _autocast(self, device):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=device.type, dtype=self.autocast_dtype)

    def sync_weights(self, model: torch.nn.Module) -> dict:
        """With the weight copy: the actor's current weights into it, in place (same metric keys as
        VLLMRollout; bytes are those written into the copy). Without: nothing to do."""
        if not self.weight_copy:
            return {}
        device = next(self.model.parameters()).device
        start = time.perf_counter()
        n_bytes = copy_weights_into(self.model, model)
        if device.type == "cuda":
            torch.cuda.synchronize(device)  # copy_ is asynchronous: time the copy, not its launch
        return {"timing_s/update_weights": time.perf_counter() - start, "rollout/weight_sync_bytes": float(n_bytes)}

    def read_weights(self, names: list, shapes: dict) -> dict:
        """The weight copy's tensors by HF name (verl.rollout.sync_check); nothing without a copy: the
        engine then generates with the actor's own module, there is no sync to verify."""
        if not self.weight_copy:
            return {}
        state = self.model.state_dict()
        return {n: state[n] for n in names if n in state}

    @torch.no_grad()
    def generate(self, prompts: Batch, sampling: SamplingParams) -> Batch:
        rows = prompts.repeat(sampling.n)
        device = next(self.model.parameters()).device
        tok = self.tokenizer
        responses, log_probs, finished, routed = [], [], [], []
        was_training = self.model.training
        self.model.eval()
        routing = MoeRouting(self.model) if self.record_routing else None
        try:
            for part in rows.split(self.chunk or len(rows)):
                abandon_on_stop("generation")
                with routing.recording() if routing else contextlib.nullcontext() as rec:
                    r, lp, f = self._generate_part(part, sampling, device)
                abandon_on_stop("generation")  # generate stopped early for it (StopOnSignal)
                responses += r
                log_probs += lp
                finished += f
                if rec is not None:
                    routed.append(generated_routing(rec, len(part)))
        finally:
            self.model.train(was_training)
        out = assemble_rollout(rows, responses, log_probs, tok, sampling.max_new_tokens, finished)
        if routed:
            out.routed_experts = routed_columns(routed, out.input_ids.shape[1])
            out.routed_experts[out.attention_mask == 0] = -1  # padding: nothing to replay
        return out

    def load_state_dict(self, state: dict) -> None:
        """A restored run state (a resume, in this process or a new one): the step it continues with draws
        from a fresh generator of its seed, as the uninterrupted run's step did."""
        self._draw_state = None

    def _draws(self, seed: int, device) -> torch.Generator:
        """The generator of the step seeded `seed` on `device`: made at the step's first call, continued by
        its later calls (DAPO's extra draws, the turns of a multi-turn rollout)."""
        if self._draw_state is None or self._draw_state[0] != (seed, str(device)):
            self._draw_state = ((seed, str(device)), torch.Generator(device=device).manual_seed(seed))
        return self._draw_state[1]

    def _generate_part(self, part: Batch, sampling: SamplingParams, device):
        input_ids = part.input_ids.to(device)
        attention_mask = part.attention_mask.to(device)
        images = _image_kwargs(self.model, input_ids, part.multi_modal)
        if images is not None:  # a vision-language model's rows with images: transformers' generate
            if self.decoder is not None and not self._said_vl_fallback:
                print("verl: rollout.decode_loop: verl does not take images; prompts with images are generated "
                      "by transformers' generate", flush=True)
                self._said_vl_fallback = True
            seqs_dev, logp_dev = self._transformers_generate(input_ids, attention_mask, sampling, device, images)
        elif self.decoder is not None:
            greedy = sampling.is_greedy
            seqs_dev, logp_dev = self.decoder.generate(
                input_ids, attention_mask, sampling.max_new_tokens, temperature=sampling.temperature,
                top_k=sampling.top_k, top_p=sampling.top_p, greedy=greedy)
        else:
            seqs_dev, logp_dev = self._transformers_generate(input_ids, attention_mask, sampling, device)
        return self._finish(seqs_dev.cpu(), logp_dev.cpu(), sampling)

    def _transformers_generate(self, input_ids, attention_mask, sampling: SamplingParams, device,
                               images: dict | None = None):
        """model.generate -> (tokens (b, steps), log-probs (b, steps)) on the device. `images`: the
        rows' pixel values, grids and modality ids (`_image_kwargs`); the placeholder tokens are then
        suppressed: one in a response would ask the model's forward for an image it does not have."""
        tok = self.tokenizer
        gen_kwargs = dict(max_new_tokens=sampling.max_new_tokens, eos_token_id=tok.eos_token_id,
                          pad_token_id=tok.pad_token_id, return_dict_in_generate=True, output_logits=True,
                          **self.cache_kwargs, **(images or {}))
        if images:
            from verl.data.multimodal import image_token_ids

            gen_kwargs["suppress_tokens"] = sorted(image_token_ids(tok))
        if sampling.is_greedy:
            gen_kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
            temperature = 1.0
        elif sampling.draw_seed is not None:  # the draws from a generator of their own: DrawsFrom decides
            gen_kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None, logits_processor=[
                DrawsFrom(self._draws(sampling.draw_seed, device), sampling.temperature, sampling.top_k,
                          sampling.top_p)])
            temperature = sampling.temperature
        else:
            gen_kwargs.update(do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p,
                              top_k=sampling.top_k or None)
            temperature = sampling.temperature
        if sampling.stop:
            gen_kwargs.update(stop_strings=list(sampling.stop), tokenizer=tok)
        if threading.current_thread() is threading.main_thread():
            gen_kwargs["stopping_criteria"] = StoppingCriteriaList([StopOnSignal()])
        with self._autocast(device):
            out = self.model.generate(input_ids=input_ids, attention_mask=attention_mask, **gen_kwargs)
        seqs_dev = out.sequences[:, input_ids.shape[1]:]
        # Raw logits / temperature: the distribution the actor recomputes (top-p/top-k
        # truncation is a sampling detail the policy-gradient ratio does not model).
        # One decode step at a time, on the device: never a (b, steps, V) float32 copy.
        logp = torch.stack([token_log_probs(step_logits, seqs_dev[:, i], temperature)
                            for i, step_logits in enumerate(out.logits)], dim=1)  # (b, steps)
        return seqs_dev, logp

    def _finish(self, seqs: torch.Tensor, logp: torch.Tensor, sampling: SamplingParams):
        """(b, steps) tokens and log-probs -> per-row response lists cut after EOS or at the end of
        the first stop string, and whether each row finished. Both loops need the stop cut:
        generate pads a row that hit a stop string up to the longest row (those pads are not part
        of the response), verl's loop does not stop on stop strings at all."""
        tok = self.tokenizer
        responses, log_probs, finished = [], [], []
        for i in range(seqs.shape[0]):
            ids = seqs[i].tolist()
            end = len(ids)
            if tok.eos_token_id in ids:
                end = ids.index(tok.eos_token_id) + 1
            if sampling.stop:
                end = min(end, first_stop_prefix(ids[:end], sampling.stop, tok))
            ids = ids[:end]
            done = bool(ids) and ids[-1] == tok.eos_token_id
            if not done and sampling.stop:
                text = tok.decode(ids, skip_special_tokens=True)
                done = any(s in text for s in sampling.stop) and len(ids) < sampling.max_new_tokens
            responses.append(ids)
            log_probs.append(logp[i, :end].tolist())
            finished.append(done)
        return responses, log_probs, finished


def _image_kwargs(model: torch.nn.Module, input_ids: torch.Tensor, multi_modal: list) -> dict | None:
    """generate()'s image keyword arguments for rows with `multi_modal` entries (Batch.multi_modal):
    the collated pixel values and grids, and for an mrope model (Qwen2.5-VL) the modality ids its rope
    index needs; None when no row has images. The positions generate computes itself."""
    if not any(m is not None for m in multi_modal):
        return None
    from verl.data.multimodal import forward_kwargs

    kwargs = forward_kwargs(base_model(model).config, input_ids, None, multi_modal)
    kwargs.pop("position_ids", None)
    return kwargs


def first_stop_prefix(ids: list, stops, tokenizer) -> int:
    """The length of the shortest prefix of `ids` whose text contains a stop string (len(ids) if
    none does). Binary search: once a prefix's text contains a stop string, longer ones do too."""
    def hit(k):
        text = tokenizer.decode(ids[:k], skip_special_tokens=True)
        return any(s in text for s in stops)

    if not ids or not hit(len(ids)):
        return len(ids)
    lo, hi = 1, len(ids)  # hit(hi) holds
    while lo < hi:
        mid = (lo + hi) // 2
        if hit(mid):
            hi = mid
        else:
            lo = mid + 1
    return hi


def generated_routing(rec, rows: int) -> torch.Tensor:
    """The experts an MoE model routed each position to while generating, (rows, P + steps - 1, L, k) int16
    on the CPU: the prefill's call gives the prompt's P positions, each decode call one more (the last
    sampled token is never fed back, so its position has none)."""
    layers = len(rec.calls)
    parts = []
    for call in range(len(rec.calls[0])):
        experts = torch.stack([rec.calls[layer][call][1] for layer in range(layers)], dim=1)  # (rows x S, L, k)
        parts.append(experts.reshape(rows, -1, layers, experts.shape[-1]))
    return torch.cat(parts, dim=1).to(torch.int16).cpu()


def routed_columns(parts: list, width: int) -> torch.Tensor:
    """The generate calls' routing in the rollout Batch's columns: (N, width, L, k), -1 where none was
    recorded (padding, the last token)."""
    rows = sum(p.shape[0] for p in parts)
    out = torch.full((rows, width, *parts[0].shape[2:]), -1, dtype=EXPERT_DTYPE)
    at = 0
    for p in parts:
        cols = min(width, p.shape[1])
        out[at:at + p.shape[0], :cols] = p[:, :cols]
        at += p.shape[0]
    return out
