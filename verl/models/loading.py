"""Loading tokenizers and causal LMs from a hub name, a local folder, a GGUF file or `tiny:<arch>`.

Errors name the config key (`model.name`, `critic.name`, ...) so a bad path is a
one-line fix, not a transformers traceback.
"""

from __future__ import annotations

import importlib.util
import os

import torch

from verl.config import ConfigError
from verl.models.tiny import resolve_model_name

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class ModelLoadError(ConfigError):
    """A model or tokenizer could not be loaded; the message names the config key."""


def quiet_transformers() -> None:
    """No per-load progress bars from transformers: verl prints its own progress."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device: '{name}' was asked for but no CUDA GPU is visible (use device: cpu or auto)")
    return torch.device(name)


def torch_dtype(name: str) -> torch.dtype:
    return DTYPES[name]


def _path_or_hub(name: str, key: str) -> str:
    path = resolve_model_name(name)
    looks_local = path.startswith((".", "/", "~")) or os.sep in path.strip("/").split("/", 1)[-1]
    if looks_local and not os.path.exists(os.path.expanduser(path)):
        raise ModelLoadError(f"{key}: '{name}' does not exist (expected a local model folder or a hub name)")
    return os.path.expanduser(path)


def load_tokenizer(name: str, key: str = "model.name", trust_remote_code: bool = False, gguf_file=None):
    """Tokenizer with a pad token (EOS when it has none) and left padding for generation."""
    from transformers import AutoTokenizer

    quiet_transformers()
    path = _path_or_hub(name, key)
    kwargs = {"trust_remote_code": trust_remote_code}
    if gguf_file:
        kwargs["gguf_file"] = gguf_file
    try:
        tok = AutoTokenizer.from_pretrained(path, **kwargs)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"{key}: cannot load a tokenizer from '{name}': {str(exc).splitlines()[0]}") from None
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return tok


def attn_implementation(model_cfg, device_type: str | None = None, dtype: str | None = None) -> str:
    """The transformers attention implementation for `model.attn_implementation` on a device of
    type `device_type` ("cpu", "cuda"; None: not the CPU). auto: "sdpa", except "eager" for a
    bfloat16/float16 model on the CPU: there SDPA's flash kernel runs the backward ~2.5x slower
    than eager attention's batched matmuls (16 x 104-token rows, 9 heads: 66 vs 26 ms a layer).
    `dtype`: the compute dtype when not `model.dtype` (the critic's `critic.dtype`)."""
    name = "flash_attention_2" if model_cfg.use_flash_attention else model_cfg.attn_implementation
    if name == "auto":
        return "eager" if device_type == "cpu" and (dtype or model_cfg.dtype) in ("bfloat16", "float16") else "sdpa"
    if name == "flash_attention_2" and importlib.util.find_spec("flash_attn") is None:
        key = "model.use_flash_attention: true" if model_cfg.use_flash_attention else \
            "model.attn_implementation: flash_attention_2"
        raise ConfigError(f"{key} needs the flash-attn package (pip install flash-attn); "
                          "use sdpa (PyTorch's attention) instead")
    return name


def load_causal_lm(model_cfg, dtype: torch.dtype, key: str = "model.name", name: str | None = None,
                   device_type: str | None = None):
    """A Hugging Face causal LM in `dtype`, dropout off (RL recomputes log-probs and needs
    train-mode and eval-mode forwards to agree); attention per `attn_implementation` for a
    model that will run on `device_type`."""
    from transformers import AutoModelForCausalLM

    name = name or model_cfg.name
    path = _path_or_hub(name, key)
    kwargs = dict(dtype=dtype, trust_remote_code=model_cfg.trust_remote_code,
                  attn_implementation=attn_implementation(model_cfg, device_type))
    try:
        if model_cfg.gguf_file:
            from verl.models.gguf import load_gguf_model

            model = load_gguf_model(path, model_cfg.gguf_file, dtype)
        else:
            model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"{key}: cannot load a causal LM from '{name}': {str(exc).splitlines()[0]}") from None
    disable_dropout(model)
    return model


def disable_dropout(model: torch.nn.Module) -> None:
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
