"""SGLang backend, the parts that run without a GPU: config errors (one line, exit 2), the engine's
own refusals, the requests it builds and how it reads SGLang's results. The engine itself is
tested on the H200 (tests/gpu/test_gpu_sglang.py): SGLang has no CPU build."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from verl.batch import Batch
from verl.config import RolloutConfig, config_from_dict
from verl.errors import ConfigError
from verl.rollout import sglang_rollout as sr
from verl.rollout.base import SamplingParams

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _config(device: str, dtype: str = "bfloat16"):
    return config_from_dict({"device": device, "model": {"name": "tiny:llama", "dtype": dtype},
                             "rollout": {"name": "sglang"}})


def test_sglang_on_the_cpu_is_refused_when_the_config_loads():
    with pytest.raises(ConfigError, match=r"rollout.name: sglang needs a CUDA GPU .* device is cpu; use rollout.name: "
                                          r"vllm or rollout.name: hf"):
        _config("cpu")


def test_sglang_missing_names_the_extra(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "sglang" else real(name, *a))
    with pytest.raises(ConfigError, match=r"pip install -e '.*\[sglang\]'"):
        _config("cuda")


def test_float32_generation_is_refused_with_the_key_to_change():
    """SGLang's CUDA kernels (RMSNorm first) have no float32 path: refused when the config loads,
    not at the first step in the scheduler process."""
    with pytest.raises(ConfigError, match=r"model.dtype: float32 cannot be generated with rollout.name: sglang"):
        _config("cuda", dtype="float32")


def test_cli_answers_one_line_and_exit_2(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "verl.cli", "train", "model.name=tiny:llama", "rollout.name=sglang",
                           "device=cpu", "--save_dir", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env=dict(os.environ, PYTHONPATH=ROOT))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "rollout.name: sglang needs a CUDA GPU" in lines[0], proc.stderr
    assert not (tmp_path / "out").exists()  # nothing was started


def test_engine_refuses_a_cpu_device_before_importing_sglang(monkeypatch):
    monkeypatch.setitem(sys.modules, "sglang", None)  # an import would raise ImportError, not this
    with pytest.raises(ValueError, match="needs a CUDA GPU"):
        sr.SGLangRollout("unused", None, RolloutConfig(), device="cpu")


def test_import_hint_when_sglang_is_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "sglang", None)
    with pytest.raises(ImportError, match=r"pip install -e .*\[sglang\]"):
        sr.import_sglang()


def test_raw_pre_temperature_log_probs_are_refused(monkeypatch):
    """SGLANG_RETURN_ORIGINAL_LOGPROB would make the engine report log_softmax(logits), not the
    distribution sampled at temperature T, which TIS and rollout/logprob_diff compare against."""
    fake = type(sys)("sglang")
    monkeypatch.setitem(sys.modules, "sglang", fake)
    monkeypatch.setenv("SGLANG_RETURN_ORIGINAL_LOGPROB", "True")
    with pytest.raises(ValueError, match="SGLANG_RETURN_ORIGINAL_LOGPROB"):
        sr.import_sglang()
    monkeypatch.delenv("SGLANG_RETURN_ORIGINAL_LOGPROB")
    assert sr.import_sglang() is fake


def test_unsupported_architecture_names_the_model(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"]}))
    with pytest.raises(ValueError, match=r"does not support the architecture GPT2LMHeadModel of .*; use rollout.name: "
                                         r"vllm or rollout.name: hf"):
        sr.check_architecture(str(tmp_path), {"LlamaForCausalLM", "Qwen2ForCausalLM"})
    sr.check_architecture(str(tmp_path), {"GPT2LMHeadModel"})  # supported: no error
    sr.check_architecture(str(tmp_path), None)  # registry not found: SGLang itself checks


def test_sampling_dict_maps_the_shared_settings():
    s = SamplingParams(max_new_tokens=7, temperature=0.7, top_p=0.9, top_k=5, n=3, stop=["\n\n"])
    assert sr.sampling_dict(s, {}) == {"max_new_tokens": 7, "temperature": 0.7, "top_p": 0.9, "top_k": 5,
                                      "no_stop_trim": True, "skip_special_tokens": False, "stop": ["\n\n"]}
    # top_k 0 is "off", which SGLang spells -1; greedy overrides temperature, top_p and top_k.
    assert sr.sampling_dict(SamplingParams(top_k=0), {})["top_k"] == -1
    g = sr.sampling_dict(SamplingParams(temperature=0.7, top_p=0.5, top_k=3, greedy=True), {"ignore_eos": True})
    assert (g["temperature"], g["top_p"], g["top_k"], g["ignore_eos"]) == (0.0, 1.0, -1, True)
    assert "stop" not in g


def test_requests_repeat_each_prompt_n_times_adjacent():
    # Row 0 is left-padded (pad 0): its real tokens are [5, 6]; row 1 is [7, 8, 9].
    prompts = Batch(input_ids=torch.tensor([[0, 5, 6], [7, 8, 9]]), attention_mask=torch.tensor([[0, 1, 1], [1, 1, 1]]),
                    prompt_text=["a", "b"], group_id=["g0", "g1"])
    engine = sr.SGLangRollout.__new__(sr.SGLangRollout)
    engine.extra_sampling_kwargs = {"ignore_eos": True}
    rows, params = engine.build_requests(prompts, SamplingParams(n=3, max_new_tokens=4))
    assert rows == [[5, 6]] * 3 + [[7, 8, 9]] * 3
    assert params["max_new_tokens"] == 4 and params["ignore_eos"] is True


def _result(entries, output_ids=None, reason="stop"):
    out = {"meta_info": {"output_token_logprobs": entries, "finish_reason": {"type": reason}}}
    if output_ids is not None:
        out["output_ids"] = output_ids
    return out


def test_results_are_read_as_aligned_tokens_and_log_probs():
    out = _result([(-0.5, 11, None), (-1.25, 12, None), (-0.0, 2, None)], output_ids=[11, 12, 2])
    assert sr.response_of(out, 0) == ([11, 12, 2], [-0.5, -1.25, -0.0], True)
    assert sr.response_of(_result([(-0.1, 4, None)], reason="length"), 1) == ([4], [-0.1], False)
    with pytest.raises(RuntimeError, match="do not line up.*sample 3"):
        sr.response_of(_result([(-0.5, 11, None)], output_ids=[11, 99]), 3)
    aborted = {"meta_info": {"output_token_logprobs": [], "finish_reason": {"type": "abort", "message": "oom"}}}
    with pytest.raises(RuntimeError, match="aborted sample 2: oom"):
        sr.response_of(aborted, 2)


def test_sglang_is_a_registered_engine_choice():
    from verl.rollout.registry import ENGINE_CHOICES, engine_class

    assert "sglang" in ENGINE_CHOICES and engine_class("sglang") is sr.SGLangRollout


def test_sglang_loop_cannot_take_the_trainers_signals():
    """SGLang's request loop adds asyncio SIGTERM/SIGQUIT handlers at its first call (its SIGTERM
    handler drains, shuts the scheduler down and SIGKILLs the trainer). After keep_signal_handlers,
    the engine's loop declines them and the trainer's handler stays in place."""
    import asyncio
    import signal
    import types

    def trainer_handler(signum, frame):  # stands for verl.signals' graceful stop
        pass

    def failed_child_handler(signum, frame):  # stands for scheduler_failed
        pass

    previous = signal.signal(signal.SIGTERM, trainer_handler)
    previous_quit = signal.signal(signal.SIGQUIT, failed_child_handler)
    loop = asyncio.new_event_loop()
    try:
        engine = types.SimpleNamespace(loop=loop)
        sr.keep_signal_handlers(engine)

        async def first_call():  # what SGLang's TokenizerManager.auto_create_handle_loop does
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, lambda: None)
            asyncio.get_running_loop().add_signal_handler(signal.SIGQUIT, lambda: None)

        loop.run_until_complete(first_call())
        assert signal.getsignal(signal.SIGTERM) is trainer_handler
        assert signal.getsignal(signal.SIGQUIT) is failed_child_handler
        assert not getattr(loop, "_signal_handlers", {})  # asyncio registered nothing
    finally:
        loop.close()
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGQUIT, previous_quit)


def test_a_failed_sglang_child_ends_the_run_with_one_line(tmp_path):
    """SIGQUIT from a failing SGLang child: one line on stderr, the children stopped, exit 3 (a lost engine
    process, as under Ray)."""
    fake = tmp_path / "sglang" / "srt"
    fake.mkdir(parents=True)
    (tmp_path / "sglang" / "__init__.py").write_text("")
    (fake / "__init__.py").write_text("")
    (fake / "utils.py").write_text("def kill_process_tree(pid, include_parent=True):\n"
                                   "    print('children stopped', include_parent, flush=True)\n")
    code = ("import os, signal, time\nfrom verl.rollout.sglang_rollout import scheduler_failed\n"
            "signal.signal(signal.SIGQUIT, scheduler_failed)\nos.kill(os.getpid(), signal.SIGQUIT)\ntime.sleep(30)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), ROOT])))
    assert proc.returncode == 3
    assert proc.stdout.strip() == "children stopped False"
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: SGLang engine process lost: its scheduler or "
                                                   "detokenizer process died"), proc.stderr
    assert "--resume auto" in lines[0]
