"""The floor of each stage of a GRPO step on a card: the seconds the stage's necessary memory traffic or
arithmetic takes at the card's datasheet rates. A measured stage reaches `floor / measured` of it (1.0: at the
floor; the update's fraction is its MFU). Pure arithmetic on a model config (any object with the Hugging Face
attribute names) and per-sequence lengths: no torch, no device.

    generation  decode_bytes / HBM bandwidth, where, for prompt lengths p_i and response lengths r_i (tokens),
                    decode_bytes = S * W + K * sum_i (r_i * p_i + r_i * (r_i - 1) / 2)
                W  the weights one engine step reads: the matmul weights (decoder layers + LM head) in bf16
                   (an untied embedding is only gathered by row, so it is left out; norms and biases, < 0.1%,
                   too)
                K  the KV cache's bytes per token: 2 (K and V) * layers * KV heads * head dim * 2 (bf16)
                S  the engine steps: max_i r_i with every sequence in the batch at once (both sides run one
                   engine call of all the step's sequences: verl's rollout.max_num_seqs and TRL's engine are
                   sized to it); the FIFO makespan when at most `max_concurrent` run at once
                Step t (t = 0 .. r_i - 1; step 0 is the prefill) reads, for every sequence still running
                (r_i > t), the KV of its p_i + t earlier tokens: the sum above. The new entries' writes (one
                token a sequence a step) and the prefill's arithmetic are left out; a group's shared prompt is
                counted once per sequence, as attention kernels read it. Long tails matter: a batch steps
                max_i r_i times, reading the weights each time, however few sequences are left.
    update      update_flops / the card's dense bf16 peak (MFU = update_flops / (update_s * peak)); see
                update_flops for what is counted
    weight sync 2 * sync_bytes / HBM bandwidth: a device-to-device copy reads and writes each byte once, so
                HBM moves it twice (a lower bound on cudaMemcpy's device-to-device rate, which runs below
                the datasheet bandwidth). sync_bytes = the bf16 weights that change in an update: all of
                them in full fine-tuning (the LM head once when tied); with LoRA on all linear layers, the
                decoder layers' matmul weights the merged adapters change (PEFT's "all-linear", as both
                sides use it, leaves the LM head out; both sides merge and send every weight, which is
                more than this floor)

Card rates (datasheets, dense, no sparsity): NVIDIA H100 SXM5 80GB 3.35 TB/s HBM3, 989 TFLOP/s bf16;
H100 PCIe 80GB 2.0 TB/s, 756 TFLOP/s; H100 NVL 94GB 3.9 TB/s, 835 TFLOP/s; H200 141GB 4.8 TB/s HBM3e,
989 TFLOP/s (the H100's compute die). TB = 10^12 bytes.
"""

from __future__ import annotations

import dataclasses
import heapq
from typing import Optional, Sequence

BF16 = 2  # bytes per element of the engine's weights and KV cache


@dataclasses.dataclass(frozen=True)
class Card:
    name: str
    hbm_bytes_s: float  # HBM bandwidth, bytes/s
    bf16_flops: float  # dense bf16 tensor-core peak, FLOP/s


# Matched in this order against the device name torch reports ("NVIDIA H100 80GB HBM3" is the SXM card).
CARDS = (
    ("H100 PCIE", Card("H100 PCIe 80GB", 2.0e12, 756e12)),
    ("H100 NVL", Card("H100 NVL 94GB", 3.9e12, 835e12)),
    ("H100", Card("H100 SXM5 80GB", 3.35e12, 989e12)),
    ("H200", Card("H200 141GB", 4.8e12, 989e12)),
)


def card(gpu_name: Optional[str]) -> Optional[Card]:
    """The card of a device name (torch.cuda.get_device_name), None for one not in CARDS (or no GPU)."""
    upper = (gpu_name or "").upper()
    return next((c for key, c in CARDS if key in upper), None)


# ---------------------------------------------------------------------------
# The model's sizes
# ---------------------------------------------------------------------------


