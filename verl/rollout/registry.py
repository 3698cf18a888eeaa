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
    """The engine `rollout.name` names, on the actor's module (no silent fallback between engines);
    with rollout.tools or rollout.environment it runs multi-turn trajectories (docs/agents.md)."""
    engine = engine_class(config.rollout.name).from_actor(actor_model, tokenizer, config)
    if config.rollout.is_multi_turn:
        from verl.rollout.agent_parts import build_multi_turn

        engine = build_multi_turn(engine, tokenizer, config)
    return engine
