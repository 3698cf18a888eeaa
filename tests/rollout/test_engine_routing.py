"""rollout.routing_replay: engine on vLLM and SGLang: the routed experts each engine returns per sample, (S, L, k)
from the first token of the unpadded prompt (SGLang's as base64 int32 over every decoder layer), placed in the
rollout Batch's columns (left-padded prompt, then the response), -1 where nothing was recorded. Fake engine
outputs; the engines themselves record them on the GPU (tests/gpu/test_gpu_moe.py; vLLM's CPU build records
them only in its V2 model runner, which needs Triton; SGLang runs on CUDA only)."""

from __future__ import annotations

import base64
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from verl.batch import Batch
from verl.models.tiny import tiny_model_path
from verl.rollout.base import SamplingParams
from verl.rollout.engine_routing import MissingRouting, moe_layers, routed_columns_from_engine, sglang_routed_experts


def test_the_engines_rows_land_after_each_rows_padding():
    # prompts of 1 and 2 real tokens in a width of 2 (row 0 has one pad column), 2 response columns: width 4.
    # Row 0 recorded 2 positions (prompt token, first response token; its last token never went through a
    # forward): columns 1, 2 get them, 0 (pad) and 3 stay -1. Row 1 recorded 3: columns 0-2.
    prompt_mask = torch.tensor([[0, 1], [1, 1]])
    layers, k = 2, 2
    row0 = np.array([[[1, 2], [3, 0]], [[2, 3], [0, 1]]], dtype=np.int32)            # (2, L, k)
    row1 = np.arange(3 * layers * k, dtype=np.int32).reshape(3, layers, k) % 4      # (3, L, k)
    got = routed_columns_from_engine([row0, row1], prompt_mask, width=4)
    assert got.shape == (2, 4, layers, k) and got.dtype == torch.int16
    assert (got[0, 0] == -1).all() and (got[0, 3] == -1).all()
    assert got[0, 1:3].tolist() == row0.tolist()
    assert got[1, :3].tolist() == row1.tolist() and (got[1, 3] == -1).all()


def test_a_longer_record_is_cut_at_the_batchs_width_and_a_missing_one_is_named():
    full = np.zeros((9, 1, 2), dtype=np.int32)
    got = routed_columns_from_engine([full], torch.tensor([[0, 0, 1]]), width=5)
    assert (got[0, :2] == -1).all() and (got[0, 2:] == 0).all()
    with pytest.raises(MissingRouting, match="enable_return_routed_experts"):
        routed_columns_from_engine([full, None], torch.tensor([[1], [1]]), width=3)


def test_rollout_from_outputs_carries_the_routing(monkeypatch):
    """VLLMRollout's readout with routing on: two prompts, two samples each, fake RequestOutputs."""
    pytest.importorskip("vllm")
    from transformers import AutoTokenizer

    from verl.rollout.vllm_rollout import VLLMRollout

    engine = object.__new__(VLLMRollout)
    engine.tokenizer = AutoTokenizer.from_pretrained(tiny_model_path("qwen3_moe"))
    engine.record_routing, engine.vision_language, engine.mm_prompts_checked = True, False, 0
    prompts = Batch(input_ids=torch.tensor([[0, 5, 6], [7, 8, 9]]), attention_mask=torch.tensor([[0, 1, 1], [1, 1, 1]]),
                    prompt_text=["a", "b"])

    def sample(index, tokens, prompt_len):
        seen = prompt_len + len(tokens) - 1  # every position but the last sampled token's
        routed = np.full((seen, 2, 2), index + 1, dtype=np.int32)
        return SimpleNamespace(index=index, token_ids=tokens, finish_reason="length", logprobs=None,
                               routed_experts=routed)

    outputs = [SimpleNamespace(outputs=[sample(0, [11, 12], 2), sample(1, [13, 14], 2)], prompt_token_ids=[5, 6]),
               SimpleNamespace(outputs=[sample(0, [15, 16], 3), sample(1, [17], 3)], prompt_token_ids=[7, 8, 9])]
    batch = engine.rollout_from_outputs(prompts, SamplingParams(n=2, max_new_tokens=2, log_probs=False), outputs,
                                        (0.0, 0.0, 0.0))
    routed = batch.routed_experts  # (4, 3 + 2, 2, 2), rows prompt-major
    assert routed.shape == (4, 5, 2, 2)
    assert (routed[0, 0] == -1).all() and (routed[0, 1:4] == 1).all() and (routed[0, 4] == -1).all()
    assert (routed[1, 1:4] == 2).all()
    assert (routed[2, :4] == 1).all() and (routed[2, 4] == -1).all()
    assert (routed[3, :3] == 2).all() and (routed[3, 3:] == -1).all()  # one response token: its column is padding


