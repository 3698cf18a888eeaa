"""LoRA through peft: wrap the actor, run the reference as the same model with adapters off,
and give merged weights to whoever needs a plain model (vLLM sync, full saves).

    model = apply_lora(hf_model, config.model.lora)     # a peft PeftModel; only adapters train
    with adapters_disabled(model): ...                  # the base model = the reference policy
    for name, tensor in merged_state_items(model): ...  # HF checkpoint names, W + (alpha/r) B A

With LoRA the frozen base weights need no float32 master copy, so the actor loads them in
`model.dtype` (bf16 on GPU: 2 bytes/parameter) and peft keeps the adapters in float32.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch


def lora_enabled(model_cfg) -> bool:
    return model_cfg.lora.rank > 0


def is_peft_model(model) -> bool:
    try:
        from peft import PeftModel
    except ImportError:
        return False
    return isinstance(model, PeftModel)


def _target_modules(value):
    if isinstance(value, str) and value != "all-linear":
        return [v.strip() for v in value.split(",") if v.strip()]
    return value


# model.lora.init_lora_weights -> peft's init_lora_weights (B is zero in both)
PEFT_INIT = {"kaiming": True, "gaussian": "gaussian"}


def apply_lora(model: torch.nn.Module, lora_cfg) -> torch.nn.Module:
    """Wrap a causal LM with LoRA adapters (peft). B starts at zero, so the wrapped model
    computes exactly the base model until the first update; with `adapter_path`, the saved
    adapter is loaded instead (its weights, trainable) and the model starts where it left off."""
    try:
        from peft import LoraConfig, PeftModel, get_peft_model
    except ImportError as exc:
        raise ImportError("model.lora.rank > 0 needs peft (pip install peft)") from exc
    from verl.errors import ConfigError

    from verl.models.vision import LORA_EXCLUDE, is_vision_language_model

    if lora_cfg.adapter_path is not None:  # its settings were adopted by the config (verl/models/lora_adapter.py)
        try:
            peft_model = PeftModel.from_pretrained(model, lora_cfg.adapter_path, is_trainable=True)
        except (ValueError, KeyError, RuntimeError) as exc:  # e.g. targets or shapes of another base model
            raise ConfigError(f"model.lora.adapter_path: the adapter in {lora_cfg.adapter_path} does not fit "
                              f"model.name: {str(exc).splitlines()[0]}") from None
        return _finish(peft_model, lora_cfg)
    targets, exclude = _target_modules(lora_cfg.target_modules), lora_cfg.exclude_modules
    if exclude is None and targets == "all-linear" and is_vision_language_model(model):
        exclude = LORA_EXCLUDE  # a VL model: "all-linear" adapts the language model, not the vision tower
    parameters = _target_parameters(model, targets, getattr(lora_cfg, "target_parameters", "auto"))
    cfg = LoraConfig(r=lora_cfg.rank, lora_alpha=lora_cfg.alpha, lora_dropout=lora_cfg.dropout,
                     target_modules=targets, exclude_modules=exclude, bias="none", task_type="CAUSAL_LM",
                     init_lora_weights=PEFT_INIT[lora_cfg.init_lora_weights], target_parameters=parameters)
    try:
        peft_model = get_peft_model(model, cfg)
    except ValueError as exc:
        line = str(exc).splitlines()[0]
        if "lora_dropout" in line:  # peft's ParamWrapper (LoRA on the fused experts) takes no dropout
            raise ConfigError(f"model.lora.dropout: {lora_cfg.dropout}: LoRA on a mixture-of-experts model's "
                              f"experts takes no dropout (peft: {line}); set model.lora.dropout=0, or adapt the "
                              f"attention only (model.lora.target_modules=q_proj,k_proj,v_proj,o_proj)") from None
        key = "target_parameters" if "target_parameters" in line else "target_modules"
        raise ConfigError(f"model.lora.{key}: {line}") from None
    return _finish(peft_model, lora_cfg)


def _finish(peft_model, lora_cfg):
    """Adapters in float32; with model.lora.fused, the adapted linear layers on the fused forward."""
    _float_adapters(peft_model)
    if lora_cfg.fused:
        from verl.models.lora_fused import fuse_lora_linears

        fuse_lora_linears(peft_model)
    return peft_model


def _target_parameters(model, targets, setting) -> list | None:
    """peft's target_parameters for `model.lora.target_parameters` (a list: as given). auto: under all-linear,
    the fused expert tensors (3-D parameters, named from their decoder layer down: mlp.experts.gate_up_proj)
    and the routers' weights of a mixture-of-experts model, which peft's own conversion covers for some
    families (Qwen3-MoE, Mixtral, OLMoE) and not for others (Qwen2-MoE's routed experts); None otherwise."""
    if setting != "auto":
        return list(setting) or None
    from verl.models.moe import routers

    found = routers(model)
    if targets != "all-linear" or not found:
        return None
    router_ids = {id(r.weight) for r in found}
    experts = found[0].num_experts
    names = set()
    for name, param in model.named_parameters():  # (E, in, out) expert tensors; not a vision tower's Conv1d
        if (param.ndim == 3 and param.shape[0] == experts) or id(param) in router_ids:
            layer_local = name.split(".layers.", 1)[-1].partition(".")[2]  # mlp.experts.gate_up_proj
            if layer_local:
                names.add(layer_local)
    return sorted(names) or None


def _float_adapters(peft_model):
    for name, param in peft_model.named_parameters():  # adapters train in float32
        if param.requires_grad and param.dtype != torch.float32:
            param.data = param.data.float()
    return peft_model


def adapters_disabled(model):
    """Context in which a PeftModel computes its base model (no-op for plain models)."""
    if is_peft_model(model):
        return model.disable_adapter()
    return contextlib.nullcontext()


def base_model(model: torch.nn.Module) -> torch.nn.Module:
    """The transformers model under a peft wrapper (LoRA layers stay injected); a plain
    model is returned as it is."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def adapted_weights(model: torch.nn.Module) -> dict[int, torch.nn.Module]:
    """id(weight) -> the peft layer that adapts it, for every weight with an unmerged LoRA delta.

    A layer's weight is its base layer's `.weight`, or, for peft's `ParamWrapper` (LoRA on a parameter
    itself: an MoE layer's fused experts, (E, in, out), and its router), the parameter it wraps; wrappers of
    two parameters of one module nest, so names alone (`experts.base_layer.base_layer.down_proj`) cannot say
    which layer adapts which tensor, and the tensor's identity can."""
    if not is_peft_model(model):
        return {}
    from peft.tuners.tuners_utils import BaseTunerLayer

    layers = {}
    for mod in base_model(model).modules():
        if isinstance(mod, BaseTunerLayer) and hasattr(mod, "get_delta_weight") and not mod.merged:
            get_param = getattr(mod, "get_param", None)  # ParamWrapper
            weight = get_param() if callable(get_param) else mod.get_base_layer().weight
            layers[id(weight)] = mod
    return layers


def checkpoint_name(name: str) -> str:
    """A peft model's state_dict name as the plain model has it: `modules_to_save.<adapter>` and every
    `base_layer` (nested ones too) removed."""
    if ".modules_to_save." in name:
        head, _, rest = name.partition(".modules_to_save.")
        name = f"{head}.{rest.partition('.')[2]}"
    while ".base_layer." in name:
        name = name.replace(".base_layer.", ".")
    return name


def merged_state_items(model: torch.nn.Module, dtype: torch.dtype | None = None,
                       skip=None) -> Iterator[tuple[str, torch.Tensor]]:
    """(Hugging Face checkpoint name, tensor) for every weight of the model, LoRA merged.

    Names are those `save_pretrained` of the merged model writes (and vLLM's loaders read), in the model's
    memory layout (an MoE model's experts fused: verl.rollout.hf_weights converts them to the checkpoint's):
    peft's decorations (`base_model.model.`, `.base_layer`, `modules_to_save.<adapter>`) removed, adapter
    tensors left out, tied weights (lm_head = embed_tokens) once, names `skip` is true for left out. Each
    adapted weight is W + scale * B @ A for the active adapters (per expert for LoRA on fused experts),
    computed one tensor at a time (no merged copy of the model); the adapters themselves are untouched. For
    a plain model this is its state_dict with tied weights once. `dtype` casts floating tensors.
    """
    base = base_model(model)
    layers = adapted_weights(model)
    seen: set[int] = set()
    for name, tensor in base.state_dict(keep_vars=True).items():
        if ".lora_" in name or ".original_module." in name or "lora_magnitude_vector" in name:
            continue
        name = checkpoint_name(name)
        if skip is not None and skip(name):
            continue
        if id(tensor) in seen:
            continue
        seen.add(id(tensor))
        value = tensor.detach()
        mod = layers.get(id(tensor))
        if mod is not None:
            active = [a for a in mod.active_adapters if a in mod.lora_A]
            if active and not getattr(mod, "disable_adapters", False):
                with torch.no_grad():
                    value = value + sum(mod.get_delta_weight(a) for a in active).to(value.dtype)
        if dtype is not None and value.is_floating_point():
            value = value.to(dtype)
        yield name, value


def save_merged(model: torch.nn.Module, tokenizer, path: str) -> str:
    """A plain Hugging Face folder of the merged model (loadable by AutoModelForCausalLM and
    vLLM), written from `merged_state_items` -- no deep copy of the model in memory."""
    base = base_model(model)
    state = dict(merged_state_items(model))
    base.save_pretrained(path, state_dict=state, safe_serialization=True)
    if tokenizer is not None:
        from verl.models.loading import save_tokenizer_files

        save_tokenizer_files(tokenizer, path)
    return path


def lora_param_count(model: torch.nn.Module) -> tuple[int, int]:
    """(trainable, total) parameter counts."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    return trainable, total
