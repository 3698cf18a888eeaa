"""Model weights on disk: Hugging Face folders (LoRA merged or as adapters), written atomically,
and loading them back into a live module in place."""

from __future__ import annotations

import glob
import os
import shutil
from typing import Optional

import torch

from verl.checkpoint.durable_files import (CheckpointError, atomic_write_json, files_under, fsync_path, fsync_tree,
                                           test_kill_point)

# Written into the temporary folder once every file in it is complete and on disk, before the
# first file moves: {"files": {name: size}}. A crash during the moves then leaves a folder that
# `promote_interrupted_save` can verify and finish moving, instead of the only complete copy of
# the weights being removed as a stale temp.
COMPLETE_MARKER = ".verl-save-complete.json"


def is_peft_model(model) -> bool:
    try:
        from peft import PeftModel
    except ImportError:
        return False
    return isinstance(model, PeftModel)


def save_model_folder(model, tokenizer, path: str, merge_lora: bool) -> list[str]:
    """save_pretrained into a temporary folder `path/.tmp-save-<pid>`, fsync, then move each
    file in with an atomic rename (a crash never leaves a half-written file under its name).
    Returns the names (relative to `path`) of the files written: the final save records their
    sizes and checksums in run_state.json, so a resume can tell a complete final save from one
    a crash cut short (several files, moved one by one, are not one atomic step). A crash while
    the files move leaves the temp folder with its COMPLETE_MARKER: the next run in the folder
    finishes the move (promote_interrupted_save); one before the marker leaves an incomplete
    temp folder, which it removes (run_folder.clean_stale_temps)."""
    os.makedirs(path, exist_ok=True)
    tmp = os.path.join(path, f".tmp-save-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        save_pretrained_into(model, tokenizer, tmp, merge_lora=merge_lora)
        fsync_tree(tmp)
        names = files_under(tmp)
        sizes = {rel: os.path.getsize(os.path.join(tmp, rel)) for rel in names}
        atomic_write_json(os.path.join(tmp, COMPLETE_MARKER), {"files": sizes})
        fsync_path(tmp)
        test_kill_point("model_tmp_filled")
        for i, rel in enumerate(names):
            if i == len(names) // 2:
                test_kill_point("model_half_moved")
            os.makedirs(os.path.dirname(os.path.join(path, rel)), exist_ok=True)
            os.replace(os.path.join(tmp, rel), os.path.join(path, rel))
        fsync_path(path)
        test_kill_point("model_moved")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return names


def promote_interrupted_save(tmp: str) -> Optional[list[str]]:
    """Finish the moves of a save that a crash cut short: `tmp` is `<folder>/.tmp-save-PID`. When
    it holds COMPLETE_MARKER and every listed file is either still in `tmp` or already moved into
    `<folder>`, each with its recorded size, the rest is moved in and `tmp` removed; returns the
    file names. None (nothing touched) when the folder was never complete or does not check out."""
    import json

    folder = os.path.dirname(os.path.abspath(tmp))
    try:
        with open(os.path.join(tmp, COMPLETE_MARKER), encoding="utf-8") as fh:
            sizes = dict(json.load(fh)["files"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    for rel, size in sizes.items():
        where = [p for p in (os.path.join(tmp, rel), os.path.join(folder, rel)) if os.path.isfile(p)]
        if not where or os.path.getsize(where[0]) != size:
            return None
    for rel in sorted(sizes):
        src = os.path.join(tmp, rel)
        if os.path.isfile(src):
            os.makedirs(os.path.dirname(os.path.join(folder, rel)), exist_ok=True)
            os.replace(src, os.path.join(folder, rel))
    fsync_path(folder)
    shutil.rmtree(tmp, ignore_errors=True)
    return sorted(sizes)


def save_hf_model(model, tokenizer, path: str) -> str:
    """safetensors weights + config + tokenizer: loadable by AutoModelForCausalLM and vLLM.

    A PeftModel is merged into its base first (on a copy; the training model keeps its
    adapters), so the folder is a plain model. Files are written into a temporary folder
    next to `path` and moved in one by one with an atomic rename each.
    """
    save_model_folder(model, tokenizer, path, merge_lora=True)
    return path


def save_lora_adapters(model, tokenizer, path: str) -> str:
    """PEFT adapter folder (adapter_model.safetensors + adapter_config.json + tokenizer),
    loadable with `PeftModel.from_pretrained(base, path)`. Atomic like `save_hf_model`."""
    check_lora_model(model)
    save_model_folder(model, tokenizer, path, merge_lora=False)
    return path


def check_lora_model(model) -> None:
    if not is_peft_model(model):
        raise CheckpointError("checkpoint.save_mode: 'lora' saves LoRA adapters, but the actor is not a LoRA "
                              "(peft) model; set model.lora.rank > 0 or use --save_actor_only")


def save_pretrained_into(model, tokenizer, path: str, merge_lora: bool) -> None:
    os.makedirs(path, exist_ok=True)
    if is_peft_model(model) and merge_lora:
        import copy

        merged = copy.deepcopy(model).merge_and_unload()
        merged.save_pretrained(path, safe_serialization=True)
        del merged
    else:
        model.save_pretrained(path, safe_serialization=True)
    if tokenizer is not None:  # with a VL model's processor files (the folder loads as that model again)
        from verl.models.loading import save_tokenizer_files

        save_tokenizer_files(tokenizer, path)


def load_module_weights(model: torch.nn.Module, folder: str) -> None:
    """Load the safetensors in `folder` (written by `save_pretrained` or `save_module`) into
    `model` in place, so optimizers keep pointing at the same parameters.

    Keys absent from the files are allowed only for tied parameters (e.g. GPT-2's lm_head,
    which shares the embedding); anything else missing or unexpected is an error.
    """
    from safetensors.torch import load_file

    if is_peft_model(model) and os.path.exists(os.path.join(folder, "adapter_model.safetensors")):
        from peft import set_peft_model_state_dict

        result = set_peft_model_state_dict(model, load_file(os.path.join(folder, "adapter_model.safetensors")))
        unexpected = getattr(result, "unexpected_keys", []) or []
        if unexpected:
            raise CheckpointError(f"{folder}: adapter weights that the model does not have: {unexpected[:5]}")
        return
    files = sorted(glob.glob(os.path.join(folder, "*.safetensors")))
    if not files:
        raise CheckpointError(f"{folder}: no .safetensors weights")
    state = {}
    for f in files:
        state.update(load_file(f))
    if set(state) - set(model.state_dict()) and hasattr(type(model), "from_pretrained"):
        state = _renamed_by_transformers(model, folder)  # a checkpoint layout transformers converts on load
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected:
        raise CheckpointError(f"{folder}: weights the model does not have: {list(unexpected)[:5]}")
    if missing:
        by_name = dict(model.named_parameters(remove_duplicate=False))
        by_name.update(dict(model.named_buffers(remove_duplicate=False)))
        loaded_ids = {id(by_name[k]) for k in state if k in by_name}
        untied = [k for k in missing if k not in by_name or id(by_name[k]) not in loaded_ids]
        # Non-persistent buffers never reach state_dict; only parameters/persistent buffers count.
        untied = [k for k in untied if k in dict(model.state_dict())]
        if untied:
            raise CheckpointError(f"{folder}: weights missing from the checkpoint: {untied[:5]}")


def _renamed_by_transformers(model, folder: str) -> dict:
    """The weights of `folder` under the live model's names. transformers 5 saves some models in their
    checkpoint layout and converts them back in from_pretrained: a vision-language model under its checkpoint
    names (Qwen2.5-VL: `visual.*`, `model.layers.*`; in memory `model.visual.*`, `model.language_model.layers.*`),
    an MoE model's experts one by one (`mlp.experts.0.gate_proj.weight`; in memory one fused
    `mlp.experts.gate_up_proj` of all experts). Loaded through it, then copied in place by the caller."""
    fresh = type(model).from_pretrained(folder, dtype=next(model.parameters()).dtype)
    return fresh.state_dict()


def save_module(model: torch.nn.Module, path: str) -> None:
    """A plain nn.Module (e.g. the critic's value model) as one safetensors file."""
    from safetensors.torch import save_model

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    save_model(model, path)
