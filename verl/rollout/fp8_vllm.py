"""`rollout.quantization: fp8` on vLLM: the engine holds block-FP8 linear weights, the actor stays as it is.

    plan = plan_from_folder(model_path, tp)          # which HF weights go to FP8 (the rest stay bf16)
    llm = vllm.LLM(..., **engine_args(plan))         # a block-FP8 checkpoint engine, placeholder weights
    llm.collective_rpc("reload_weights", kwargs={"weights_iterator": list(quantized_stream(weights, plan))})

The engine is started as vLLM starts a block-FP8 checkpoint (DeepSeek-V3's format): `quantization: fp8`
and a `quantization_config` of {quant_method: fp8, activation_scheme: dynamic, weight_block_size: [128,
128], ignored_layers: [...]} given as hf_overrides on the actor's own (bf16) folder. vLLM then builds
Fp8LinearMethod layers (an FP8 `weight` [N, K] and a float32 `weight_scale_inv` [N/128, K/128]) for every
linear layer except the ignored ones; the LM head, the embeddings and the norms are no linear layers and
stay in the engine's dtype. Its weights are vLLM's dummy ones (load_format: dummy: the folder's bf16
tensors are no FP8 checkpoint); the first sync (InProcessEngine.from_actor does it right after the start)
fills them, and VLLMRollout refuses to generate before it.

Each sync quantizes the actor's weights (LoRA merged, verl/rollout/hf_weights.py) on the actor's device
(verl/rollout/fp8.py: per 128 x 128 block, scale = amax / 448) and hands vLLM (name, FP8 weight) and
(name + '_scale_inv', scale) in checkpoint format; vLLM's layerwise reload (the only path for a quantized
engine, verl/rollout/vllm_weights.py: choose_weight_reload) loads them and runs the layer's own
post-processing again. Real verl and NeMo-RL do the same quantization, but patch vLLM's FP8 classes to
load into the processed layers directly; the layerwise reload, vLLM's public API, needs no patch.

That post-processing requantizes on Hopper/Blackwell GPUs: vLLM's DeepGEMM kernel (its default there,
VLLM_USE_DEEP_GEMM_E8M0=1) turns each loaded weight's scales into powers of two (UE8M0), rounding our
FP8 values a second time. So right after the engine starts, `with_engine_scales` asks its workers
whether their FP8 layers' kernels requantize so (`ue8m0_requantizing_layers`), and if they do the plan
quantizes with power-of-two scales itself (verl/rollout/fp8.py: pow2_scales), which that requantization
leaves exactly as they are: the engine then holds our round trip bit for bit, and the weight check
compares it so.

Which linear layers go to FP8 (`plan_fp8`): those whose both dimensions are multiples of 128 x the
tensor-parallel size (vLLM checks the block shape of every fused part and of every shard), with q/k/v and
gate/up together (vLLM fuses them into one layer, which is either FP8 or not). MoE routers (`mlp.gate`)
stay in bf16, as in real verl. Models with experts or a vision tower are refused for now (one line
naming rollout.quantization): their fused expert tensors and tower layers need a mapping not built yet.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Iterator

import torch

from verl.errors import ConfigError
from verl.rollout.fp8 import BLOCK, dequantize_blockwise, quantize_blockwise, round_trip, scale_name

KEY = "rollout.quantization"
# Layers vLLM fuses into one (its packed_modules_mapping for Llama/Qwen/Mistral-style models)
FUSED_GROUPS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))
ROUTER_SUFFIXES = (".mlp.gate", ".block_sparse_moe.gate")  # MoE routers: kept in bf16 (real verl too)
EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")


@dataclasses.dataclass(frozen=True)
class Fp8Plan:
    quantized: frozenset  # HF weight names sent as FP8 + scale ('model.layers.0.mlp.down_proj.weight')
    kept: tuple  # linear layers kept in the engine's dtype, by HF module name (vLLM's ignored_layers)
    pow2_scales: bool = False  # the engine requantizes to power-of-two scales: quantize so (with_engine_scales)

    def summary(self) -> str:
        return (f"verl: {KEY}: fp8 -> {len(self.quantized)} linear layers in block FP8 (128 x 128 scales), "
                f"{len(self.kept)} kept in the engine's dtype (with the LM head, embeddings and norms)")


def _linear_names(model: torch.nn.Module) -> dict:
    """{HF module name: (out, in)} of the model's torch.nn.Linear layers, less the LM head (peft's
    LoRA wrappers looked through: their base layer under the wrapped name, the adapters left out)."""
    from verl.models.lora import base_model

    base = base_model(model)
    head = base.get_output_embeddings() if hasattr(base, "get_output_embeddings") else None
    out = {}
    for name, mod in base.named_modules():
        if not isinstance(mod, torch.nn.Linear) or mod is head or ".lora_" in name or name.endswith("lm_head"):
            continue
        out[name.replace(".base_layer", "")] = tuple(mod.weight.shape)
    return out


def plan_fp8(model: torch.nn.Module, tp: int = 1) -> Fp8Plan:
    """The FP8 plan of `model` (a real or a meta-device module; see the module docstring)."""
    config = getattr(model, "config", None)
    check_supported(config)
    linear = _linear_names(model)
    unit = BLOCK * tp

    def fits(name: str) -> bool:
        shape = linear.get(name)
        return shape is not None and all(d % unit == 0 for d in shape) and not name.endswith(ROUTER_SUFFIXES)

    quantized = {n for n in linear if fits(n)}
    for group in FUSED_GROUPS:  # a fused layer is FP8 only when every part is
        for name in list(quantized):
            head, _, leaf = name.rpartition(".")
            if leaf in group and not all(f"{head}.{part}" in quantized for part in group
                                         if f"{head}.{part}" in linear):
                quantized -= {f"{head}.{part}" for part in group}
    if not quantized:
        raise ConfigError(f"{KEY}: fp8 found no linear layer whose dimensions are multiples of {unit} (128 x "
                          f"rollout.tensor_model_parallel_size) in {getattr(config, 'model_type', 'this model')}; "
                          "leave rollout.quantization unset for this model")
    return Fp8Plan(frozenset(f"{n}.weight" for n in quantized), tuple(sorted(set(linear) - quantized)))


def check_supported(config) -> None:
    """Refuse what the FP8 engine does not cover yet (one line naming the key)."""
    if config is None:
        return
    if getattr(config, "vision_config", None) is not None:
        raise ConfigError(f"{KEY}: fp8 is for text models for now ({config.model_type} has a vision tower); "
                          "leave rollout.quantization unset")
    text = getattr(config, "text_config", None) or config
    if any((getattr(text, k, 0) or 0) > 0 for k in EXPERT_KEYS):
        raise ConfigError(f"{KEY}: fp8 is for dense models for now ({config.model_type} has mixture-of-experts "
                          "layers); leave rollout.quantization unset")


def plan_from_folder(model_path: str, tp: int = 1, trust_remote_code: bool = False) -> Fp8Plan:
    """plan_fp8 of the model a folder (or hub name) holds, built on the meta device (no weights read)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_path, trust_remote_code=trust_remote_code)
    check_supported(config)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, trust_remote_code=trust_remote_code)
    return plan_fp8(model, tp)


