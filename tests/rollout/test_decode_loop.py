"""verl's own decode loop (`rollout.decode_loop: verl`) and its sampler.

On CPU the loop runs eagerly (no CUDA graph); the last test runs the captured graph on a GPU.
The reference throughout is transformers' `generate` over the same bf16 weight copy and the same
static cache: identical masks and positions give identical greedy tokens and log-probs. That is
one computation path (the same model forward at the same shapes, (B, P) then (B, 1) over all
64 slots; our additive -inf-like mask and generate's mask hide the same keys, whose softmax terms
are exact zeros either way), so those comparisons are bitwise. Where the loop computes something
else (attention windows narrower than the cache, another batch composition), greedy tokens are
compared with `greedy_paths.assert_greedy_agree`: equal except after a near tie.
"""

from __future__ import annotations

import math

import pytest
import torch

from conftest import small_overrides
from greedy_paths import assert_greedy_agree, model_forward
from test_hf_rollout_engine_copy import BF16, load, prompt_batch
from verl import create_trainer, load_config
from verl.config import ConfigError, RolloutConfig
from verl.models.loading import load_tokenizer
from verl.rollout.base import SamplingParams
from verl.rollout.decode_loop import CHECK_EVERY, StaticDecoder, window_for
from verl.rollout.hf_rollout import HFRollout, first_stop_prefix
from verl.rollout.sampling import filter_top_k_top_p, pick_tokens, token_log_probs

MAX_LEN = 64


def engines(path, **sampling_cfg):
    """(transformers generate, verl loop) engines over bf16 copies of one fp32 actor."""
    tokenizer = load_tokenizer(path)
    actor = load(path, torch.float32)
    common = dict(hf_weight_copy=True, cache_implementation="static", max_model_len=MAX_LEN, **sampling_cfg)
    reference = HFRollout(actor, tokenizer, RolloutConfig(**common), compute_dtype=BF16)
    ours = HFRollout(actor, tokenizer, RolloutConfig(decode_loop="verl", **common), compute_dtype=BF16)
    return tokenizer, actor, reference, ours


# ---------------------------------------------------------------------------
# The sampler (pure functions)
# ---------------------------------------------------------------------------


def test_top_k_top_p_keep_the_same_tokens_as_transformers_warpers():
    """Bitwise: the same ops as the warpers (topk then `<`; ascending sort, softmax, cumsum,
    `<= 1 - p`, scatter) on the same float32 tensor, so the same kept set, ties included."""
    from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

    torch.manual_seed(0)
    logits = torch.randn(16, 50) * 3
    logits[0, :4] = 5.0  # ties at the k-th value: all kept, as TopKLogitsWarper keeps them
    for top_k, top_p in [(5, 1.0), (0, 0.9), (7, 0.5), (0, 0.01), (50, 0.999)]:
        expected = logits
        if top_k:
            expected = TopKLogitsWarper(top_k)(None, expected)
        if top_p < 1:
            expected = TopPLogitsWarper(top_p)(None, expected)
        ours = filter_top_k_top_p(logits, top_k, top_p)
        assert torch.equal(torch.isinf(ours), torch.isinf(expected)), (top_k, top_p)
        assert torch.equal(ours[~torch.isinf(ours)], logits[~torch.isinf(ours)])  # kept logits unchanged


def test_top_p_by_hand():
    # probabilities 0.5, 0.3, 0.15, 0.05: p = 0.75 keeps {0.5, 0.3} (0.5 < 0.75 <= 0.8);
    # p = 0.8 keeps the same two (mass 0.8 reaches 0.8); p = 0.81 adds 0.15; p = 0.4 keeps 0.5 alone.
    logits = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log()
    kept = lambda p: (~torch.isinf(filter_top_k_top_p(logits, 0, p))).nonzero()[:, 1].tolist()  # noqa: E731
    assert kept(0.75) == [0, 1] and kept(0.8) == [0, 1] and kept(0.81) == [0, 1, 2] and kept(0.4) == [0]


