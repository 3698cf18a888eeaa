"""The engines' routed experts in the rollout Batch's columns, for `rollout.routing_replay: engine` on vLLM and
SGLang (the hf engine records its own routers: verl/rollout/hf_rollout.py).

vLLM (0.26 and later) records the experts each MoE layer chose for every token a forward saw when the engine
starts with `enable_return_routed_experts=True`: each finished sample's `CompletionOutput.routed_experts` is an
array (S, L, k), row j the j-th token of the request (the prompt's tokens from `routed_experts_prompt_start`,
0 here, then the generated ones; the last sampled token is never fed back, so S is at most prompt + response
- 1). In vLLM 0.26 the V1 model runner records it (its V2 runner lists "routed experts capture" as
unsupported and vLLM falls back to V1); vLLM 0.32 records it in the V2 runner only, which needs Triton.

SGLang (0.5.16) records them when its Engine starts with `enable_return_routed_experts=True` and a request asks
`return_routed_experts=True`: `meta_info["routed_experts"]` is the base64 of an int32 array (S, num_hidden_layers,
num_experts_per_tok) over the positions [0, prompt + response - 1), every decoder layer included; the MoE
layers' rows are kept (`moe_layers`).

The Batch's columns are the left-padded prompt (width P) and then the response: token j of row r sits at
column pad_r + j, pad_r the row's left padding. Columns with nothing recorded (padding, the last token) hold
-1, which the replay reads as "the router's own choice" (verl/models/moe.py).
"""

from __future__ import annotations

import base64

import numpy as np
import torch

from verl.models.moe import EXPERT_DTYPE


class MissingRouting(RuntimeError):
    pass


def refuse_unrecorded_routing(exc: Exception, engine: str) -> None:
    """ConfigError naming rollout.routing_replay when an engine's start failed because it cannot record the
    routed experts (vLLM 0.32's CPU build: its V2 model runner, which needs Triton); else nothing."""
    text = str(exc)
    if "Model Runner V2" not in text and "routed experts" not in text:
        return
    from verl.errors import ConfigError

    raise ConfigError(f"rollout.routing_replay: engine: {engine} cannot record the routed experts here "
                      f"({_first_error_line(text)}); use routing_replay: pi_old, or rollout.name: hf") from None


def _first_error_line(text: str) -> str:
    """The message of a (pydantic-wrapped) engine config error, without pydantic's frame."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if ln.startswith("Value error, "):
            return ln[len("Value error, "):].split(" [type=")[0]
    return lines[0] if lines else "no message"


def routed_columns_from_engine(routed: list, prompt_mask: torch.Tensor, width: int) -> torch.Tensor:
    """(N, width, L, k) int16 from the samples' routed_experts arrays (S_r, L, k), in the Batch's row order;
    `prompt_mask` (N, P): the rows' left-padded prompt mask; `width` = P + R, the Batch's columns."""
    if any(r is None for r in routed):
        raise MissingRouting("rollout.routing_replay: engine: the engine returned no routed experts for a sample "
                             "(vLLM >= 0.26 records them with enable_return_routed_experts on its V1 model runner, "
                             "SGLang with enable_return_routed_experts and return_routed_experts)")
    first = torch.as_tensor(routed[0])
    out = torch.full((len(routed), width, *first.shape[1:]), -1, dtype=EXPERT_DTYPE)
    pads = (prompt_mask.shape[1] - prompt_mask.sum(dim=1)).tolist()
    for row, (arr, pad) in enumerate(zip(routed, pads)):
        experts = torch.as_tensor(arr)
        n = max(0, min(experts.shape[0], width - int(pad)))
        out[row, int(pad):int(pad) + n] = experts[:n].to(EXPERT_DTYPE)
    return out


def moe_layers(config: dict) -> list[int]:
    """The indices of a decoder's MoE layers, from its config.json (text config): Qwen2-MoE / Qwen3-MoE's
    `mlp_only_layers` and `decoder_sparse_step`, DeepSeek's `first_k_dense_replace` and `moe_layer_freq`;
    every layer otherwise (Mixtral, OLMoE)."""
    n = int(config["num_hidden_layers"])
    dense_only = set(config.get("mlp_only_layers") or [])
    step = int(config.get("decoder_sparse_step") or 1)
    first = int(config.get("first_k_dense_replace") or 0)
    freq = int(config.get("moe_layer_freq") or 1)
    return [i for i in range(n) if i not in dense_only and (i + 1) % step == 0 and i >= first and i % freq == 0]


def sglang_routed_experts(meta_info: dict, config: dict) -> "np.ndarray | None":
    """(S, L_moe, k) int32 of one SGLang result's routing (None when it carries none); `config`: the
    model's text config (num_hidden_layers, num_experts_per_tok)."""
    encoded = meta_info.get("routed_experts")
    if encoded is None:
        return None
    flat = np.frombuffer(base64.b64decode(encoded), dtype=np.int32)
    layers, k = int(config["num_hidden_layers"]), int(config["num_experts_per_tok"])
    return flat.reshape(-1, layers, k)[:, moe_layers(config)]


def model_text_config(model_path: str) -> dict:
    """The text part of a model's config.json (a folder's file, else transformers' resolution of the name)."""
    from verl.rollout.vllm_multimodal import folder_config

    cfg = folder_config(model_path)
    if not cfg:
        from transformers import AutoConfig

        cfg = AutoConfig.from_pretrained(model_path).to_dict()
    return cfg.get("text_config", cfg)