def test_the_cpu_engine_records_the_routing_or_says_in_one_line_why_not():
    """vLLM's CPU build records routed experts only in its V2 model runner, which needs Triton: where it
    cannot, building the engine is refused naming the key; where it can, every real position but each
    sample's last carries experts."""
    pytest.importorskip("vllm")
    from transformers import AutoTokenizer

    from verl.config import RolloutConfig
    from verl.errors import ConfigError
    from verl.rollout.vllm_rollout import VLLMRollout

    path = tiny_model_path("qwen3_moe")
    tok = AutoTokenizer.from_pretrained(path)
    tok.padding_side = "left"
    try:
        engine = VLLMRollout(path, tok, RolloutConfig(routing_replay="engine", max_model_len=128, kv_cache_gb=0.1),
                             dtype="float32", device="cpu")
    except ConfigError as exc:
        assert str(exc).startswith("rollout.routing_replay: engine: vLLM ") and "pi_old" in str(exc)
        assert "\n" not in str(exc)
        return
    enc = tok(["What is 2+3?", "Hello there"], return_tensors="pt", padding=True)
    out = engine.generate(Batch(input_ids=enc.input_ids, attention_mask=enc.attention_mask, prompt_text=["a", "b"],
                                group_id=[0, 1]), SamplingParams(n=1, max_new_tokens=4, greedy=True))
    recorded = (out.routed_experts[..., 0, 0] >= 0)
    assert torch.equal(recorded.sum(dim=1), out.attention_mask.sum(dim=1) - 1)


def test_the_moe_layers_of_each_config_shape():
    assert moe_layers({"num_hidden_layers": 4}) == [0, 1, 2, 3]  # Mixtral, OLMoE: every layer
    # Qwen2-MoE / Qwen3-MoE: layer i is sparse when (i + 1) % decoder_sparse_step == 0 and not in mlp_only_layers
    assert moe_layers({"num_hidden_layers": 6, "decoder_sparse_step": 2, "mlp_only_layers": [5]}) == [1, 3]
    assert moe_layers({"num_hidden_layers": 5, "first_k_dense_replace": 2}) == [2, 3, 4]  # DeepSeek


def test_sglangs_base64_routing_is_decoded_to_the_moe_layers():
    # 3 positions x 2 layers x top-2, values 0..11 in C order; with layer 0 dense only layer 1's rows stay
    arr = np.arange(12, dtype=np.int32).reshape(3, 2, 2)
    meta = {"routed_experts": base64.b64encode(arr.tobytes()).decode()}
    cfg = {"num_hidden_layers": 2, "num_experts_per_tok": 2}
    assert sglang_routed_experts(meta, cfg).tolist() == arr.tolist()
    assert sglang_routed_experts(meta, {**cfg, "mlp_only_layers": [0]}).tolist() == arr[:, 1:].tolist()
    assert sglang_routed_experts({}, cfg) is None


def test_sglang_generate_asks_for_the_routing_and_carries_it():
    """SGLangRollout.generate on a fake Engine: it asks return_routed_experts and places each result's routing."""
    from transformers import AutoTokenizer

    from verl.rollout.sglang_rollout import SGLangRollout

    cfg = {"num_hidden_layers": 2, "num_experts_per_tok": 2}
    asked = {}

    class FakeEngine:
        def generate(self, input_ids, sampling_params, return_logprob, **extra):
            asked.update(extra)
            outs = []
            for row in input_ids:
                tokens = [11, 12]
                seen = len(row) + len(tokens) - 1
                routing = np.full((seen, 2, 2), len(row), dtype=np.int32)
                outs.append({"output_ids": tokens, "meta_info": {
                    "output_token_logprobs": [(-0.5, t, None) for t in tokens], "finish_reason": {"type": "length"},
                    "routed_experts": base64.b64encode(routing.tobytes()).decode()}})
            return outs

    engine = object.__new__(SGLangRollout)
    engine.tokenizer = AutoTokenizer.from_pretrained(tiny_model_path("qwen3_moe"))
    engine.engine, engine.asleep, engine.extra_sampling_kwargs = FakeEngine(), False, {}
    engine.record_routing, engine._text_config = True, cfg
    prompts = Batch(input_ids=torch.tensor([[0, 5, 6], [7, 8, 9]]), attention_mask=torch.tensor([[0, 1, 1], [1, 1, 1]]),
                    prompt_text=["a", "b"])
    batch = engine.generate(prompts, SamplingParams(n=1, max_new_tokens=2))
    assert asked == {"return_routed_experts": True}
    routed = batch.routed_experts  # (2, 3 + 2, L, k): row 0's prompt has 2 real tokens (value 2), row 1's 3
    assert (routed[0, 0] == -1).all() and (routed[0, 1:4] == 2).all() and (routed[0, 4] == -1).all()
    assert (routed[1, :4] == 3).all() and (routed[1, 4] == -1).all()