def test_exponential_race_samples_the_softmax():
    """p = softmax(log [0.1, 0.2, 0.3, 0.4] / T) with T = 1 is [0.1, 0.2, 0.3, 0.4]; 200k draws give
    frequencies within 0.005 (5 standard deviations: sqrt(0.25 / 2e5) = 0.0011). With T = 0.5 the
    probabilities square and renormalise: [1, 4, 9, 16] / 30. With top_k = 2 only tokens 2, 3 remain,
    renormalised to [3/7, 4/7]. Log-probs are those of the unfiltered softmax(logits / T)."""
    torch.manual_seed(0)
    base = torch.tensor([0.1, 0.2, 0.3, 0.4]).log()
    logits = base.expand(200_000, 4)
    cases = [(1.0, 0, [0.1, 0.2, 0.3, 0.4]), (0.5, 0, [1 / 30, 4 / 30, 9 / 30, 16 / 30]),
             (1.0, 2, [0, 0, 3 / 7, 4 / 7])]
    for temperature, top_k, expected in cases:
        tokens = pick_tokens(logits, temperature, top_k, 1.0, greedy=False)
        log_probs = token_log_probs(logits, tokens, temperature)
        freq = torch.bincount(tokens, minlength=4).float() / len(tokens)
        torch.testing.assert_close(freq, torch.tensor(expected), atol=0.005, rtol=0)
        full = torch.log_softmax(base / temperature, dim=-1)
        # float32 defaults (atol 1e-5, rtol 1.3e-6): the same formula over (200000, 4) rows and
        # over one row of 4, which the CPU may vectorise differently: an ulp of values ~1-3.
        torch.testing.assert_close(log_probs, full[tokens])


def test_greedy_is_argmax_of_the_raw_logits():
    logits = torch.tensor([[1.0, 3.0, 2.0], [0.0, 0.0, 5.0]])
    tokens = pick_tokens(logits, 0.1, 1, 0.5, greedy=True)  # T, top-k, top-p ignored
    assert tokens.tolist() == [1, 2]
    torch.testing.assert_close(token_log_probs(logits, tokens, 1.0), torch.log_softmax(logits, -1)[[0, 1], [1, 2]])


# ---------------------------------------------------------------------------
# The loop against transformers' generate
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["qwen2", "llama", "gpt2"])
def test_greedy_equals_generate(arch, request):
    """Left-padded prompts of different lengths; same weights, cache and masks: bit-identical."""
    tokenizer, _, reference, ours = engines(request.getfixturevalue(f"tiny_{arch}"))
    prompts = prompt_batch(tokenizer)
    greedy = SamplingParams(n=2, max_new_tokens=20, greedy=True)
    ref, out = reference.generate(prompts, greedy), ours.generate(prompts, greedy)
    assert torch.equal(out.responses, ref.responses) and torch.equal(out.response_mask, ref.response_mask)
    assert torch.equal(out.rollout_log_probs, ref.rollout_log_probs)
    assert ours.decoder.graphs_captured == 0  # CPU: the eager step


def test_attention_windows_change_nothing(tiny_qwen2):
    """Attention over the first W slots (W = used slots rounded up to 8 here, so windows change
    every 8 steps) instead of all 64: masked slots add exp(min - max) = 0 to the softmax, but the
    attention kernel sums the live terms over W instead of 64 keys (another blocking): a second
    computation path. bf16 log-probs agree within 0.02 (a few bf16 roundings, 2^-8 relative, of
    the 2 layers' activations; observed <= 1e-3), greedy tokens up to a near tie."""
    tokenizer, _, reference, ours = engines(tiny_qwen2)
    ours.decoder = StaticDecoder(ours.model, MAX_LEN, ours.decoder.pad_id, ours.decoder.eos_id, bucket=8)
    seen = []
    step = ours.decoder._decode_step
    ours.decoder._decode_step = lambda st, key, window: seen.append(window) or step(st, key, window)
    prompts = prompt_batch(tokenizer)
    greedy = SamplingParams(n=2, max_new_tokens=30, greedy=True)
    ref, out = reference.generate(prompts, greedy), ours.generate(prompts, greedy)
    # forward_tol: a full-sequence bf16 forward vs one token at a time (test_sampled_log_probs: < 0.05)
    assert_greedy_agree(model_forward(reference.model), out, ref, lp_tol=0.02, forward_tol=0.05)
    p = prompts.input_ids.shape[1]
    assert seen == [window_for(p + t, MAX_LEN, 8) for t in range(1, 30)]
    assert len(set(seen)) >= 3 and max(seen) < MAX_LEN  # several windows, none the whole cache


def test_window_for_by_hand():
    # rounded up to a multiple of 64, never past the cache's 200 slots
    assert [window_for(n, 200, 64) for n in (1, 64, 65, 128, 129, 192, 193)] == [64, 64, 128, 128, 192, 192, 200]


