"""Helpers that move an actor's weights into a vLLM engine, shared by the local and Ray rollouts.

    path = export_hf_folder(model, tokenizer)        # a folder vLLM can load (GGUF, hub names)
    llm.collective_rpc(load_in_place, args=(weights,))  # rollout.weight_reload: direct
    llm.collective_rpc(repack_cpu_shared_weights)    # after an in-place reload on the CPU backend
    quiet_known_reload_noise(llm)                    # two benign warnings of vLLM's reload, dropped
"""

from __future__ import annotations

import logging
import os
from typing import Optional

import torch

from verl.models.lora import base_model
from verl.rollout.hf_weights import hf_named_weights

LAYERWISE_LOGGER = "vllm.model_executor.model_loader.reload.layerwise"  # vLLM's in-place reload (vllm 0.26-0.32)


class KnownReloadNoise(logging.Filter):
    """Drops two warnings of vLLM's layerwise reload that every sync of such a model prints.

    The reload warns "<Layer>: Failed to load weights" for a layer that got no tensor from the
    weights it was handed, and then puts that layer's tensors back as they were. A rotary embedding
    has no weights (its cos/sin cache is computed at start), and a head tied to the embeddings holds
    the embedding's own tensor, which is loaded under the embedding's name: for those two, putting
    the tensors back is the right outcome (tests/rollout/test_vllm_rollout.py::
    test_sync_reaches_every_layer_including_tied_head checks the tied head follows the sync). The
    warning for any other layer stays."""

    def __init__(self, tied_head: bool):
        super().__init__()
        self.tied_head = tied_head

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg != "%s: Failed to load weights" or not record.args:
            return True
        layer = str(record.args[0])
        return not ("RotaryEmbedding" in layer or (self.tied_head and layer == "ParallelLMHead"))


def quiet_known_reload_noise(llm) -> None:
    """Install KnownReloadNoise on vLLM's layerwise-reload logger (once per process)."""
    log = logging.getLogger(LAYERWISE_LOGGER)
    if any(isinstance(f, KnownReloadNoise) for f in log.filters):
        return
    try:
        tied = bool(getattr(llm.llm_engine.model_config.hf_text_config, "tie_word_embeddings", False))
    except AttributeError:
        tied = False  # unknown: the head's warning stays
    log.addFilter(KnownReloadNoise(tied))


def load_in_place(worker, weights: list) -> None:
    """`rollout.weight_reload: direct` (runs inside the worker): the model's own loader copies each
    (HF name, tensor) into the engine's parameter in place (q/k/v into the fused qkv, gate/up into
    gate_up, tensor-parallel shards cut by each parameter's weight loader). vLLM's `reload_weights`
    instead puts every layer back on the meta device, materialises it again, loads it and copies
    the result into the old storage (so that quantized layers are processed again): 0.32 s against
    0.05 s for SmolLM2-135M on this project's CPU (vLLM 0.32; measured with the direct load, whose
    result the CPU backend cannot use: it packs each linear weight after loading and drops the
    parameter's loader, so the CPU keeps the layerwise reload). On a GPU, vLLM 0.26's unquantized
    linear layers keep their parameters as loaded (UnquantizedLinearMethod.process_weights_after_loading
    does nothing off the CPU), so the in-place copy is the whole sync."""
    worker.model_runner.get_model().load_weights(weights)


def choose_weight_reload(requested: str, on_cpu: bool, quantization: Optional[str]) -> tuple[str, str]:
    """(the sync path, a line to log or ''): `requested` (rollout.weight_reload) where it applies.
    The CPU backend replaces each linear weight by a packed GEMM handle after loading (the
    parameters lose their loaders): only the layerwise reload refills them, so the CPU always uses
    it (no line: it is the key's documented meaning). A quantized engine's kernel format is not the
    checkpoint's: only vLLM's reload re-processes it."""
    if on_cpu or requested != "direct":
        return "layerwise", ""
    if quantization is None:
        return "direct", ""
    what = ("an engine whose quantization this vLLM does not report" if quantization == "?"
            else f"a {quantization}-quantized engine")
    return "layerwise", f"verl: rollout.weight_reload: direct does not apply to {what}; syncing with vLLM's layerwise reload"


def engine_quantization(llm) -> Optional[str]:
    """The engine's quantization method (None: plain weights), '?' where this vLLM does not say."""
    model_config = getattr(getattr(llm, "llm_engine", None), "model_config", None)
    return getattr(model_config, "quantization", "?") if model_config is not None else "?"


def repack_cpu_shared_weights(worker) -> int:
    """Rebuild the CPU GEMM kernels of layers that keep their weight (runs inside the worker).

    vLLM's CPU backend packs each linear weight into a kernel handle after loading. The
    in-place reload re-packs every layer it loads, but a tied LM head (tie_word_embeddings:
    lm_head shares embed_tokens' tensor) is never loaded by name, so its handle would keep
    the old weights: generations from a stale head, which the log-prob diff exposes. Layers
    that kept their weight tensor (embedding-backed heads) are re-packed here from it.
    """
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    count = 0
    for module in worker.model_runner.get_model().modules():
        weight = getattr(module, "weight", None)
        if hasattr(module, "cpu_linear") and isinstance(weight, torch.Tensor) and weight.numel() > 0:
            dispatch_cpu_unquantized_gemm(module, remove_weight=False)
            count += 1
    return count


