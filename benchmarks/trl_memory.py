"""TRL's micro-batch sized to the card (e2e_grpo.py --trl-micro-batch auto, the default on a GPU for the
like-for-like rows, which run TRL without gradient checkpointing): the largest power of two of sequences that
divides the step's completions and whose activations fit, by an estimate, in what the card leaves TRL's
update. Arithmetic only (verl's activation estimate, no device); the driver passes the card's memory.

    left      = card * (1 - VLLM_SHARE) - RESERVE - states
    per seq   = T * A + C * 6 V                T: the padded sequence (the longest prompt + max_new_tokens:
                                               TRL pads every completion of a step to the longest, and a
                                               long-tailed step has one at the maximum), C = max_new_tokens
    mb        = the largest power of two dividing n with mb * per seq <= MARGIN * left (at least 1)

    VLLM_SHARE  TRL's vllm_gpu_memory_utilization default (colocate): the engine's share, held through the
                update (TRL's vllm_enable_sleep_mode is off by default)
    RESERVE     3 GiB: the CUDA context, cuBLAS and NCCL workspaces, the driver process's context
    states      full fine-tuning 18 N bytes: float32 weights, gradients and AdamW's two moments (16 N) plus
                autocast's bf16 copies of the weights (2 N); LoRA: the frozen base in its dtype (2 N bf16,
                like-for-like; 4 N + 2 N float32 under autocast otherwise) plus 16 bytes a LoRA parameter
    A           bytes a token of activations without checkpointing, verl's own estimate
                (verl/workers/memory_budget.py bytes_per_token: (L + 1) (2 (8 H + 4 I) + 16 H)); 3.5 MB at
                Qwen2.5-1.5B, 7.7 MB at 7B
    6 V         a completion token's logits: bf16 kept for the backward (2 V) and one float32 copy (the
                log-softmax or its gradient, 4 V)
    MARGIN      0.8 (fragmentation; what the estimate leaves out)

Checked against the H200 runs: at (b) 16 sequences of ~557 tokens held ~58 GB beside vLLM (the estimate
gives 38.7 GB of activations plus 27.8 GB of states: an over-estimate, the safe side), and on the H100 16 ran
out of memory (the estimate gives 8); at (c) 8 sequences of the 7B LoRA held ~38 GB of activations (the
estimate: 38.2 GB).
"""

from __future__ import annotations

import dataclasses

VLLM_SHARE = 0.3
RESERVE = 3 * 2 ** 30
MARGIN = 0.8


@dataclasses.dataclass(frozen=True)
class Sizing:
    micro_batch: int
    left_bytes: int  # what the card leaves the update's activations
    per_seq_bytes: int  # the estimate for one padded sequence
    states_bytes: int


def states_bytes(n_params: int, lora_params: int, base_dtype: str) -> int:
    """Weights, gradients and optimizer states (module docstring)."""
    if not lora_params:
        return 18 * n_params
    base = 2 * n_params if base_dtype == "bfloat16" else 6 * n_params
    return base + 16 * lora_params


def activation_bytes_per_token(hidden: int, layers: int, intermediate: int) -> int:
    """A: verl's estimate for training without checkpointing, bf16 activations."""
    from verl.workers.memory_budget import ModelShape, bytes_per_token

    return bytes_per_token(ModelShape(hidden, layers, intermediate, 0), 2, training=True, checkpointing=False,
                           keep_logits=False)


def micro_batch(card_bytes: int, n: int, seq_tokens: int, completion_tokens: int, per_token_bytes: int,
                vocab: int, states: int) -> Sizing:
    """The largest power of two dividing n whose padded sequences fit (module docstring)."""
    left = int(card_bytes * (1 - VLLM_SHARE)) - RESERVE - states
    per_seq = seq_tokens * per_token_bytes + completion_tokens * 6 * vocab
    mb = 1
    while n % (2 * mb) == 0 and 2 * mb * per_seq <= MARGIN * left:
        mb *= 2
    return Sizing(mb, left, per_seq, states)