def test_sampled_log_probs_match_a_full_forward(tiny_qwen2):
    """The engine's log-prob of each sampled token equals log softmax(logits / T) from one full
    forward of the same bf16 copy over prompt + response (positions counting real tokens): the
    cache, masks and positions of every decode step are right, also after another row's EOS.
    bf16: one-token-at-a-time vs full-sequence kernels differ by rounding only (< 0.05)."""
    tokenizer, _, _, ours = engines(tiny_qwen2)
    prompts = prompt_batch(tokenizer)
    sampling = SamplingParams(n=4, max_new_tokens=24, temperature=0.7, top_k=50, top_p=0.9)
    torch.manual_seed(1)
    out = ours.generate(prompts, sampling)
    assert len(set(map(tuple, out.responses.tolist()))) > 1  # really sampled
    with torch.no_grad():
        logits = ours.model(input_ids=out.input_ids, attention_mask=out.attention_mask,
                            position_ids=out.position_ids).logits.float()
    p, r = prompts.input_ids.shape[1], out.responses.shape[1]
    full = torch.log_softmax(logits[:, p - 1:p + r - 1] / 0.7, dim=-1).gather(-1, out.responses[..., None])[..., 0]
    mask = out.response_mask.bool()
    assert (full[mask] - out.rollout_log_probs[mask]).abs().max() < 0.05
    torch.manual_seed(1)
    again = ours.generate(prompts, sampling)
    assert torch.equal(again.responses, out.responses)  # the seed reproduces the rollout


def test_eos_ends_rows_and_the_loop_stops_early(tiny_qwen2):
    """With EOS = a token the greedy continuations produce, each row is cut after its first EOS
    exactly as generate cuts it, and when every row is done the loop stops at the next check."""
    tokenizer, _, reference, ours = engines(tiny_qwen2)
    prompts = prompt_batch(tokenizer)
    free = reference.generate(prompts, SamplingParams(n=1, max_new_tokens=20, greedy=True))
    eos = int(free.responses[0, 2])  # row 0 reaches it at step 2
    tokenizer.eos_token_id = eos
    ours.decoder.eos_id = eos
    greedy = SamplingParams(n=1, max_new_tokens=40, greedy=True)
    ref, out = reference.generate(prompts, greedy), ours.generate(prompts, greedy)
    assert torch.equal(out.responses, ref.responses) and out.truncated == ref.truncated
    assert out.responses[0, 2] == eos and out.response_mask[0].sum() == 3
    # Rows that all end: the decoder returns fewer than max_new_tokens columns.
    rows = [i for i in range(3) if eos in ref.responses[i, : int(ref.response_mask[i].sum())].tolist()]
    ids, mask = prompts.input_ids[rows], prompts.attention_mask[rows]
    tokens, _ = ours.decoder.generate(ids, mask, 40, greedy=True)
    longest = int(ref.response_mask[rows].sum(dim=1).max())
    assert tokens.shape[1] <= math.ceil(longest / CHECK_EVERY) * CHECK_EVERY < 40
    assert (tokens == ours.decoder.pad_id)[0, 3:].all()  # after EOS: pad
    # generation_config.min_new_tokens (the copy shares the actor's) bans EOS before 5 tokens in
    # both loops; the log-probs reported stay those of the raw logits in both.
    ours.model.generation_config.min_new_tokens = 5
    ref, out = reference.generate(prompts, greedy), ours.generate(prompts, greedy)
    assert reference.model.generation_config.min_new_tokens == 5
    assert torch.equal(out.responses, ref.responses) and torch.equal(out.rollout_log_probs, ref.rollout_log_probs)
    assert out.responses[0, 2] != eos and (out.response_mask.sum(dim=1) >= 5).all()


def test_stop_strings_cut_where_generate_stops(tiny_qwen2):
    """Both loops cut a response at the end of the first stop string; the row counts as finished
    and the pads generate writes after it are outside the response mask (regression: they were
    inside it, as truncated response tokens)."""
    tokenizer, _, reference, ours = engines(tiny_qwen2)
    prompts = prompt_batch(tokenizer)
    free = reference.generate(prompts, SamplingParams(n=1, max_new_tokens=16, greedy=True))
    stop = free.response_text[1][3:6]  # a piece of row 1's text
    assert stop.strip()
    greedy = SamplingParams(n=1, max_new_tokens=16, greedy=True, stop=[stop])
    ref, out = reference.generate(prompts, greedy), ours.generate(prompts, greedy)
    assert torch.equal(out.responses, ref.responses) and torch.equal(out.response_mask, ref.response_mask)
    assert out.truncated == ref.truncated and not out.truncated[1]
    cut = int(out.response_mask[1].sum())
    assert stop in out.response_text[1] and cut < free.response_mask[1].sum()
    assert stop not in tokenizer.decode(out.responses[1, : cut - 1])  # the first occurrence


