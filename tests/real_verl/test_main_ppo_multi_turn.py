"""Real verl's multi-turn command lines through main_ppo (verl/compat/real_multi_turn.py): the keys map to
the multi-turn rollout with real verl's tool / interaction files, and real verl's GSM8K multi-turn script
trains a step running its tools on the tool-agent rows."""

from __future__ import annotations

import json
import os

import pytest

from tools.real_verl_scripts.harness import TRAINS, load, outcome, provide_files, tiny_args, write_rows
from verl.compat.translate import load_translated, translate
from verl.config import ConfigError

SCRIPT = "examples/sglang_multiturn/run_qwen2.5-3b_gsm8k_multiturn.sh"


def _args(tmp_path, *extra):
    data = write_rows(str(tmp_path / "train.parquet"), "gsm8k", tool_agent=True)
    examples = load()
    provide_files(examples, str(tmp_path / "real_verl"))
    tool = tmp_path / "real_verl/examples/sglang_multiturn/config/tool_config/gsm8k_tool_config.yaml"
    return [f"data.train_files={data}", "actor_rollout_ref.model.path=tiny:gpt2", "trainer.device=cpu",
            "data.train_batch_size=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.rollout.n=2",
            "data.max_prompt_length=64",
            "actor_rollout_ref.rollout.multi_turn.enable=True",
            f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tool}", *extra]


def test_the_multi_turn_keys_map_with_real_verls_defaults(tmp_path):
    tr = translate(_args(tmp_path, "data.max_response_length=48",
                         "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=5"))
    cfg = load_translated(tr)
    r, mt = cfg.rollout, cfg.rollout.multi_turn
    assert r.tool_config.endswith("gsm8k_tool_config.yaml") and r.interaction_config is None
    # the response length is the whole trajectory's budget; real verl's defaults: 1 call a turn, 256 characters
    # of a tool's answer kept from both ends, a turn runs to its end, rows without agent_name single-turn
    assert (mt.max_total_tokens, mt.max_turns, mt.max_calls_per_turn, mt.stop_at_tool_call) == (48, 5, 1, False)
    assert (mt.max_tool_output_chars, mt.tool_output_keep, mt.default_agent) == (256, "middle", "single_turn_agent")
    assert any("without an agent_name column runs single-turn" in n for n in tr.notes)
    # max_user_turns=2: after two answers the next model turn is the last (3); the smaller limit wins
    tr = translate(_args(tmp_path, "actor_rollout_ref.rollout.multi_turn.max_user_turns=2",
                         "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=5",
                         "actor_rollout_ref.rollout.multi_turn.tool_response_truncate_side=left",
                         "actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent"))
    mt = load_translated(tr).rollout.multi_turn
    assert (mt.max_turns, mt.tool_output_keep, mt.default_agent) == (3, "head", "tool_agent")


@pytest.mark.parametrize("arg, problem", [
    ("actor_rollout_ref.rollout.multi_turn.format=qwen", "real verl's own ToolParser has no 'qwen' format either"),
    ("actor_rollout_ref.rollout.multi_turn.format=gpt-oss", "not parsed here"),
    ("actor_rollout_ref.rollout.multi_turn.use_inference_chat_template=True", "re-rendering the earlier turns"),
    ("actor_rollout_ref.rollout.agent.default_agent_loop=react_agent", "supported: single_turn_agent, tool_agent"),
])
def test_what_does_not_map_is_one_line(tmp_path, arg, problem):
    with pytest.raises(ConfigError) as err:
        load_translated(translate(_args(tmp_path, arg)))
    assert problem in str(err.value) and "\n" not in str(err.value)


def test_a_missing_tool_file_is_refused_before_training(tmp_path, capsys):
    from verl.trainer.main_ppo import main

    args = _args(tmp_path, "data.max_response_length=16") + [
        f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tmp_path}/nope.yaml",
                              f"trainer.default_local_dir={tmp_path}/out"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "rollout.tool_config: file" in err and "nope.yaml' not found" in err


def test_real_verls_gsm8k_multi_turn_script_trains_a_step_with_its_tool(tmp_path, tiny_gpt2):
    """The script unchanged (its sizes, model and data replaced as the harness does), its own
    gsm8k_tool_config.yaml: the multi-turn rollout runs on the tool-agent rows (metrics agent/*)."""
    examples = load()
    script = next(s for s in examples.scripts if s.name == SCRIPT)
    provide_files(examples, str(tmp_path / "real_verl"))
    assert outcome(script, str(tmp_path), tiny_gpt2, train=True) == TRAINS
    (metrics_file,) = [os.path.join(d, f) for d, _, fs in os.walk(tmp_path) for f in fs if f == "metrics.jsonl"]
    (step,) = [m for m in map(json.loads, open(metrics_file)) if "train/reward/mean" in m or "agent/turns_per_trajectory" in m]
    assert step["agent/turns_per_trajectory"] >= 1 and "agent/tool_calls_per_trajectory" in step
    os.makedirs(tmp_path / "again")
    args = tiny_args(script, str(tmp_path / "again"), tiny_gpt2, str(tmp_path / "real_verl"))
    cfg = load_translated(translate(args))
    assert cfg.rollout.tool_config.endswith("gsm8k_tool_config.yaml") and cfg.rollout.multi_turn.max_turns == 5


def test_real_verls_geo3k_multi_turn_script_trains_a_step_on_a_vision_language_model(tmp_path, tiny_gpt2):
    """Its Qwen2.5-VL stands in as the tiny random one, its rows are geo3k rows with an image each and
    the tool-agent fields; the multi-turn rollout keeps the image in every later context."""
    from tools.real_verl_scripts.harness import VISION_FAMILY

    examples = load()
    name = "examples/sglang_multiturn/geo3k/run_qwen2.5-3b_geo3k_multiturn.sh"
    script = next(s for s in examples.scripts if s.name == name)
    provide_files(examples, str(tmp_path / "real_verl"))
    assert outcome(script, str(tmp_path), tiny_gpt2, train=True, vision_model=f"tiny:{VISION_FAMILY}") == TRAINS
