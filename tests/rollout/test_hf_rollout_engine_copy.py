"""HF rollout with its own weight copy in the compute dtype (`rollout.hf_weight_copy`) and the
static KV cache (`rollout.cache_implementation: static`), on CPU with the tiny qwen2 model.

On CPU transformers does not compile the decode step (it does so on CUDA only), so the static
path here is the eager StaticCache: same cache, same masks, no torch.compile.
"""

from __future__ import annotations

import math

import pytest
import torch

from conftest import small_overrides
from greedy_paths import assert_greedy_agree, model_forward
from verl import create_trainer, load_config
from verl.batch import Batch
from verl.config import ConfigError, LoraConfig, RolloutConfig
from verl.rollout.base import SamplingParams
from verl.rollout.hf_rollout import HFRollout

BF16 = torch.bfloat16
PROMPTS = ["I love", "Hello there my friend", "The"]  # different lengths: left padding matters


@pytest.fixture(scope="module")
def tokenizer(tiny_qwen2):
    from verl.models.loading import load_tokenizer

    return load_tokenizer(tiny_qwen2)


def load(path, dtype):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=dtype)


def prompt_batch(tokenizer, texts=PROMPTS) -> Batch:
    enc = tokenizer(list(texts), return_tensors="pt", padding=True)
    n = len(texts)
    return Batch(input_ids=enc.input_ids, attention_mask=enc.attention_mask, prompt_text=list(texts),
                 ground_truth=[None] * n, data_source=["test"] * n, extra=[{} for _ in range(n)],
                 group_id=list(range(n)))


def copy_engine(actor, tokenizer, **cfg) -> HFRollout:
    return HFRollout(actor, tokenizer, RolloutConfig(hf_weight_copy=True, **cfg), compute_dtype=BF16)


GREEDY = SamplingParams(n=1, max_new_tokens=12, greedy=True)


# ---------------------------------------------------------------------------
# The copy generates like a bf16 model and leaves the actor alone
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["qwen2", "llama", "gpt2"])
def test_bf16_copy_generates_like_a_bf16_model(arch, request):
    """Copy of an fp32 actor == the same checkpoint loaded in bf16: both round the fp32 weights
    to bf16 the same way and keep the same fp32 buffers (rotary inv_freq), so every op sees
    identical inputs: tokens and engine log-probs are bit-identical, greedy and sampled."""
    from verl.models.loading import load_tokenizer

    path = request.getfixturevalue(f"tiny_{arch}")
    tokenizer = load_tokenizer(path)
    engine = copy_engine(load(path, torch.float32), tokenizer)
    reference = HFRollout(load(path, BF16), tokenizer, RolloutConfig())  # no autocast: plain bf16
    prompts = prompt_batch(tokenizer)
    ours, ref = engine.generate(prompts, GREEDY), reference.generate(prompts, GREEDY)
    assert torch.equal(ours.responses, ref.responses)
    assert torch.equal(ours.rollout_log_probs, ref.rollout_log_probs)
    sampling = SamplingParams(n=2, max_new_tokens=12, temperature=1.0)
    torch.manual_seed(0)
    ours = engine.generate(prompts, sampling)
    torch.manual_seed(0)
    ref = reference.generate(prompts, sampling)
    assert torch.equal(ours.responses, ref.responses)
    assert torch.equal(ours.rollout_log_probs, ref.rollout_log_probs)


def test_copy_frees_and_changes_nothing_of_the_actor(tiny_qwen2, tokenizer):
    actor = load(tiny_qwen2, torch.float32).train()
    before = {n: (p.data_ptr(), p.dtype, p.requires_grad, p.detach().clone()) for n, p in actor.named_parameters()}
    engine = copy_engine(actor, tokenizer)
    engine.generate(prompt_batch(tokenizer), GREEDY)
    assert actor.training  # the copy generates; the actor's mode is not touched
    for name, p in actor.named_parameters():
        ptr, dtype, grad, value = before[name]
        assert (p.data_ptr(), p.dtype, p.requires_grad) == (ptr, dtype, grad), name
        assert torch.equal(p.detach(), value), name
    copy_ptrs = {p.data_ptr() for p in engine.model.parameters()}
    assert not copy_ptrs & {ptr for ptr, *_ in before.values()}  # own storage, nothing shared
    assert all(p.dtype == BF16 and not p.requires_grad for p in engine.model.parameters())
    # The actor's generation config is the copy's: settings made on the actor apply to generation.
    assert engine.model.generation_config is actor.generation_config


