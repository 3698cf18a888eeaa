"""Block FP8 weights for the rollout engine (`rollout.quantization: fp8`): pure tensor functions.

A 2-D weight W [N, K] (out x in) is cut into blocks of B x B (B = 128, what vLLM's block-FP8
checkpoints use: `weight_block_size: [128, 128]`), the last row/column of blocks cut short where
N or K is not a multiple of B. For block (i, j), with FP8_MAX = 448 (the largest float8_e4m3fn):

    scale[i, j] = amax(|W[block i, j]|) / 448          (1.0 for an all-zero block: no 0/0)
    Q[block]    = float8_e4m3fn(clamp(W[block] / scale[i, j], -448, 448))   round to nearest even
    W'[block]   = float32(Q[block]) * scale[i, j]       (dequantize)

`scale` is what a block-FP8 checkpoint stores as `<layer>.weight_scale_inv` (float32,
[ceil(N/B), ceil(K/B)]): the factor that turns the FP8 values back into weights. e4m3 has 3
mantissa bits, so a value in the normal range (|Q| >= 2^-6) is off by at most half a step,
2^-4 relative; a smaller one (subnormal) by at most 2^-10 * scale absolute.

Used by the weight sync (verl/rollout/fp8_sync.py), the engine's start folder, and the tests.
"""

from __future__ import annotations

import torch

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0  # torch.finfo(torch.float8_e4m3fn).max
BLOCK = 128  # weight_block_size [128, 128]


def scale_name(weight_name: str) -> str:
    """'model.layers.0.mlp.down_proj.weight' -> 'model.layers.0.mlp.down_proj.weight_scale_inv'."""
    if not weight_name.endswith(".weight"):
        raise ValueError(f"{weight_name}: not a weight name (.weight)")
    return weight_name + "_scale_inv"


def _blocks(n: int, block: int) -> int:
    return -(-n // block)  # ceil


def quantize_blockwise(weight: torch.Tensor, block: int = BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """W [N, K] (any float dtype) -> (Q [N, K] float8_e4m3fn, scale [ceil(N/B), ceil(K/B)] float32);
    the formula is the module docstring's. Computed in float32 on W's device."""
    if weight.dim() != 2:
        raise ValueError(f"block FP8 takes 2-D weights, got shape {tuple(weight.shape)}")
    n, k = weight.shape
    nb, kb = _blocks(n, block), _blocks(k, block)
    w = weight.float()
    # Zero padding up to whole blocks: zeros never raise a block's amax, and are cut off again below.
    padded = torch.nn.functional.pad(w, (0, kb * block - k, 0, nb * block - n))
    tiles = padded.view(nb, block, kb, block)  # [block row, row in block, block column, column in block]
    amax = tiles.abs().amax(dim=(1, 3))  # [nb, kb]
    scale = torch.where(amax > 0, amax / FP8_MAX, torch.ones_like(amax))
    q = (tiles / scale[:, None, :, None]).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
    return q.view(nb * block, kb * block)[:n, :k].contiguous(), scale


def expand_scale(scale: torch.Tensor, shape: tuple, block: int = BLOCK) -> torch.Tensor:
    """scale [ceil(N/B), ceil(K/B)] -> [N, K]: each block's factor on each of its elements."""
    n, k = shape
    return scale.repeat_interleave(block, dim=0)[:n].repeat_interleave(block, dim=1)[:, :k]


def dequantize_blockwise(q: torch.Tensor, scale: torch.Tensor, block: int = BLOCK) -> torch.Tensor:
    """(Q [N, K] float8_e4m3fn, scale [ceil(N/B), ceil(K/B)]) -> W' [N, K] float32."""
    return q.float() * expand_scale(scale.float(), tuple(q.shape), block)


def round_trip(weight: torch.Tensor, block: int = BLOCK) -> torch.Tensor:
    """W -> dequantize(quantize(W)), in W's dtype: the weights an FP8 engine computes with."""
    return dequantize_blockwise(*quantize_blockwise(weight, block), block).to(weight.dtype)
