"""The table of which Batch field exists after which stage (verl/trainer/stage_fields.py) against the Batch
itself and against real steps: every tensor field named once, and after a step every field the stages always
fill is there, with the optional ones present exactly where their algorithm or role asks for them."""

import dataclasses

import pytest
import torch

from verl.batch import Batch
from verl.config import load_config
from verl.trainer import create_trainer
from verl.trainer.stage_fields import FILLS, MAY_FILL, check_filled

from conftest import small_overrides


def test_every_tensor_field_is_named_by_exactly_one_stage():
    named = [f for table in (FILLS, MAY_FILL) for fields in table.values() for f in fields]
    assert sorted(named) == sorted(Batch.tensor_fields())  # each once, none unknown


def test_check_filled_names_the_stage_and_the_fields():
    one = torch.zeros(1, 1)
    with pytest.raises(RuntimeError, match="the advantages stage left Batch fields unset .*: advantages, returns"):
        check_filled(Batch(token_level_scores=one, token_level_rewards=one), "advantages")
    check_filled(Batch(), "values")  # a stage that fills nothing always


@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_a_step_fills_what_the_table_says(tmp_path, tiny_gpt2, algo):
    trainer = create_trainer(load_config(None, small_overrides(tmp_path, **{"model.name": tiny_gpt2,
                                                                           "algorithm.name": algo})))
    batch = trainer.algorithm_step().batch
    for fields in FILLS.values():
        for name in fields:
            assert getattr(batch, name) is not None, name
    optional = {f for fields in MAY_FILL.values() for f in fields} - {"rollout_log_probs"}
    filled = {f.name for f in dataclasses.fields(batch) if f.name in optional and getattr(batch, f.name) is not None}
    # the optional ones of these runs: a reference where there is a KL term, values where there is a critic
    expected = ({"ref_log_probs"} if trainer.reference is not None else set()) | (
        {"values"} if trainer.critic is not None else set())
    assert filled == expected and (algo == "grpo" or "values" in filled)
    trainer.run.close()