def test_without_copy_the_actor_generates_and_sync_is_a_no_op(tiny_qwen2, tokenizer):
    actor = load(tiny_qwen2, torch.float32)
    engine = HFRollout(actor, tokenizer, RolloutConfig(), compute_dtype=BF16)
    assert engine.model is actor and engine.autocast_dtype == BF16
    assert engine.sync_weights(actor) == {}


# ---------------------------------------------------------------------------
# Weight sync
# ---------------------------------------------------------------------------


def test_sync_after_an_optimizer_step(tiny_qwen2, tokenizer):
    actor = load(tiny_qwen2, torch.float32)
    engine = copy_engine(actor, tokenizer)
    ptrs = [p.data_ptr() for p in engine.model.parameters()]
    # One Adam step: its first update is ~lr * sign(grad) = 1e-2 per element. The tiny model's
    # weights are below 2 in magnitude (layer norms start at 1), where a bf16 step is at most
    # 2^-7 ~ 0.008, so a 0.01 move shows after rounding to bf16 in every tensor that has a gradient.
    opt = torch.optim.Adam(actor.parameters(), lr=1e-2)
    ids = prompt_batch(tokenizer).input_ids
    actor(input_ids=ids, labels=ids).loss.backward()
    opt.step()
    copy_params = dict(engine.model.named_parameters())
    for name, p in actor.named_parameters():
        assert not torch.equal(copy_params[name], p.detach().to(BF16)), f"{name}: the copy followed before sync"
    metrics = engine.sync_weights(actor)
    for name, p in actor.named_parameters():
        assert torch.equal(copy_params[name], p.detach().to(BF16)), name
    assert [p.data_ptr() for p in engine.model.parameters()] == ptrs  # in place: a compiled graph stays valid
    # The tiny qwen2 has no persistent buffers, so the copy holds exactly its (tied-once)
    # parameters, 2 bytes each in bf16.
    assert set(actor.state_dict()) <= {n for n, _ in actor.named_parameters(remove_duplicate=False)}
    n_params = sum(p.numel() for p in actor.parameters())
    assert metrics["rollout/weight_sync_bytes"] == 2 * n_params
    assert metrics["timing_s/update_weights"] >= 0


def test_lora_copy_holds_the_merged_weights(tiny_qwen2, tokenizer):
    """LoRA actor as verl builds it (bf16 base, fp32 adapters): the copy holds W + (alpha/r) B A."""
    from verl.models.lora import apply_lora

    rank, alpha = 4, 8.0  # scale alpha / rank = 2
    actor = apply_lora(load(tiny_qwen2, BF16), LoraConfig(rank=rank, alpha=alpha, target_modules=["q_proj", "v_proj"]))
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():  # B starts at zero (merged == base); make the delta visible
        for name, p in actor.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
    engine = copy_engine(actor, tokenizer)
    copy_params = dict(engine.model.named_parameters())
    for name, mod in actor.get_base_model().named_modules():
        if name.endswith(("q_proj", "v_proj")):
            base_w = mod.base_layer.weight.detach()
            delta = (alpha / rank) * (mod.lora_B["default"].weight @ mod.lora_A["default"].weight)
            got = copy_params[f"{name}.weight"]
            # The copy holds bf16(W + bf16(d)): two roundings with unit roundoff u = 2^-8 (8 significant
            # bits), got - s = d e1 + s' e2 with |e1|, |e2| <= u and |s'| <= |s| + u|d|, so
            # |got - s| <= u ((1 + u)|d| + |s|) for the exact sum s = W + d (fp32 here: 2^-16 slack).
            exact, u = base_w.float() + delta, 2.0**-8
            bound = u * ((1 + u) * delta.abs() + exact.abs()) * (1 + 2.0**-16)
            assert ((got.float() - exact).abs() <= bound).all(), name
            assert not torch.equal(got, base_w), name
        elif name.endswith(("k_proj", "o_proj", "gate_proj")):
            assert torch.equal(copy_params[f"{name}.weight"], mod.weight), name  # no adapter: the base as is
    # The copy is a plain model: no peft layers came along.
    assert not any("lora" in n for n, _ in engine.model.named_parameters())


# ---------------------------------------------------------------------------
# Static cache
# ---------------------------------------------------------------------------