# LLaVA's CLIP / SigLIP tower: transformers 5 (5.19 seen) names its weights model.vision_tower.embeddings.*,
# .encoder.*, .pre_layrnorm.* (and saves them as vision_tower.embeddings.*), where vLLM's LLaVA (0.26-0.32),
# like the hub's LLaVA checkpoints, has them under vision_tower.vision_model.*: neither a folder saved so nor
# a sync loads ("There is no module or parameter named 'vision_tower.embeddings'"). vLLM's own name map
# (hf_to_vllm_mapper) does not cover it, so the names are given the missing level here.
TOWER, TOWER_INNER = "model.vision_tower.", "vision_model."
LLAVA_TOWERS = ("clip_vision_model", "siglip_vision_model")


def has_flat_llava_tower(model: torch.nn.Module) -> bool:
    """Whether the actor is a LLaVA whose CLIP/SigLIP tower is named without `vision_model.` (above)."""
    config = getattr(base_model(model), "config", None)
    vision = getattr(config, "vision_config", None)
    if getattr(vision, "model_type", None) not in LLAVA_TOWERS or "llava" not in str(config.model_type):
        return False
    return any(n.startswith(TOWER) and not n.startswith(TOWER + TOWER_INNER) for n, _ in base_model(model).named_parameters())


def vllm_tower_name(name: str) -> str:
    """model.vision_tower.X -> model.vision_tower.vision_model.X (for an engine whose LLaVA tower has that
    level, see above); other names unchanged."""
    if name.startswith(TOWER) and not name.startswith(TOWER + TOWER_INNER):
        return TOWER + TOWER_INNER + name[len(TOWER):]
    return name


def export_hf_folder(model: torch.nn.Module, tokenizer) -> str:
    """Write a loadable HF folder (config + weights + tokenizer) for models vLLM cannot read
    directly (GGUF files, hub names, a LLaVA tower named as transformers 5 names it); the weights are
    synced in memory right after anyway."""
    import copy
    import tempfile

    from safetensors.torch import save_file

    out = tempfile.mkdtemp(prefix="verl-vllm-")
    base = base_model(model)
    config = copy.deepcopy(base.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # GGUF: the weights written below are dequantised
    config.architectures = [type(base).__name__]
    config.save_pretrained(out)
    rename = vllm_tower_name if has_flat_llava_tower(model) else (lambda n: n)
    save_file({rename(n): t.contiguous().cpu() for n, t in hf_named_weights(model)},
              os.path.join(out, "model.safetensors"))
    tokenizer.save_pretrained(out)
    _copy_processor_files(getattr(base.config, "_name_or_path", ""), out)
    return out


# A vision-language model's processor files, which vLLM reads from the folder to expand image prompts
PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json", "video_preprocessor_config.json",
                   "chat_template.json", "chat_template.jinja")


def _copy_processor_files(source: str, out: str) -> None:
    """Copy the processor's files of the folder the model came from, where there are any (a text model's
    folder has none; a hub name is no folder)."""
    import shutil

    if not source or not os.path.isdir(source):
        return
    for name in PROCESSOR_FILES:
        path = os.path.join(source, name)
        if os.path.isfile(path) and not os.path.exists(os.path.join(out, name)):
            shutil.copyfile(path, os.path.join(out, name))


def read_in_place(worker, names: list) -> dict:
    """(runs inside the worker) {HF name: a CPU copy of the engine's tensor} for a weight check
    (verl.rollout.sync_check). A name the model keeps fused (its `packed_modules_mapping`: q/k/v in
    qkv_proj, gate/up in gate_up_proj) is cut back out of the fused matrix: the parts are stacked along
    dim 0 in the mapping's order, each as many rows as the HF weight has (tensor parallelism of 1)."""
    model = worker.model_runner.get_model()
    # The CPU backend packs each linear weight into its GEMM kernel's own handle after loading and
    # leaves an empty parameter: such a weight cannot be read back (left out: not compared).
    params = {n: p for n, p in model.named_parameters() if p.numel() > 0}
    packed = getattr(model, "packed_modules_mapping", {}) or {}
    out = {}
    for name in names:
        if name in params:
            out[name] = params[name].detach().to("cpu", copy=True)
            continue
        head, leaf, tail = _split_leaf(name)
        for fused, parts in packed.items():
            if leaf in parts and f"{head}.{fused}.{tail}" in params:
                out[name] = (f"{head}.{fused}.{tail}", [f"{head}.{p}.{tail}" for p in parts],
                             params[f"{head}.{fused}.{tail}"].detach().to("cpu", copy=True))
                break
    return out


def _split_leaf(name: str) -> tuple[str, str, str]:
    """'model.layers.0.self_attn.q_proj.weight' -> ('model.layers.0.self_attn', 'q_proj', 'weight')."""
    head, _, tail = name.rpartition(".")
    head, _, leaf = head.rpartition(".")
    return head, leaf, tail


def unfuse(read: dict, shapes: dict) -> dict:
    """read_in_place's answer with each fused entry cut into the part asked for, by the HF parts' rows."""
    out = {}
    for name, value in read.items():
        if not isinstance(value, tuple):
            out[name] = value
            continue
        _, parts, fused = value
        start = 0
        for part in parts:
            rows = shapes[part][0]
            if part == name:
                out[name] = fused[start:start + rows]
                break
            start += rows
    return out