def test_first_stop_prefix_by_hand(tiny_qwen2):
    tokenizer = load_tokenizer(tiny_qwen2)
    ids = tokenizer("hello world again", add_special_tokens=False).input_ids
    texts = [tokenizer.decode(ids[:k]) for k in range(len(ids) + 1)]
    k = next(k for k, t in enumerate(texts) if "world" in t)  # the first prefix that shows "world"
    assert first_stop_prefix(ids, ["world"], tokenizer) == k
    assert first_stop_prefix(ids, ["absent"], tokenizer) == len(ids)
    assert first_stop_prefix([], ["x"], tokenizer) == 0


def test_chunks_of_different_batch_sizes(tiny_qwen2):
    """rollout.batch_size = 4 over 6 rows: chunks of 4 and 2, each with its own cache; the same
    greedy tokens as one call. Batches of 4 and 2 rows run the bf16 matmuls at other shapes than
    6 rows (the CPU kernels may block them differently): log-probs within 0.02 (bf16 roundings
    of the activations, observed 0 here), tokens equal up to a near tie."""
    tokenizer, _, _, ours = engines(tiny_qwen2)
    _, _, _, chunked = engines(tiny_qwen2, batch_size=4)
    greedy = SamplingParams(n=2, max_new_tokens=10, greedy=True)
    prompts = prompt_batch(tokenizer)
    assert_greedy_agree(model_forward(ours.model), chunked.generate(prompts, greedy), ours.generate(prompts, greedy),
                        lp_tol=0.02, forward_tol=0.05)
    assert sorted(chunked.decoder.states) == [2, 4]


def test_at_most_two_batch_sizes_keep_a_cache(tiny_qwen2):
    """Batch sizes 3, 2, 1, 2: the cache of the least recently used size is dropped, and a batch
    size that comes back gets a fresh cache that generates the same tokens (bitwise: the same
    prompts at the same batch size, the same computation)."""
    tokenizer, _, _, ours = engines(tiny_qwen2)
    greedy = SamplingParams(n=1, max_new_tokens=8, greedy=True)
    out = {k: ours.generate(prompt_batch(tokenizer, PROMPTS_BY_SIZE[k]), greedy).responses for k in (3, 2, 1)}
    assert list(ours.decoder.states) == [2, 1]
    again = ours.generate(prompt_batch(tokenizer, PROMPTS_BY_SIZE[3]), greedy).responses
    assert list(ours.decoder.states) == [1, 3] and torch.equal(again, out[3])


PROMPTS_BY_SIZE = {3: ["I love", "Hello there my friend", "The"], 2: ["I love", "The"], 1: ["Hello"]}


def test_prompt_plus_new_tokens_must_fit_the_cache(tiny_qwen2):
    tokenizer, _, _, ours = engines(tiny_qwen2)
    with pytest.raises(ValueError, match="rollout.max_model_len: 64"):
        ours.generate(prompt_batch(tokenizer), SamplingParams(n=1, max_new_tokens=MAX_LEN, greedy=True))


def test_sliding_window_models_are_refused(tiny_qwen2):
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(tiny_qwen2)
    config.use_sliding_window, config.sliding_window = True, 4
    config.layer_types = ["sliding_attention"] * config.num_hidden_layers
    model = AutoModelForCausalLM.from_config(config)
    decoder = StaticDecoder(model, MAX_LEN, pad_id=0, eos_id=1)
    with pytest.raises(ValueError, match="rollout.decode_loop: verl supports full-attention caches only"):
        decoder.generate(torch.ones(1, 3, dtype=torch.long), torch.ones(1, 3, dtype=torch.long), 4, greedy=True)


# ---------------------------------------------------------------------------
# Config and a training run
# ---------------------------------------------------------------------------


def _cfg(tmp_path, **over):
    return load_config(None, small_overrides(tmp_path, **{"model.name": "tiny:qwen2", **over}))


def test_config_errors(tmp_path, tiny_qwen2):
    needs = {"rollout.decode_loop": "verl", "model.dtype": "bfloat16"}
    with pytest.raises(ConfigError, match="rollout.decode_loop: 'graph'"):
        _cfg(tmp_path, **{"rollout.decode_loop": "graph"})
    with pytest.raises(ConfigError, match="set rollout.hf_weight_copy: true"):
        _cfg(tmp_path, **needs, **{"rollout.cache_implementation": "static"})
    with pytest.raises(ConfigError, match="set rollout.cache_implementation: static"):
        _cfg(tmp_path, **needs, **{"rollout.hf_weight_copy": "true"})
    with pytest.raises(ConfigError, match="rollout.decode_loop: verl is the Hugging Face backend's loop"):
        _cfg(tmp_path, **needs, **{"rollout.name": "vllm"})
    with pytest.raises(ConfigError, match="set rollout.hf_weight_copy: true"):  # built without finalize_config
        HFRollout(load(tiny_qwen2, torch.float32), load_tokenizer(tiny_qwen2), RolloutConfig(decode_loop="verl"))