def _record_cache_lengths(engine) -> list:
    """Wrap the engine's generate to record the length of the static cache it used."""
    lengths, generate = [], engine.model.generate

    def spy(*args, **kwargs):
        out = generate(*args, **kwargs)
        lengths.append(out.past_key_values.layers[0].keys.shape[2])  # (B, kv_heads, max_cache_len, head_dim)
        return out

    engine.model.generate = spy
    return lengths


def test_static_cache_same_greedy_tokens_fixed_length(tiny_qwen2, tokenizer):
    prompts = prompt_batch(tokenizer)
    max_len = 64
    # The two caches are two computation paths: attention over all 64 slots (the masked ones add
    # exact zeros) vs over the tokens so far, summed in another blocking. Greedy tokens agree
    # except after a near tie (greedy_paths), log-probs within the rounding of each dtype.
    # fp32 (no autocast): a few ulps of the attention sums, observed <= 1.2e-6; a full-sequence
    # forward differs from either as little: 1e-5 for both.
    actor = load(tiny_qwen2, torch.float32)
    dyn = HFRollout(actor, tokenizer, RolloutConfig()).generate(prompts, GREEDY)
    stat = HFRollout(actor, tokenizer, RolloutConfig(cache_implementation="static", max_model_len=max_len))
    lengths = _record_cache_lengths(stat)
    out = stat.generate(prompts, GREEDY)
    assert_greedy_agree(model_forward(actor), out, dyn, lp_tol=1e-5, forward_tol=1e-5)
    # bf16 copy: log-probs within bf16 noise (8-bit mantissa, relative 2^-8 per rounding, a few
    # roundings through 2 layers: observed <= 7.5e-4, bounded by 0.05).
    engine16 = copy_engine(actor, tokenizer)
    dyn16 = engine16.generate(prompts, GREEDY)
    stat16 = copy_engine(actor, tokenizer, cache_implementation="static", max_model_len=max_len)
    lengths16 = _record_cache_lengths(stat16)
    out16 = stat16.generate(prompts, GREEDY)
    assert_greedy_agree(model_forward(engine16.model), out16, dyn16, lp_tol=0.05, forward_tol=0.05)
    # A narrower prompt batch (different prompt width) gets a cache of the same length: the
    # decode step's shapes do not change from step to step.
    stat16.generate(prompt_batch(tokenizer, ["The", "I"]), GREEDY)
    assert lengths == [max_len] and lengths16 == [max_len, max_len]


def test_static_cache_lora_needs_no_copy(tiny_qwen2, tokenizer):
    """A LoRA base loads in the compute dtype, so keys and values share one dtype under autocast:
    the static cache works on the actor's own module (what config_checks allows). Static vs
    dynamic cache under bf16 autocast: two paths, as above (bf16 noise, bounded by 0.05)."""
    from verl.models.lora import apply_lora

    actor = apply_lora(load(tiny_qwen2, BF16), LoraConfig(rank=4, alpha=8.0))
    prompts = prompt_batch(tokenizer)
    dyn = HFRollout(actor, tokenizer, RolloutConfig(), compute_dtype=BF16).generate(prompts, GREEDY)
    cfg = RolloutConfig(cache_implementation="static", max_model_len=64)
    stat = HFRollout(actor, tokenizer, cfg, compute_dtype=BF16).generate(prompts, GREEDY)
    assert_greedy_agree(model_forward(actor, BF16), stat, dyn, lp_tol=0.05, forward_tol=0.05)


def test_static_cache_under_autocast_over_fp32_is_refused(tiny_qwen2, tokenizer):
    cfg = RolloutConfig(cache_implementation="static", max_model_len=64)
    with pytest.raises(ValueError, match="rollout.hf_weight_copy: true"):
        HFRollout(load(tiny_qwen2, torch.float32), tokenizer, cfg, compute_dtype=BF16)
    with pytest.raises(ValueError, match="rollout.max_model_len"):
        HFRollout(load(tiny_qwen2, torch.float32), tokenizer, RolloutConfig(cache_implementation="static"))


# ---------------------------------------------------------------------------
# Config
# ---------------------------------------------------------------------------


def _cfg(tmp_path, **over):
    return load_config(None, small_overrides(tmp_path, **{"model.name": "tiny:qwen2", **over}))


