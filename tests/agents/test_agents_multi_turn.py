"""Multi-turn rollouts (verl/rollout/multi_turn.py): token-exact trajectories, masks, metrics,
contained failures, and short GRPO runs on both engines."""

from __future__ import annotations

import math

import pytest
import torch

from conftest import small_overrides
from multi_turn_helpers import Counter, ScriptedEngine, _enc, _prompts, add
from verl import create_trainer, load_config
from verl.agents.environment import Environment, StepResult
from verl.agents.tools import tool_from_callable
from verl.batch import Batch
from verl.config import RolloutConfig
from verl.rollout.base import RolloutEngine, SamplingParams
from verl.rollout.multi_turn import MultiTurnRollout
from verl.rollout.turn_template import TurnTemplate


def broken(x: int) -> str:
    """Always fails.

    Args:
        x: anything
    """
    raise ValueError("no")


@pytest.fixture(scope="module")
def qwen_tok(tiny_qwen2):
    from verl.models.loading import load_tokenizer

    return load_tokenizer(tiny_qwen2)


def test_trajectory_is_token_exact_with_tool_turns_masked(qwen_tok):
    tok = qwen_tok
    call = _enc(tok, '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>')
    final = _enc(tok, "It is 5.") + [tok.eos_token_id]
    plain = _enc(tok, "No tools.") + [tok.eos_token_id]
    engine = ScriptedEngine(tok, [[call, plain], [final]])
    cfg = RolloutConfig(tools=["x:y"])
    mt = MultiTurnRollout(engine, tok, cfg, chat=True, tools=[tool_from_callable(add)])
    prompts, prompt_ids = _prompts(tok, ["What is 2+3?", "Hi"])
    out = mt.generate(prompts, SamplingParams(max_new_tokens=64, n=1))

    turns = TurnTemplate(tok, chat=True)
    tool_ids = turns.close_assistant(call) + turns.tool_turn(["5"])
    expected = call + tool_ids + final  # hand-built: model turn 1, the tool's answer, model turn 2
    n = len(expected)
    assert out.responses[0, :n].tolist() == expected
    assert out.response_mask[0, :n].tolist() == [1.0] * len(call) + [0.0] * len(tool_ids) + [1.0] * len(final)
    assert out.rollout_log_probs[0, :n].tolist() == [-0.5] * len(call) + [0.0] * len(tool_ids) + [-0.5] * len(final)
    assert out.response_mask[0, n:].sum() == 0 and out.attention_mask[0, -out.response_length:][n:].sum() == 0
    # The second call saw the exact ids: prompt + sampled turn + tool turn (nothing decoded and re-encoded).
    assert engine.contexts[1] == [prompt_ids[0] + call + tool_ids]
    # The row without a call ended after its first turn.
    assert out.responses[1, :len(plain)].tolist() == plain and out.response_mask[1].sum() == len(plain)
    e0, e1 = out.extra
    assert [t["role"] for t in e0["turns"]] == ["assistant", "tool", "assistant"]
    assert e0["turns"][1] == {"role": "tool", "name": "add", "text": "5", "ok": True}
    assert e0["turn_spans"] == [[0, len(call), "assistant"], [len(call), len(call) + len(tool_ids), "tool"],
                                [len(call) + len(tool_ids), n, "assistant"]]
    assert (e0["num_turns"], e0["num_tool_calls"], e1["num_turns"], e1["num_tool_calls"]) == (2, 1, 1, 0)
    m = mt.metrics()
    assert m["agent/turns_per_trajectory"] == 1.5 and m["agent/tool_calls_per_trajectory"] == 0.5
    assert m["agent/tool_calls/add"] == 0.5 and m["agent/tool_error_rate"] == 0.0
    assert m["agent/masked_token_share"] == pytest.approx(len(tool_ids) / (n + len(plain)))