def test_grpo_run_with_the_own_loop(tmp_path):
    cfg = _cfg(tmp_path, **{"algorithm.name": "grpo", "model.dtype": "bfloat16", "rollout.hf_weight_copy": "true",
                            "rollout.cache_implementation": "static", "rollout.decode_loop": "verl",
                            "training.total_steps": 3})
    trainer = create_trainer(cfg)
    assert trainer.rollout.decoder is not None
    for _ in range(cfg.training.total_steps):
        m = trainer.step()
        for key in ("reward", "pg_loss", "timing_s/update_weights", "rollout/logprob_diff"):
            assert math.isfinite(m[key]), (key, m[key])
        assert m["rollout/logprob_diff"] < 0.05  # engine (bf16 copy) vs actor (fp32 + autocast)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (CUDA graphs)")
def test_cuda_graph_decode_equals_eager_and_follows_syncs(tiny_qwen2):
    """On CUDA each decode step is one captured graph. Greedy tokens and log-probs equal the eager
    loop's (same kernels, same inputs), one graph per (batch size, sampling) is captured and
    reused, and after an in-place weight sync the replayed graph generates with the new weights
    (it equals the eager loop over the new weights and differs from before)."""
    tokenizer = load_tokenizer(tiny_qwen2)
    actor = load(tiny_qwen2, torch.float32).cuda()
    cfg = RolloutConfig(hf_weight_copy=True, cache_implementation="static", max_model_len=MAX_LEN, decode_loop="verl")
    graphed = HFRollout(actor, tokenizer, cfg, compute_dtype=BF16)
    eager = HFRollout(actor, tokenizer, cfg, compute_dtype=BF16)
    eager.decoder.use_cuda_graph = False
    prompts = prompt_batch(tokenizer)
    greedy = SamplingParams(n=2, max_new_tokens=24, greedy=True)
    first = graphed.generate(prompts, greedy)
    assert torch.equal(first.responses, eager.generate(prompts, greedy).responses)
    assert graphed.decoder.graphs_captured == 1
    again = graphed.generate(prompts, greedy)
    assert torch.equal(again.responses, first.responses) and graphed.decoder.graphs_captured == 1
    with torch.no_grad():
        for p in actor.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    graphed.sync_weights(actor)
    eager.sync_weights(actor)
    moved, moved_eager = graphed.generate(prompts, greedy), eager.generate(prompts, greedy)
    assert torch.equal(moved.responses, moved_eager.responses)
    torch.testing.assert_close(moved.rollout_log_probs, moved_eager.rollout_log_probs, atol=1e-3, rtol=0)
    assert not torch.equal(moved.responses, first.responses)
    sampling = SamplingParams(n=4, max_new_tokens=24, temperature=1.0)
    out = graphed.generate(prompts, sampling)
    assert graphed.decoder.graphs_captured == 2
    with torch.no_grad():
        logits = graphed.model(input_ids=out.input_ids.cuda(), attention_mask=out.attention_mask.cuda(),
                               position_ids=out.position_ids.cuda()).logits.float().cpu()
    p, r = prompts.input_ids.shape[1], out.responses.shape[1]
    full = torch.log_softmax(logits[:, p - 1:p + r - 1], dim=-1).gather(-1, out.responses[..., None])[..., 0]
    mask = out.response_mask.bool()
    assert (full[mask] - out.rollout_log_probs[mask]).abs().max() < 0.05
    # Windows of 8 slots: one graph per window, the same tokens as the eager loop.
    windowed = StaticDecoder(graphed.model, MAX_LEN, graphed.decoder.pad_id, graphed.decoder.eos_id, bucket=8)
    windowed_eager = StaticDecoder(graphed.model, MAX_LEN, graphed.decoder.pad_id, graphed.decoder.eos_id, bucket=8,
                                   use_cuda_graph=False)
    ids, mask = prompts.input_ids.cuda(), prompts.attention_mask.cuda()
    tokens, log_probs = windowed.generate(ids, mask, 40, greedy=True)
    tokens_eager, log_probs_eager = windowed_eager.generate(ids, mask, 40, greedy=True)
    assert torch.equal(tokens, tokens_eager) and torch.equal(log_probs, log_probs_eager)
    assert windowed.graphs_captured >= 4  # p + 40 slots span at least 5 windows of 8
