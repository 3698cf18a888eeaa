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

Power-of-two scales (`pow2_scales=True`, the UE8M0 format of DeepGEMM's kernels): vLLM's DeepGEMM
block-FP8 linear kernel (Hopper and Blackwell, VLLM_USE_DEEP_GEMM_E8M0=1, vLLM's default) requantizes
every weight it is loaded with to scales that are powers of two, after the load
(fp8_utils.requant_weight_ue8m0_inplace: dequantize, then deep_gemm.per_block_cast_to_fp8 with
use_ue8m0). Weights sent with amax / 448 scales are so rounded a second time, and the engine holds
weights that are not our round trip. For such an engine the scale is instead, as vLLM computes it,

    scale[i, j] = 2^ceil(log2(max(amax, 1e-4) / 448))

and Q as above (an all-zero block gets 2^-22, whose Q are zeros). Then vLLM's requantization of
(Q, scale) gives back the same weights exactly, so the engine holds our round trip bit for bit: a
block's largest |W / scale| lies in (224, 448], so its largest |Q| is 448 or in [224, 448) and vLLM's
new scale is `scale` again or scale / 2, with every Q doubled, which e4m3 holds exactly (a block whose
amax is below 1e-4 gets the clamp's scale 2^-22 from both). The price of a power-of-two scale: a
block's largest value lands in [224, 448] instead of at 448, so its small values turn subnormal (with
the coarser absolute step above) up to one binade sooner; the bounds above hold as they are.

Used by the weight sync (verl/rollout/fp8_vllm.py), the engine's start folder, and the tests.
"""

from __future__ import annotations

import torch

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0  # torch.finfo(torch.float8_e4m3fn).max
BLOCK = 128  # weight_block_size [128, 128]
POW2_MIN_AMAX = 1e-4  # vLLM's per_block_cast_to_fp8 clamps amax to this for a power-of-two scale


def scale_name(weight_name: str) -> str:
    """'model.layers.0.mlp.down_proj.weight' -> 'model.layers.0.mlp.down_proj.weight_scale_inv'."""
    if not weight_name.endswith(".weight"):
        raise ValueError(f"{weight_name}: not a weight name (.weight)")
    return weight_name + "_scale_inv"


def _blocks(n: int, block: int) -> int:
    return -(-n // block)  # ceil


def quantize_blockwise(weight: torch.Tensor, block: int = BLOCK,
                       pow2_scales: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """W [N, K] (any float dtype) -> (Q [N, K] float8_e4m3fn, scale [ceil(N/B), ceil(K/B)] float32);
    the formula is the module docstring's (`pow2_scales`: its power-of-two scales). Computed in float32
    on W's device."""
    if weight.dim() != 2:
        raise ValueError(f"block FP8 takes 2-D weights, got shape {tuple(weight.shape)}")
    n, k = weight.shape
    nb, kb = _blocks(n, block), _blocks(k, block)
    w = weight.float()
    # Zero padding up to whole blocks: zeros never raise a block's amax, and are cut off again below.
    padded = torch.nn.functional.pad(w, (0, kb * block - k, 0, nb * block - n))
    tiles = padded.view(nb, block, kb, block)  # [block row, row in block, block column, column in block]
    amax = tiles.abs().amax(dim=(1, 3))  # [nb, kb]
    if pow2_scales:
        scale = torch.pow(2.0, torch.ceil(torch.log2(amax.clamp(min=POW2_MIN_AMAX) / FP8_MAX)))
    else:
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


def round_trip(weight: torch.Tensor, block: int = BLOCK, pow2_scales: bool = False) -> torch.Tensor:
    """W -> dequantize(quantize(W)), in W's dtype: the weights an FP8 engine computes with."""
    return dequantize_blockwise(*quantize_blockwise(weight, block, pow2_scales), block).to(weight.dtype)
