"""The reward types verl knows, and where each one's builder lives.

`REWARD_TYPES` is the one list of valid `reward_fn.type` values (the config takes its
choices from it). Adding a reward type: a builder in its own module and one line in _BUILDERS. Builders are imported lazily, so choosing `string_match` never imports the code
for Hugging Face reward models or HTTP clients.

A builder takes a `RewardFnConfig` and returns a batch reward function
`fn(prompts, responses, samples) -> list[float]` (see `verl.rewards.base`).
"""

from __future__ import annotations

import importlib
from typing import Callable

# type -> "module:builder". `combined` is assembled by the manager from its components.
_BUILDERS = {
    "string_match": "verl.rewards.rule:build_string_match",
    "keyword": "verl.rewards.rule:build_keyword",
    "length_penalty": "verl.rewards.rule:build_length_penalty",
    "python": "verl.rewards.python_fn:build_python",
    "gsm8k": "verl.rewards.verifiable:build_gsm8k",
    "math": "verl.rewards.verifiable:build_math",
    "number": "verl.rewards.verifiable:build_number",
    "format": "verl.rewards.verifiable:build_format",
    "math_dapo": "verl.rewards.math_dapo:build_math_dapo",
    "geo3k": "verl.rewards.geo3k:build_geo3k",
    "by_data_source": "verl.rewards.by_data_source:build_by_data_source",
    "huggingface_rm": "verl.rewards.hf_rm:build_huggingface_rm",
    "api": "verl.rewards.api:build_api",
    "environment": "verl.rewards.agent:build_environment",
    "tool_call": "verl.rewards.agent:build_tool_call",
}
REWARD_TYPES = tuple(_BUILDERS) + ("combined",)


def get_builder(reward_type: str) -> Callable:
    """The builder for `reward_type`; a clear error for an unknown type."""
    if reward_type not in _BUILDERS:
        raise ValueError(f"reward_fn.type: '{reward_type}' is not one of {', '.join(REWARD_TYPES)}")
    module_name, attr = _BUILDERS[reward_type].split(":")
    return getattr(importlib.import_module(module_name), attr)