def test_config_static_needs_the_copy_under_bf16(tmp_path):
    with pytest.raises(ConfigError) as exc:
        _cfg(tmp_path, **{"model.dtype": "bfloat16", "rollout.cache_implementation": "static"})
    msg = str(exc.value)
    assert "rollout.cache_implementation" in msg and "rollout.hf_weight_copy" in msg and "\n" not in msg
    ok = _cfg(tmp_path, **{"model.dtype": "bfloat16", "rollout.cache_implementation": "static",
                           "rollout.hf_weight_copy": "true"})
    assert ok.rollout.max_model_len == ok.data.max_prompt_length + ok.rollout.max_new_tokens  # the cache length
    _cfg(tmp_path, **{"model.dtype": "float32", "rollout.cache_implementation": "static"})  # one dtype: fine
    _cfg(tmp_path, **{"model.dtype": "bfloat16", "rollout.cache_implementation": "static", "model.lora.rank": 4})
    with pytest.raises(ConfigError, match="rollout.cache_implementation: 'paged'"):
        _cfg(tmp_path, **{"rollout.cache_implementation": "paged"})
    with pytest.raises(ConfigError, match="rollout.hf_weight_copy: only for rollout.name: hf"):
        _cfg(tmp_path, **{"rollout.name": "vllm", "rollout.hf_weight_copy": "true"})


# ---------------------------------------------------------------------------
# End to end
# ---------------------------------------------------------------------------


def test_grpo_run_with_the_copy_and_static_cache(tmp_path):
    cfg = _cfg(tmp_path, **{"algorithm.name": "grpo", "model.dtype": "bfloat16", "rollout.hf_weight_copy": "true",
                            "rollout.cache_implementation": "static"})
    trainer = create_trainer(cfg)
    actor = trainer.actor.model
    assert trainer.rollout.model is not actor  # generation runs on the copy
    before = {n: p.detach().clone() for n, p in actor.named_parameters()}
    copy_params = dict(trainer.rollout.model.named_parameters())
    n_params = sum(p.numel() for p in actor.parameters())
    for _ in range(cfg.training.total_steps):
        m = trainer.step()
        for key in ("reward", "kl", "pg_loss", "timing_s/update_weights", "rollout/logprob_diff"):
            assert math.isfinite(m[key]), (key, m[key])
        assert m["rollout/weight_sync_bytes"] == 2 * n_params  # bf16 copy of every (tied-once) parameter
        for name, p in actor.named_parameters():  # the copy holds the updated actor, cast to bf16
            assert torch.equal(copy_params[name], p.detach().to(BF16)), name
    unchanged = [n for n, p in actor.named_parameters() if torch.equal(before[n], p.detach())]
    assert not unchanged, unchanged[:5]
    assert all(p.dtype == torch.float32 for p in actor.parameters())  # master weights stay fp32


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (transformers compiles the decode step on CUDA only)")
def test_compiled_static_decode_follows_in_place_syncs_on_cuda(tmp_path, tiny_qwen2):
    """On CUDA the static cache's decode step is compiled (CUDA graphs). Weights are written into
    the copy in place after every update; the compiled step must generate with the new ones.
    With a large learning rate the policy moves far between steps (checked on a fixed batch),
    while the engine's log-probs stay within 0.05 of the actor's recomputation at every step:
    a compiled step that kept the old weights would drift by about as much as the policy did."""
    cfg = _cfg(tmp_path, **{"device": "cuda", "algorithm.name": "grpo", "model.dtype": "bfloat16",
                            "rollout.hf_weight_copy": "true", "rollout.cache_implementation": "static",
                            "training.lr": 3e-3, "training.total_steps": 4, "rollout.max_new_tokens": 16})
    trainer = create_trainer(cfg)
    storage = {n: p.data_ptr() for n, p in trainer.rollout.model.named_parameters()}
    first = None
    for step in range(cfg.training.total_steps):
        m = trainer.step()
        assert m["rollout/logprob_diff"] < 0.05, (step, m["rollout/logprob_diff"])
        if first is None:
            first = trainer.run.last_batch
            lp_first, _ = trainer.actor.compute_log_probs(first)
    lp_last, _ = trainer.actor.compute_log_probs(first)
    moved = float(((lp_last - lp_first).abs() * first.response_mask).sum() / first.response_mask.sum())
    assert moved > 0.1, moved  # the policy really changed while the engine kept up
    assert storage == {n: p.data_ptr() for n, p in trainer.rollout.model.named_parameters()}