def test_broken_calls_unknown_tools_and_raising_tools_go_back_to_the_model(qwen_tok):
    tok = qwen_tok
    bad_json = _enc(tok, '<tool_call>{"name": "add", "arguments": {"a": 2,</tool_call>')
    unknown = _enc(tok, '<tool_call>{"name": "nope", "arguments": {}}</tool_call>')
    raising = _enc(tok, '<tool_call>{"name": "broken", "arguments": {"x": 1}}</tool_call>')
    done = _enc(tok, "ok") + [tok.eos_token_id]
    engine = ScriptedEngine(tok, [[bad_json, unknown, raising], [done, done, done]])
    mt = MultiTurnRollout(engine, tok, RolloutConfig(tools=["x:y"]), chat=True,
                          tools=[tool_from_callable(add), tool_from_callable(broken)])
    out = mt.generate(_prompts(tok, ["a", "b", "c"])[0], SamplingParams(max_new_tokens=64))
    for e in out.extra:
        tool_turns = [t for t in e["turns"] if t["role"] == "tool"]
        assert len(tool_turns) == 1 and tool_turns[0]["ok"] is False and "error" in tool_turns[0]["text"]
        assert e["num_turns"] == 2  # the model saw the error and answered again
    assert "nope" in out.extra[1]["turns"][1]["text"] or "unknown" in out.extra[1]["turns"][1]["text"]
    assert mt.metrics()["agent/tool_error_rate"] == 1.0


class Wordy(Environment):
    """Two answered turns; each step's reward grows with the turn's length (so samples differ)."""

    def reset(self, sample):
        self.k = 0
        return "say something"

    def step(self, action_text):
        self.k += 1
        return StepResult("more", reward=min(1.0, len(action_text) / 20), done=self.k == 2)


class Exploding(Environment):
    def reset(self, sample):
        return "go"

    def step(self, action_text):
        raise RuntimeError("boom")


def test_environment_turns_rewards_and_a_raising_environment(qwen_tok):
    tok = qwen_tok
    say = _enc(tok, "x") + [tok.eos_token_id]
    engine = ScriptedEngine(tok, [[say, say]] * 3)
    mt = MultiTurnRollout(engine, tok, RolloutConfig(environment="x:Y"), chat=True, environment=Counter)
    out = mt.generate(_prompts(tok, ["a", "b"])[0], SamplingParams(max_new_tokens=8))
    assert [e["env_reward"] for e in out.extra] == [1.5, 1.5]  # 0.25 + 0.25 + 1
    assert [e["num_turns"] for e in out.extra] == [3, 3]
    engine = ScriptedEngine(tok, [[say]])
    mt = MultiTurnRollout(engine, tok, RolloutConfig(environment="x:Y"), chat=True, environment=Exploding)
    out = mt.generate(_prompts(tok, ["a"])[0], SamplingParams(max_new_tokens=8))
    assert out.extra[0]["turns"][-1]["ok"] is False and "boom" in out.extra[0]["turns"][-1]["text"]
    assert out.extra[0]["num_turns"] == 1
    # one reset and one step that raised: a rate of 1/2, and no tool was called
    assert mt.metrics()["agent/env_error_rate"] == 0.5 and mt.metrics()["agent/tool_error_rate"] == 0.0


class ResetFailsForOdd(Environment):
    def reset(self, sample):
        if "odd" in sample["prompt"]:
            raise ValueError("no such level")
        return "go"

    def step(self, action_text):
        return StepResult("done", reward=1.0, done=True)


def test_an_environment_whose_reset_raises(qwen_tok, caplog):
    """reset() raising for some trajectories: they end before any model turn, with a warning that
    counts them; raising for every trajectory is one line naming rollout.environment, not a batch of
    empty responses trained on."""
    import pytest

    from verl.errors import ConfigError

    tok = qwen_tok
    say = _enc(tok, "x") + [tok.eos_token_id]
    mt = MultiTurnRollout(ScriptedEngine(tok, [[say]]), tok, RolloutConfig(environment="x:Y"), chat=True,
                          environment=ResetFailsForOdd)
    with caplog.at_level("WARNING"):
        out = mt.generate(_prompts(tok, ["even", "odd"])[0], SamplingParams(max_new_tokens=8))
    assert out.response_mask[1].sum() == 0 and out.response_mask[0].sum() > 0
    assert "reset() raised for 1 of 2 trajectories (first: ValueError: no such level)" in caplog.text
    # 2 resets (1 raised) + 1 step: 1/3
    assert abs(mt.metrics()["agent/env_error_rate"] - 1 / 3) < 1e-12
    mt = MultiTurnRollout(ScriptedEngine(tok, [[say]]), tok, RolloutConfig(environment="x:Y"), chat=True,
                          environment=ResetFailsForOdd)
    with pytest.raises(ConfigError, match=r"^rollout.environment: reset\(\) raised for all 2 trajectories"):
        mt.generate(_prompts(tok, ["odd one", "odd two"])[0], SamplingParams(max_new_tokens=8))


