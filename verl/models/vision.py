"""The vision tower of a vision-language model: which modules it is, freezing it, keeping LoRA off it.

Module names in transformers 5.19 (under the top-level `model.`):
    Qwen2.5-VL   model.visual (patch embedding, blocks, and the merger that projects into the LM)
    LLaVA        model.vision_tower (CLIP), model.multi_modal_projector
The projector counts as the tower's (real verl's freeze of Qwen's `visual` includes its merger).
"""

from __future__ import annotations

import torch

VISION_PARTS = ("visual", "vision_tower", "vision_model", "multi_modal_projector")

# peft's exclude_modules regex (full match on a module's name): any module under a vision part
LORA_EXCLUDE = r".*\b(" + "|".join(VISION_PARTS) + r")\b.*"


def is_vision_name(name: str) -> bool:
    """Whether the parameter or module `name` belongs to a vision tower (or its projector)."""
    return any(part in name.split(".") for part in VISION_PARTS)


def vision_parameters(model: torch.nn.Module) -> list[tuple[str, torch.nn.Parameter]]:
    return [(n, p) for n, p in model.named_parameters() if is_vision_name(n)]


def freeze_vision_tower(model: torch.nn.Module) -> int:
    """requires_grad off for the vision tower's parameters (model.freeze_vision_tower); returns how many
    parameters (elements) were frozen. On a text model the key is refused before it loads
    (verl.models.loading.check_vision_language)."""
    params = vision_parameters(model)
    for _, p in params:
        p.requires_grad_(False)
    return sum(p.numel() for _, p in params)


def is_vision_language_model(model: torch.nn.Module) -> bool:
    config = getattr(model, "config", None)
    return getattr(config, "vision_config", None) is not None
