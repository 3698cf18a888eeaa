"""Saving the actor as a Hugging Face folder."""

from __future__ import annotations

import os


def save_hf_model(model, tokenizer, path: str) -> str:
    """safetensors weights + config + tokenizer: loadable by AutoModelForCausalLM and vLLM."""
    os.makedirs(path, exist_ok=True)
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    return path