def test_the_total_token_budget_ends_a_trajectory(qwen_tok):
    tok = qwen_tok
    call = _enc(tok, '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 1}}</tool_call>')
    cfg = RolloutConfig(tools=["x:y"])
    cfg.multi_turn.max_total_tokens = len(call) + 3  # no room for the tool's answer
    mt = MultiTurnRollout(ScriptedEngine(tok, [[call]]), tok, cfg, chat=True, tools=[tool_from_callable(add)])
    out = mt.generate(_prompts(tok, ["a"])[0], SamplingParams(max_new_tokens=64))
    assert out.truncated == [True] and out.response_mask[0].sum() == len(call)
    assert out.response_length <= cfg.multi_turn.max_total_tokens


ENV_OVERRIDES = {"algorithm.name": "grpo", "rollout.environment": "test_agents_multi_turn:Wordy",
                 "rollout.multi_turn.max_turns": 3, "rollout.multi_turn.max_total_tokens": 64,
                 "rollout.max_new_tokens": 6, "reward_fn.type": "environment", "training.total_steps": 3,
                 "training.batch_size": 2, "training.micro_batch_size": 2, "training.lr": 1e-2}


def test_log_probs_are_computed_on_the_sampled_ids_of_every_turn(tmp_path, tiny_qwen2):
    """Real sampled turns (HF engine) with environment turns between them: the actor's log-probs of
    the assembled trajectory equal the engine's own log-probs on every model token (the same
    weights in float32), so no turn was re-tokenized; masked tokens stay out of the loss."""
    cfg = load_config(None, small_overrides(tmp_path, **{**ENV_OVERRIDES, "model.name": tiny_qwen2}))
    trainer = create_trainer(cfg)
    batch, _ = trainer.rollout_stage.run(trainer.train_data.next_batch(), trainer.global_step)
    assert max(e["num_turns"] for e in batch.extra) >= 2
    logp, _ = trainer.actor.compute_log_probs(batch)
    mask = batch.response_mask > 0
    assert mask.sum() > 0 and (~mask & (batch.attention_mask[:, batch.prompt_length:] > 0)).sum() > 0
    # float32 forward of the same tokens twice (batched differently): agreement to rounding
    assert torch.allclose(logp[mask], batch.rollout_log_probs[mask], atol=1e-4)
    assert (batch.rollout_log_probs[~mask] == 0).all()


@pytest.mark.parametrize("engine", ["hf", "vllm"])
def test_three_step_multi_turn_grpo_on_each_engine(tmp_path, tiny_qwen2, engine):
    extra = {"rollout.name": engine, "model.name": tiny_qwen2}
    if engine == "vllm":
        extra.update({"rollout.kv_cache_gb": 0.25, "rollout.gpu_memory_utilization": 0.2})
    cfg = load_config(None, small_overrides(tmp_path, **{**ENV_OVERRIDES, **extra}))
    trainer = create_trainer(cfg)
    before = {n: p.detach().clone() for n, p in trainer.actor.model.named_parameters()}
    for _ in range(3):
        m = trainer.step()
        for key in ("reward", "pg_loss", "actor/grad_norm", "agent/turns_per_trajectory", "agent/masked_token_share"):
            assert math.isfinite(m[key]), (key, m[key])
    assert m["agent/turns_per_trajectory"] > 1
    changed = sum(not torch.equal(before[n], p.detach()) for n, p in trainer.actor.model.named_parameters())
    assert changed > 0


