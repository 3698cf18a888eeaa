"""verl.rollout.vllm_transformers_names: the names vLLM 0.26's Pixtral module imports from a transformers that renamed
them (the H200's vLLM LLaVA failure of 2026-12-03), and the CLI's one line for a multi-line error."""

from __future__ import annotations

import subprocess
import sys

import pytest

from verl.rollout import vllm_transformers_names as vllm_transformers
from verl.trainer.launch import one_line

PIXTRAL = "transformers.models.pixtral.modeling_pixtral"
# vllm/model_executor/models/pixtral.py of vLLM 0.26, lines 18-22, as it stands there
VLLM_026_IMPORT = ("from transformers.models.pixtral.modeling_pixtral import (PixtralRotaryEmbedding, "
                   "apply_rotary_pos_emb, position_ids_in_meshgrid)")


def test_register_adds_exactly_the_missing_names_and_each_refuses_in_one_line():
    import importlib

    module = importlib.import_module(PIXTRAL)
    missing = [n for n in vllm_transformers.MISSING_NAMES[PIXTRAL] if not hasattr(module, n)]
    kept = {n: getattr(module, n) for n in vllm_transformers.MISSING_NAMES[PIXTRAL] if hasattr(module, n)}
    added = vllm_transformers.register()
    assert added == [f"{PIXTRAL}.{n}" for n in missing]
    assert vllm_transformers.register() == []  # idempotent: vLLM loads plugins once per process, verl once more
    exec(VLLM_026_IMPORT, {})  # the line that failed on the H200 imports now
    for name, value in kept.items():  # a transformers that has a name keeps its own
        assert getattr(module, name) is value
    for name in missing:
        with pytest.raises(ImportError, match=rf"{PIXTRAL}\.{name}, which transformers .* Pixtral vision tower"):
            getattr(module, name)(object())


def test_a_module_that_fails_to_import_leaves_vllm_running(monkeypatch, caplog):
    """vLLM calls general plugins without a guard: register() must not raise for a module that breaks on import."""
    monkeypatch.setattr(vllm_transformers, "MISSING_NAMES", {"verl_test_no_such_module": ("x",),
                                                             "json.tool_broken": ("y",)})

    def broken(name):
        if name == "json.tool_broken":
            raise RuntimeError("CUDA driver too old")
        raise ImportError(name)

    monkeypatch.setattr(vllm_transformers.importlib, "import_module", broken)
    with caplog.at_level("WARNING"):
        assert vllm_transformers.register() == []
    assert "json.tool_broken does not import (RuntimeError: CUDA driver too old)" in caplog.text
    assert "verl_test_no_such_module" not in caplog.text  # a missing family is not worth a line


def test_vllm_loads_the_plugin_in_a_child_process_as_its_registry_does():
    """vLLM inspects an architecture in `python -m vllm.model_executor.models.registry`, which calls
    load_general_plugins() first: the entry point from pyproject.toml (written by pip install) must make
    vLLM 0.26's import line work there, with nothing of verl imported by hand."""
    pytest.importorskip("vllm")
    code = ("from vllm.plugins import load_general_plugins; load_general_plugins(); "
            f"{VLLM_026_IMPORT}; print('imported')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "imported" in proc.stdout, proc.stderr[-2000:]


def test_one_line_keeps_the_reason_of_a_pydantic_validation_error():
    # the shape of vLLM's ModelConfig error (pydantic): a heading, the reason, a link
    message = ("1 validation error for ModelConfig\n"
               "  Value error, Model architectures ['LlavaForConditionalGeneration'] failed to be inspected. "
               "Please check the logs for more details. [type=value_error, input_value=ArgsKwargs((), {}), "
               "input_type=ArgsKwargs]\n"
               "    For further information visit https://errors.pydantic.dev/2.12/v/value_error")
    assert one_line(message) == ("1 validation error for ModelConfig: Value error, Model architectures "
                                 "['LlavaForConditionalGeneration'] failed to be inspected. Please check the logs "
                                 "for more details.")
    assert one_line("CUDA error: out of memory\nsecond line") == "CUDA error: out of memory"  # a whole first line
    assert one_line("") == ""
    assert one_line("x" * 500, limit=20) == "x" * 17 + "..."