def moe_terms(cfg) -> Optional[dict]:
    """A mixture-of-experts config's MLP sizes (None for a dense one): E experts of width I_e, top-k per token,
    a shared expert of width I_s (Qwen2-MoE; 0 elsewhere) and its gate, the router H x E."""
    experts = getattr(cfg, "num_experts", None) or getattr(cfg, "num_local_experts", None)
    if not experts:
        return None
    shared = getattr(cfg, "shared_expert_intermediate_size", None) or 0
    return dict(experts=int(experts), top_k=int(cfg.num_experts_per_tok), width=int(cfg.moe_intermediate_size
                if getattr(cfg, "moe_intermediate_size", None) else cfg.intermediate_size), shared=int(shared))


def _attention_params(cfg) -> int:
    h, hq = cfg.hidden_size, cfg.num_attention_heads
    hk = getattr(cfg, "num_key_value_heads", None) or hq
    d = getattr(cfg, "head_dim", None) or h // hq
    return h * hq * d + 2 * h * hk * d + hq * d * h  # q, k, v, o


def flop_terms(cfg) -> dict:
    """Per-token matmul parameter counts of a decoder-only transformer config:
    trunk = L * (q + k + v + o + gate/up/down) = L * (H Hq d + 2 H Hk d + Hq d H + 3 H I), head = H V,
    attn_width = L Hq d (the attention's FLOPs per pair of positions are 2 * 2 * attn_width).
    Mixture of experts: a token multiplies by its k experts only, so trunk counts the MLP as
    k x 3 H I_e + 3 H I_s + H (shared expert and its gate) + H E (router); `weights` counts every expert,
    E x 3 H I_e + ..., what a sync sends and a large decode batch reads (dense: weights = trunk)."""
    h, hq = cfg.hidden_size, cfg.num_attention_heads
    d = getattr(cfg, "head_dim", None) or h // hq
    attn = _attention_params(cfg)
    moe = moe_terms(cfg)
    if moe is None:
        active = every = attn + 3 * h * cfg.intermediate_size
    else:
        rest = (3 * h * moe["shared"] + h if moe["shared"] else 0) + h * moe["experts"]
        active = attn + moe["top_k"] * 3 * h * moe["width"] + rest
        every = attn + moe["experts"] * 3 * h * moe["width"] + rest
    layers = cfg.num_hidden_layers
    return dict(trunk=layers * active, head=h * cfg.vocab_size, attn_width=layers * hq * d, weights=layers * every)


def decode_weight_bytes(cfg) -> int:
    """W: the bf16 matmul weights one engine step reads (decoder layers + LM head; every expert of an MoE
    model: a batch of many sequences routes to nearly all of them each step)."""
    t = flop_terms(cfg)
    return BF16 * (t["weights"] + t["head"])


def kv_bytes_per_token(cfg) -> int:
    """K: 2 (K and V) * L * Hk * d * 2 bytes."""
    hq = cfg.num_attention_heads
    hk = getattr(cfg, "num_key_value_heads", None) or hq
    d = getattr(cfg, "head_dim", None) or cfg.hidden_size // hq
    return 2 * cfg.num_hidden_layers * hk * d * BF16


def lora_width(cfg) -> int:
    """sum of (d_in + d_out) over the linear layers LoRA adapts per token ("all-linear": q, k, v, o, gate, up,
    down of every decoder layer; not the LM head): L * (7 H + 2 Hq d + 2 Hk d + 3 I); an MoE model's token
    passes its k experts' adapters (k (3 H + 3 I_e)), the shared expert's and the router's (H + E)."""
    h, hq = cfg.hidden_size, cfg.num_attention_heads
    hk = getattr(cfg, "num_key_value_heads", None) or hq
    d = getattr(cfg, "head_dim", None) or h // hq
    attn = 4 * h + 2 * hq * d + 2 * hk * d
    moe = moe_terms(cfg)
    if moe is None:
        return cfg.num_hidden_layers * (attn + 3 * h + 3 * cfg.intermediate_size)
    shared = (3 * h + 3 * moe["shared"]) + (h + 1) if moe["shared"] else 0
    return cfg.num_hidden_layers * (attn + moe["top_k"] * (3 * h + 3 * moe["width"]) + shared + h + moe["experts"])