RELEASE_SLOW = None  # a threading.Event: set by the engine once it generates without the slow trajectory


def slow_add(a: int, b: int) -> str:
    """Add two integers, slowly: until released, or 1 s.

    Args:
        a: the first number
        b: the second number
    """
    RELEASE_SLOW.wait(timeout=1.0)
    return str(a + b)


class RowScriptedEngine(RolloutEngine):
    """Answers each row with its prompt's next scripted turn (by prompt text, whatever the batch
    composition) and logs which prompts each call held, and when."""

    def __init__(self, tokenizer, script: dict):
        self.tokenizer, self.script, self.taken, self.calls = tokenizer, script, {}, []

    def generate(self, prompts: Batch, sampling: SamplingParams) -> Batch:
        import time

        from verl.rollout.base import assemble_rollout

        self.calls.append((time.monotonic(), list(prompts.prompt_text)))
        if "slow" not in prompts.prompt_text:
            RELEASE_SLOW.set()  # the fast trajectory went on alone: the slow tool may answer now
        responses = []
        for text in prompts.prompt_text:
            k = self.taken.get(text, 0)
            self.taken[text] = k + 1
            responses.append(self.script[text][k])
        return assemble_rollout(prompts, responses, [[-0.5] * len(r) for r in responses], self.tokenizer,
                                sampling.max_new_tokens, finished=[True] * len(responses))


@pytest.mark.parametrize("barrier", [True, False])
def test_without_the_turn_barrier_a_slow_tool_delays_only_its_own_trajectory(qwen_tok, barrier):
    """Trajectory "slow" calls a tool that takes 1 s, "fast" one that answers at once; both then give
    a final answer. With the barrier, the second engine call waits for the slow tool and holds both;
    without it, "fast" takes its second turn at once, alone, and "slow" joins a later call. The
    trajectories themselves are the same token for token either way. (The slow tool waits 1 s, or
    until an engine call without "slow" releases it: the order of events does not rest on timing.)"""
    import threading

    global RELEASE_SLOW
    RELEASE_SLOW = threading.Event()
    tok = qwen_tok
    slow_call = _enc(tok, '<tool_call>{"name": "slow_add", "arguments": {"a": 1, "b": 2}}</tool_call>')
    fast_call = _enc(tok, '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>')
    final = _enc(tok, "Done.") + [tok.eos_token_id]
    engine = RowScriptedEngine(tok, {"slow": [slow_call, final], "fast": [fast_call, final]})
    cfg = RolloutConfig(tools=["x:y"])
    cfg.multi_turn.turn_barrier = barrier
    mt = MultiTurnRollout(engine, tok, cfg, chat=True, tools=[tool_from_callable(add), tool_from_callable(slow_add)])
    out = mt.generate(_prompts(tok, ["slow", "fast"])[0], SamplingParams(max_new_tokens=64))
    groups = [texts for _, texts in engine.calls]
    if barrier:  # the second call waited for the slow tool (never released: its full second)
        assert groups == [["slow", "fast"], ["slow", "fast"]]
        assert engine.calls[1][0] - engine.calls[0][0] >= 1.0
    else:  # "fast" went on alone, which released the slow tool; "slow" came in the call after
        assert groups == [["slow", "fast"], ["fast"], ["slow"]]
    turns = TurnTemplate(tok, chat=True)
    for row, call, answer in ((0, slow_call, "3"), (1, fast_call, "5")):
        expected = call + turns.close_assistant(call) + turns.tool_turn([answer]) + final
        assert out.responses[row, :len(expected)].tolist() == expected
        assert out.extra[row]["num_turns"] == 2 and out.extra[row]["num_tool_calls"] == 1
    m = mt.metrics()
    assert m["agent/tool_calls/slow_add"] == 0.5 and m["agent/tool_calls/add"] == 0.5
    assert m["agent/tool_latency_s_max"] >= (1.0 if barrier else 0.0)
