"""The generation engines `rollout.name` can name, and where each lives (imported on use, so a
run with the Hugging Face backend never imports vLLM).

Adding an engine: a RolloutEngine subclass (verl/rollout/base.py) with a
`from_actor(model, tokenizer, config)` constructor in its own module, and one line here.
"""

from __future__ import annotations

import importlib

ENGINES = {
    "hf": "verl.rollout.hf_rollout:HFRollout",
    "vllm": "verl.rollout.vllm_rollout:VLLMRollout",
    "sglang": "verl.rollout.sglang_rollout:SGLangRollout",  # CUDA only
}
# rollout.name: an engine, or auto (vLLM on a GPU when it is installed, else HF; verl/config/root.py)
ENGINE_CHOICES = ("auto", *ENGINES)


def engine_class(name: str):
    module, attr = ENGINES[name].split(":")
    return getattr(importlib.import_module(module), attr)


def build_rollout(config, actor_model, tokenizer):
    """The engine `rollout.name` names, on the actor's module (no silent fallback between engines).
    A multi-turn run's trainer wraps it (verl/rollout/agent_parts.py), whichever backend built it."""
    return engine_class(config.rollout.name).from_actor(actor_model, tokenizer, config)
