"""Prompt data: files and datasets -> `PromptRow`s -> left-padded `Batch`es (see docs/data.md).

    from verl.data import load_prompt_rows, PromptLoader, build_prompt_loaders
"""

_EXPORTS = {
    "PromptRow": "verl.data.sources", "DataError": "verl.data.sources", "read_rows": "verl.data.sources",
    "DEFAULT_PROMPTS": "verl.data.prompts", "load_prompt_rows": "verl.data.prompts",
    "PromptLoader": "verl.data.prompts", "build_prompt_loaders": "verl.data.prompts",
    "render_prompt": "verl.data.prompts", "generate_arithmetic": "verl.data.arithmetic",
}


def __getattr__(name):
    # Lazy, so that `verl data arithmetic` does not import torch.
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'verl.data' has no attribute {name!r}")


__all__ = list(_EXPORTS)
