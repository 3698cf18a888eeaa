"""Which training steps ask the engine for its log-probs (rollout.logprob_check_every), and the
Batch an engine builds without them."""

from __future__ import annotations

import os
import sys

import pytest
import torch

from verl import load_config
from verl.algorithms.off_policy import correction_spec
from verl.batch import Batch
from verl.rollout.base import assemble_rollout
from verl.trainer.step_sampling import StepSampling

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from synthetic_tokenizer import synthetic_tokenizer  # noqa: E402  (benchmarks/: offline, no download)


def _asked(overrides: list[str], steps: list[int]) -> list[bool]:
    """SamplingParams.log_probs of StepSampling.for_step at each global_step (completed steps) in
    `steps`, for one process that starts at steps[0] (a resume when > 0)."""
    cfg = load_config(None, ["device=cpu", *overrides])
    correction = correction_spec(cfg.rollout, cfg.algorithm.rollout_correction)  # as the trainer builds it
    sampling = StepSampling(cfg.rollout, cfg.async_training.enable, correction=correction.enabled)
    return [sampling.for_step(g).log_probs for g in steps]


def test_every_tenth_step_by_default_and_every_kth_with_the_key():
    # the default, 10: the rollouts of steps 1, 11, 21 (global_step 0, 10, 20 completed before them)
    assert _asked([], list(range(21))) == [g % 10 == 0 for g in range(21)]
    assert _asked(["rollout.logprob_check_every=1"], [0, 1, 2, 3]) == [True] * 4
    # k = 3: the rollouts of steps 1, 4, 7 (global_step 0, 3, 6 completed before them)
    assert _asked(["rollout.logprob_check_every=3"], list(range(7))) == [True, False, False, True, False, False, True]
    # a resumed process checks its first step, then keeps the run's own rhythm
    assert _asked(["rollout.logprob_check_every=3"], [4, 5, 6, 7]) == [True, False, True, False]


@pytest.mark.parametrize("extra", [["async_training.enable=true", "rollout.hf_weight_copy=true"],
                                   ["rollout.tis_cap=2.0"], ["rollout.tools=[calculator]"],
                                   ["algorithm.rollout_correction.rollout_is=sequence"],
                                   ["algorithm.rollout_correction.bypass_mode=true"]])
def test_every_step_where_the_loss_reads_them(extra):
    # async training (behaviour log-probs), the rollout correction (shorthand or section), multi-turn trajectories
    assert _asked(["rollout.logprob_check_every=3", *extra], [0, 1, 2]) == [True, True, True]


def test_a_batch_without_engine_log_probs():
    tok = synthetic_tokenizer(1000)
    prompts = Batch(input_ids=torch.tensor([[0, 3], [4, 9]]), attention_mask=torch.tensor([[0, 1], [1, 1]]))
    batch = assemble_rollout(prompts, [[5, 6, 7], [8]], None, tok, 8, finished=[False, False])
    assert batch.rollout_log_probs is None
    # the rest as with log-probs: row 0 = pad prompt, 3 | 5 6 7; row 1 = 4 9 | 8 pad
    assert batch.input_ids[:, :3].tolist() == [[0, 3, 5], [4, 9, 8]]
    assert batch.response_mask.tolist() == [[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]]
    with_lp = assemble_rollout(prompts, [[5, 6, 7], [8]], [[-0.5, -0.25, -1.0], [-2.0]], tok, 8,
                               finished=[False, False])
    assert torch.equal(with_lp.input_ids, batch.input_ids) and torch.equal(with_lp.position_ids, batch.position_ids)
