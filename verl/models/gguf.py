"""GGUF checkpoints (llama.cpp format) as ordinary Hugging Face models.

transformers reads a .gguf file and dequantizes it (`from_pretrained(dir, gguf_file=...)`,
needs the `gguf` package). Such a model trains like any other, but `save_pretrained`
refuses it, and vLLM wants a safetensors folder, so `convert_gguf_to_hf` builds a fresh
model from the same config (without the GGUF `quantization_config`), copies the
dequantized weights in and saves a normal folder (safetensors + tokenizer + generation
config) that `AutoModelForCausalLM.from_pretrained(path)` and vLLM load.
"""

from __future__ import annotations

import glob
import os
from typing import Optional

import torch

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _torch_dtype(dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(_DTYPES)}, got {dtype!r}")
    return _DTYPES[dtype]


def split_gguf_path(dir_or_file: str, gguf_file: Optional[str] = None) -> tuple[str, str]:
    """(folder, file name) for `from_pretrained(folder, gguf_file=name)`.

    Accepts a .gguf path, a folder plus a file name (or an absolute file path), or a
    folder holding exactly one .gguf file.
    """
    if gguf_file is None and dir_or_file.endswith(".gguf"):
        dir_or_file, gguf_file = os.path.split(os.path.abspath(dir_or_file))
    elif gguf_file is not None and os.path.isabs(gguf_file):
        dir_or_file, gguf_file = os.path.split(gguf_file)
    elif gguf_file is None:
        found = sorted(glob.glob(os.path.join(dir_or_file, "*.gguf")))
        if len(found) != 1:
            raise FileNotFoundError(f"{dir_or_file}: expected one .gguf file, found {len(found)}; "
                                    f"name it with model.gguf_file")
        gguf_file = os.path.basename(found[0])
    path = os.path.join(dir_or_file, gguf_file)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such GGUF file")
    return dir_or_file, gguf_file


def load_gguf_model(dir_or_file: str, gguf_file: Optional[str] = None, dtype="float32"):
    """The dequantized causal LM in a .gguf file, as a transformers model in `dtype`."""
    from transformers import AutoModelForCausalLM

    folder, name = split_gguf_path(dir_or_file, gguf_file)
    return AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=_torch_dtype(dtype))


def load_gguf_tokenizer(dir_or_file: str, gguf_file: Optional[str] = None):
    """The tokenizer (with its chat template, when the file has one) stored in a .gguf file."""
    from transformers import AutoTokenizer

    folder, name = split_gguf_path(dir_or_file, gguf_file)
    return AutoTokenizer.from_pretrained(folder, gguf_file=name)


def convert_gguf_to_hf(dir_or_file: str, gguf_file: Optional[str], out_dir: str, dtype="bfloat16") -> str:
    """Write the model and tokenizer of a .gguf file as a safetensors folder; return `out_dir`."""
    from transformers import AutoModelForCausalLM

    loaded = load_gguf_model(dir_or_file, gguf_file, dtype="float32")
    tokenizer = load_gguf_tokenizer(dir_or_file, gguf_file)
    config = loaded.config
    if hasattr(config, "quantization_config"):  # marks the model as GGUF-loaded; not true of the copy
        del config.quantization_config
    config.dtype = _torch_dtype(dtype)
    fresh = AutoModelForCausalLM.from_config(config, dtype=_torch_dtype(dtype))
    state = loaded.state_dict()
    missing, unexpected = fresh.load_state_dict(state, strict=False)
    # Tied output embeddings show up as "missing" on one side only; anything else is a real mismatch.
    tied = set(getattr(fresh, "_tied_weights_keys", None) or []) if config.tie_word_embeddings else set()
    missing = [k for k in missing if k not in tied and not (config.tie_word_embeddings and k == "lm_head.weight")]
    if missing or unexpected:
        raise RuntimeError(f"GGUF conversion: weights do not match the config (missing {missing[:5]}, "
                           f"unexpected {unexpected[:5]})")
    if config.tie_word_embeddings:
        fresh.tie_weights()
    gen = fresh.generation_config
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        value = getattr(tokenizer, key, None)
        if getattr(gen, key, None) is None and value is not None:
            setattr(gen, key, value)
    os.makedirs(out_dir, exist_ok=True)
    fresh.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    return out_dir