def quant_config(plan: Fp8Plan) -> dict:
    """The checkpoint's quantization_config vLLM reads (Fp8Config.from_config)."""
    return {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
            "weight_block_size": [BLOCK, BLOCK], "ignored_layers": list(plan.kept)}


def engine_args(plan: Fp8Plan) -> dict:
    """vllm.LLM keywords of a block-FP8 engine over a bf16 folder (module docstring)."""
    return {"quantization": "fp8", "hf_overrides": {"quantization_config": quant_config(plan)},
            "load_format": "dummy"}


def ue8m0_requantizing_layers(worker) -> tuple:
    """(FP8 linear layers, those whose kernel requantizes loaded weights to power-of-two scales), as
    counts, on one engine worker (collective_rpc). vLLM 0.26's Fp8LinearMethod holds its kernel as
    `fp8_linear`: the DeepGEMM kernel, or a FlashInfer one with the DeepGEMM kernel as its `fallback`
    (whose post-processing it runs), requantizes when it says `use_deep_gemm_e8m0` and
    `is_deep_gemm_supported` (deep_gemm.DeepGemmFp8BlockScaledMMKernel.process_weights_after_loading)."""
    fp8 = requantizing = 0
    for module in worker.model_runner.get_model().modules():
        kernel = getattr(getattr(module, "quant_method", None), "fp8_linear", None)
        weight = getattr(module, "weight", None)
        if kernel is None or not isinstance(weight, torch.Tensor) or weight.dtype != torch.float8_e4m3fn:
            continue
        fp8 += 1
        requantizing += any(getattr(k, "use_deep_gemm_e8m0", False) and getattr(k, "is_deep_gemm_supported", False)
                            for k in (kernel, getattr(kernel, "fallback", None)))
    return fp8, requantizing


