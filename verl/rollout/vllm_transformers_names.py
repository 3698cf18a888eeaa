"""Names an older vLLM imports from transformers that a newer transformers renamed (a vLLM general plugin).

vLLM 0.26 (the H200's, `verl[vllm]`) imports, in vllm/model_executor/models/pixtral.py,
`PixtralRotaryEmbedding` and `position_ids_in_meshgrid` from transformers' modeling_pixtral; transformers
5.17 renamed the first to `PixtralVisionRotaryEmbedding` and dropped the second (vLLM 0.32 no longer imports
either). vLLM's LLaVA module imports its Pixtral module, so with transformers >= 5.17 every LLaVA model
(CLIP or SigLIP tower too) fails vLLM's architecture check: "Model architectures
['LlavaForConditionalGeneration'] failed to be inspected" (seen on the H200, 2026-12-03; vllm-project/vllm
PR 56496 names the same rename).

`register()` puts a stand-in under each missing name. It does not try to emulate the old classes: a stand-in
raises one line naming the versions the moment it is used, so a model whose vision tower is Pixtral's fails
loudly while LLaVA with a CLIP tower, which never touches them, runs. Nothing is set where transformers has
the name.

vLLM checks a model's architecture in a child process (`python -m vllm.model_executor.models.registry`,
which loads vLLM's general plugins first): pyproject.toml declares `register` as the entry point
`vllm.general_plugins: verl_transformers_names`, which pip writes on install; verl.rollout.vllm_rollout's
`import_vllm` also calls it in the engine's own process. vLLM calls general plugins without a guard, so
`register` never raises: a module that breaks on import gets one warning line and no stand-ins.
"""

from __future__ import annotations

import importlib
import logging

# module -> names an older vLLM imports from it that newer transformers no longer has
MISSING_NAMES = {
    "transformers.models.pixtral.modeling_pixtral": ("PixtralRotaryEmbedding", "position_ids_in_meshgrid"),
}


def _stand_in(module: str, name: str):
    def refuse(*args, **kwargs):
        import transformers

        raise ImportError(f"this vLLM needs {module}.{name}, which transformers {transformers.__version__} no "
                          "longer has: a Pixtral vision tower needs vLLM >= 0.32 or transformers < 5.17")

    refuse.__name__ = refuse.__qualname__ = name
    refuse.verl_stand_in = True
    return refuse


def register() -> list[str]:
    """Set a stand-in for each name in MISSING_NAMES that transformers lacks; the names set (idempotent)."""
    added = []
    for module_name, names in MISSING_NAMES.items():
        try:
            module = importlib.import_module(module_name)
        except ImportError:  # a transformers without the model family: nothing of it to stand in for
            continue
        except Exception as exc:  # noqa: BLE001 - vLLM calls plugins unguarded: a failure here would stop every
            # engine start, text models included; the model family that needs the module fails on its own import
            logging.getLogger(__name__).warning("verl: %s does not import (%s: %s); no stand-ins set for it",
                                                module_name, type(exc).__name__, exc)
            continue
        for name in names:
            if not hasattr(module, name):
                setattr(module, name, _stand_in(module_name, name))
                added.append(f"{module_name}.{name}")
    return added
