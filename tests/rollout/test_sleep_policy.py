"""rollout.sleep_when (verl/trainer/sleep_policy.py): the engine sleeps for the update only where
the update's mini-batch would not fit one micro-batch beside the awake engine."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from verl.batch import Batch
from verl.config import config_from_dict
from verl.errors import ConfigError
from verl.trainer.experience_source import SyncExperience
from verl.trainer.sleep_policy import SleepPolicy, mini_batch_tokens, sleep_needed
from verl.workers.awake_budget import AwakeBudget


class Worker(AwakeBudget):
    """A model role with only what the sleep policy asks of one (verl.roles.ModelRole)."""

    def __init__(self, budget=None, packed=True):
        self.budget, self.packed = budget, packed

    def packs_sequences(self) -> bool:
        return self.packed


class Engine:
    """A rollout engine with only what the synchronous source and the policy call."""

    def __init__(self, slept, sleep_enabled):
        self.slept, self.sleep_enabled = slept, sleep_enabled

    def sleep(self):
        self.slept.append(1)

    def can_sleep(self):
        return self.sleep_enabled


def three_rows() -> Batch:
    # prompt block of 3 (left padded), response block of 4 (right padded):
    #   row 0: prompt 2 real, response 4 real -> 6 tokens
    #   row 1: prompt 3 real, response 1 real -> 4 tokens
    #   row 2: prompt 1 real, response 2 real -> 3 tokens
    mask = torch.tensor([[0, 1, 1, 1, 1, 1, 1],
                         [1, 1, 1, 1, 0, 0, 0],
                         [0, 0, 1, 1, 1, 0, 0]])
    return Batch(input_ids=torch.ones(3, 7, dtype=torch.long), attention_mask=mask,
                 responses=torch.ones(3, 4, dtype=torch.long), response_mask=mask[:, 3:].float())


def test_mini_batch_tokens_counts_as_micro_batching_does():
    b = three_rows()
    # padded: rows x (longest real prompt 3 + longest real response 4) = 2 x 7, 3 x 7
    assert mini_batch_tokens(b, 2, packed=False) == 14
    assert mini_batch_tokens(b, 5, packed=False) == 21  # more rows asked than the batch has
    # packed: the longest rows' real lengths, 6 + 4; all three 6 + 4 + 3
    assert mini_batch_tokens(b, 2, packed=True) == 10
    assert mini_batch_tokens(b, 3, packed=True) == 13


def test_sleep_needed_unless_every_budget_holds_the_mini_batch():
    assert sleep_needed(10, []) is True
    assert sleep_needed(10, [None]) is True
    assert sleep_needed(10, [10, 12]) is False  # exactly fits
    assert sleep_needed(10, [9, 12]) is True
    assert sleep_needed(10, [12, None]) is True


class FakeBudget:
    def __init__(self, tokens_awake: int):
        self.tokens, self.awake, self.calls = None, tokens_awake, 0

    def estimate(self):
        self.calls += 1
        return self.awake, 0, 0


def test_needed_decides_once_and_logs_it(capsys):
    budget = FakeBudget(tokens_awake=21)
    policy = SleepPolicy("needed", [Worker(budget)], mini_rows=None, packed=False)
    assert policy.wanted(three_rows()) is False  # 21 tokens needed, 21 fit
    assert policy.wanted(three_rows()) is False
    assert budget.calls == 1  # kept for the run
    out = capsys.readouterr().out
    assert "stays awake" in out and "up to 21 tokens" in out and "beside the awake engine: 21;" in out

    small = SleepPolicy("needed", [Worker(FakeBudget(20))], mini_rows=None, packed=False)
    assert small.wanted(three_rows()) is True
    assert "sleeps for every update" in capsys.readouterr().out


def test_needed_sleeps_without_an_estimate_and_always_never_asks(capsys):
    derived = FakeBudget(10 ** 9)
    derived.tokens = 5  # derived already: what memory it saw is not known now
    for workers in ([Worker(None)], [Worker(derived)], [Worker()]):
        assert SleepPolicy("needed", workers, mini_rows=2, packed=True).wanted(three_rows()) is True
    assert capsys.readouterr().out == ""  # nothing to decide on (the CPU, Ray workers): no log line
    # a second worker without an estimate makes the engine sleep even if the actor fits
    two = [Worker(FakeBudget(10 ** 9)), Worker(None)]
    assert SleepPolicy("needed", two, mini_rows=2, packed=True).wanted(three_rows()) is True
    never_asked = FakeBudget(10 ** 9)
    assert SleepPolicy("always", [Worker(never_asked)], None, False).wanted(three_rows()) is True
    assert never_asked.calls == 0


def fake_source(budget, sleep_when="needed", mini=None, sleep_enabled=True):
    """A synchronous source over a stage that returns three_rows(), with the run's sleep policy; the
    engine's sleep() calls land in `slept`."""
    slept = []
    cfg = SimpleNamespace(rollout=SimpleNamespace(sleep_when=sleep_when),
                          training=SimpleNamespace(mini_batch_size=mini))
    actor = Worker(budget, packed=True)
    engine = Engine(slept, sleep_enabled)
    stage = SimpleNamespace(engine=engine, prompts=SimpleNamespace(next_batch=lambda: None), timer=None,
                            run=lambda prompts, step: (three_rows(), {}))
    source = SyncExperience(stage, SimpleNamespace(global_step=0), SleepPolicy.for_run(cfg, [actor], engine), None)
    return source, slept


@pytest.mark.parametrize("awake_tokens, mini, sleeps", [(13, None, 0), (12, None, 3), (10, 2, 0), (9, 2, 3)])
def test_sync_experience_sleeps_the_engine_only_where_needed(awake_tokens, mini, sleeps, capsys):
    # packed: whole batch 13 tokens; mini-batches of 2 rows at most 6 + 4 = 10
    source, slept = fake_source(FakeBudget(awake_tokens), mini=mini)
    for _ in range(3):
        source.next()
    assert len(slept) == sleeps
    source, slept = fake_source(FakeBudget(awake_tokens), sleep_when="always", mini=mini)
    for _ in range(3):
        source.next()
    assert len(slept) == 3


def test_sleep_when_is_checked_with_the_key_named():
    with pytest.raises(ConfigError, match=r"rollout.sleep_when: 'sometimes' is not one of needed, always"):
        config_from_dict({"rollout": {"sleep_when": "sometimes"}})
    assert config_from_dict({}).rollout.sleep_when == "needed"


def test_an_engine_without_sleep_mode_is_not_asked_about(capsys):
    # an engine without a sleep mode (HF), one whose mode is off, and the asynchronous wrappers ask their engine
    import threading

    from verl.rollout.base import RolloutEngine
    from verl.trainer.locked_engine import LockedEngine

    assert RolloutEngine.can_sleep(SimpleNamespace()) is False
    assert LockedEngine(Engine([], True), threading.RLock(), 1.0).can_sleep() is True
    assert LockedEngine(Engine([], False), threading.RLock(), 1.0).can_sleep() is False
    budget = FakeBudget(10 ** 9)
    source, slept = fake_source(budget, sleep_enabled=False)
    source.next()
    assert len(slept) == 1 and budget.calls == 0  # sleep() is the engine's no-op; nothing decided
    assert capsys.readouterr().out == ""