def with_engine_scales(plan: Fp8Plan, llm) -> Fp8Plan:
    """`plan` with the scale format the started engine `llm` keeps (module docstring): power-of-two
    scales where its FP8 kernels requantize to them. An engine whose FP8 layers differ in this (some
    requantize, some not), or whose workers differ, is refused: one plan quantizes all alike."""
    counts = set(map(tuple, llm.collective_rpc(ue8m0_requantizing_layers)))
    if len(counts) != 1:
        raise RuntimeError(f"{KEY}: fp8: the engine's workers differ in their FP8 kernels ({sorted(counts)})")
    fp8, requantizing = counts.pop()
    if 0 < requantizing < fp8:
        raise RuntimeError(f"{KEY}: fp8: {requantizing} of the engine's {fp8} FP8 linear layers requantize their "
                           "weights to power-of-two (UE8M0) scales, the others not; verl quantizes all alike. "
                           "VLLM_USE_DEEP_GEMM_E8M0=0 in the environment turns vLLM's requantization off")
    return dataclasses.replace(plan, pow2_scales=fp8 > 0 and requantizing == fp8)


def quantized_stream(weights: Iterable, plan: Fp8Plan) -> Iterator[tuple[str, torch.Tensor]]:
    """(HF name, tensor) -> the same, with each planned weight replaced by (name, FP8 [N, K]) and
    (name_scale_inv, float32 [N/128, K/128]), quantized on the tensor's own device. Lazy: one weight's
    FP8 copy exists at a time beyond what the consumer keeps."""
    for name, tensor in weights:
        if name in plan.quantized:
            q, scale = quantize_blockwise(tensor, pow2_scales=plan.pow2_scales)
            yield name, q
            yield scale_name(name), scale
        else:
            yield name, tensor


def expected_weight(plan: Fp8Plan, name: str, tensor: torch.Tensor) -> torch.Tensor:
    """What the engine holds for the actor's `tensor` (verl/rollout/sync_check.py compares the two): the
    FP8 round trip in float32 (with the plan's scale format) for a planned weight, the tensor itself otherwise."""
    return round_trip(tensor.float(), pow2_scales=plan.pow2_scales) if name in plan.quantized else tensor


def dequantized_reads(plan: Fp8Plan, read: dict, names: list, packed: bool = False) -> dict:
    """An engine read of `names` and their scale names ({name: tensor}, fused parts already cut) -> {name:
    weight}, each planned weight dequantized (float32) from its FP8 tensor and scale. A planned weight
    whose engine tensors are not in checkpoint layout (FP8 [N, K] with a [ceil(N/128), ceil(K/128)] scale:
    a kernel that repacked them) is left out: not comparable; so is every planned weight when `packed`
    (vLLM's CPU FP8 kernel keeps the shape but reorders the values for its AMX tiles)."""
    out = {}
    for name in names:
        if name not in read or (packed and name in plan.quantized):
            continue
        if name not in plan.quantized:
            out[name] = read[name]
            continue
        q, scale = read[name], read.get(scale_name(name))
        if scale is None or q.dtype != torch.float8_e4m3fn or q.dim() != 2:
            continue
        if tuple(scale.shape) != (-(-q.shape[0] // BLOCK), -(-q.shape[1] // BLOCK)):
            continue
        out[name] = dequantize_blockwise(q, scale)
    return out
