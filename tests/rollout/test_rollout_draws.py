"""The rollout's draws from a generator of their own (SamplingParams.draw_seed, verl/rollout/sampling.py
DrawsFrom): the same distribution as sampling from softmax(logits / T) with top-k / top-p, reproducible from
the seed alone, and torch's global generator untouched, so the asynchronous producer's draws and the trainer
thread's own randomness never reseed each other."""

import torch

from verl.rollout.sampling import DrawsFrom, filter_top_k_top_p


def test_draws_follow_the_filtered_softmax():
    # logits [2, 1, 0, -1] at T = 1, top-k 3: kept e^2, e^1, e^0 -> p = [0.665, 0.245, 0.090, 0]
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]]).repeat(20000, 1)
    g = torch.Generator().manual_seed(7)
    out = DrawsFrom(g, temperature=1.0, top_k=3, top_p=1.0)(None, logits)
    chosen = out.argmax(dim=-1)
    assert bool((out.max(dim=-1).values == 0).all()) and bool((out.isinf().sum(dim=-1) == 3).all())  # one kept
    share = torch.bincount(chosen, minlength=4).float() / len(chosen)
    want = filter_top_k_top_p(logits[:1], 3, 1.0).softmax(-1)[0]
    assert torch.allclose(share, want, atol=0.01), (share, want)  # 20000 draws: sd of a share < 0.004
    assert share[3] == 0  # outside the top-k


def test_draws_depend_on_the_seed_alone_and_leave_the_global_generator_alone():
    logits = torch.randn(64, 50)
    before = torch.get_rng_state()

    def draw(seed):
        return DrawsFrom(torch.Generator().manual_seed(seed), 0.7, 0, 0.9)(None, logits).argmax(-1)

    a = draw(11)
    torch.manual_seed(123)  # another thread reseeding the global generator changes nothing
    torch.rand(5)
    b = draw(11)
    assert torch.equal(a, b) and not torch.equal(a, draw(12))
    torch.set_rng_state(before)


def test_the_hf_engine_draws_from_the_step_seed(tiny_gpt2):
    """Two generations with the same draw_seed give the same tokens whatever the global generator holds; the
    global generator is not advanced by them; another seed gives other tokens."""
    from verl.config import load_config
    from verl.data.prompts import PromptLoader
    from verl.data.sources import PromptRow
    from verl.models.loading import load_causal_lm, load_tokenizer
    from verl.rollout.base import SamplingParams
    from verl.rollout.hf_rollout import HFRollout

    cfg = load_config(None, [f"model.name={tiny_gpt2}", "rollout.name=hf", "device=cpu"])
    tok = load_tokenizer(tiny_gpt2)
    engine = HFRollout(load_causal_lm(cfg.model, torch.float32), tok, cfg.rollout)
    rows = [PromptRow(prompt=f"I love {w}", ground_truth="") for w in ("cats", "rain", "tea", "maps")]
    prompts = PromptLoader(rows, tok, cfg.data, batch_size=4, seed=0, shuffle=False).next_batch()

    def generate(seed, global_seed):
        torch.manual_seed(global_seed)
        state = torch.get_rng_state()
        out = engine.generate(prompts, SamplingParams(max_new_tokens=6, n=2, draw_seed=seed))
        assert torch.equal(torch.get_rng_state(), state)  # the global generator was not drawn from
        return out.responses

    engine._draw_state = None  # a new step
    a = generate(5, global_seed=1)
    engine._draw_state = None
    b = generate(5, global_seed=2)
    engine._draw_state = None
    c = generate(6, global_seed=1)
    assert torch.equal(a, b) and not torch.equal(a, c)