def sync_bytes(cfg, lora: bool) -> int:
    """The bf16 bytes of the weights an update changes (module docstring): full fine-tuning, the matmul
    weights plus an untied embedding; LoRA, the decoder layers' matmul weights."""
    t = flop_terms(cfg)
    if lora:
        return BF16 * t["weights"]
    untied = 0 if getattr(cfg, "tie_word_embeddings", True) else t["head"]
    return BF16 * (t["weights"] + t["head"] + untied)


# ---------------------------------------------------------------------------
# Work of one step
# ---------------------------------------------------------------------------


def engine_steps(resp_lens: Sequence[int], max_concurrent: Optional[int] = None) -> int:
    """S: max(r_i) with all sequences at once; else the makespan of FIFO continuous batching on
    `max_concurrent` slots (sequence i starts when a slot frees and runs r_i steps)."""
    if not resp_lens:
        return 0
    if not max_concurrent or max_concurrent >= len(resp_lens):
        return max(resp_lens)
    slots = [0] * max_concurrent  # the step at which each slot frees
    for r in resp_lens:
        heapq.heappush(slots, heapq.heappop(slots) + r)
    return max(slots)


def decode_bytes(weight_bytes: float, kv_per_token: float, prompt_lens: Sequence[int], resp_lens: Sequence[int],
                 max_concurrent: Optional[int] = None) -> float:
    """S * W + K * sum_i (r_i p_i + r_i (r_i - 1) / 2) (module docstring): the bytes the engine steps of one
    generation must read."""
    kv_tokens = sum(r * p + r * (r - 1) / 2 for p, r in zip(prompt_lens, resp_lens, strict=True))
    return engine_steps(list(resp_lens), max_concurrent) * weight_bytes + kv_per_token * kv_tokens


def update_flops(cfg, prompt_lens: Sequence[int], resp_lens: Sequence[int], lora_rank: int = 0) -> float:
    """FLOPs of one update over these sequences (all of a step's sequences, one optimizer step), useful work
    only, counted as the trainer's perf/mfu counts them (verl.tracking.flops, whose docstring has the formula);
    LoRA (rank R): R x lora_width adapter weights. MFU = update_flops / (update seconds * bf16 peak)."""
    from verl.tracking.flops import update_flops_of

    t = flop_terms(cfg)
    adapters = lora_rank * lora_width(cfg) if lora_rank else 0
    return update_flops_of(t["trunk"], t["head"], adapters, t["attn_width"], prompt_lens, resp_lens)


def step_work(cfg, prompt_lens: Sequence[int], resp_lens: Sequence[int], lora_rank: int = 0,
              max_concurrent: Optional[int] = None) -> dict:
    """The card-free quantities of one step the floors divide: decode_bytes, update_flops, sync_bytes."""
    return dict(decode_bytes=decode_bytes(decode_weight_bytes(cfg), kv_bytes_per_token(cfg), prompt_lens, resp_lens,
                                          max_concurrent),
                update_flops=update_flops(cfg, prompt_lens, resp_lens, lora_rank),
                sync_bytes=float(sync_bytes(cfg, bool(lora_rank))))


# ---------------------------------------------------------------------------
# Floors and fractions
# ---------------------------------------------------------------------------


def generation_floor_s(decode_bytes_: float, c: Card) -> float:
    return decode_bytes_ / c.hbm_bytes_s


def update_floor_s(flops: float, c: Card) -> float:
    return flops / c.bf16_flops


def sync_floor_s(bytes_: float, c: Card) -> float:
    """A device-to-device copy: each byte read once and written once."""
    return 2 * bytes_ / c.hbm_bytes_s


def floors(work: dict, c: Card) -> dict:
    """Seconds of each stage's floor for a step_work dict."""
    return dict(generation=generation_floor_s(work["decode_bytes"], c), update=update_floor_s(work["update_flops"], c),
                sync=sync_floor_s(work["sync_bytes"], c))


def fraction(floor_s: Optional[float], measured_s: Optional[float]) -> Optional[float]:
    """floor / measured (the share of the floor a stage reaches); None without both or a measured 0."""
    if floor_s is None or not measured_s or measured_s <= 0:
        return None
    return floor_s / measured_s
