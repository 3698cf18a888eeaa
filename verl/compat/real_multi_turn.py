"""Real verl's multi-turn keys (`actor_rollout_ref.rollout.multi_turn.*`, `rollout.agent.*`) -> this
project's multi-turn rollout: rows of `verl.compat.real_verl.TABLE`.

    multi_turn.enable=True                  the multi-turn rollout, read with the keys below
    multi_turn.tool_config_path             rollout.tool_config (real verl's tool YAML, its classes)
    multi_turn.interaction_config_path      rollout.interaction_config
    multi_turn.max_assistant_turns / max_user_turns
                                            rollout.multi_turn.max_turns = min(assistant turns,
                                            user turns + 1); neither: the response length (no limit but it)
    multi_turn.max_parallel_calls (1)       rollout.multi_turn.max_calls_per_turn; a turn runs to its end
                                            (stop_at_tool_call false), as real verl's does
    multi_turn.max_tool_response_length (256), tool_response_truncate_side (middle)
                                            rollout.multi_turn.max_tool_output_chars, tool_output_keep
    multi_turn.format                       hermes (real verl's gpt-oss and qwen3_coder parsers are refused)
    rollout.agent.default_agent_loop        rollout.multi_turn.default_agent (real verl: single_turn_agent)

The response length (data.max_response_length, or rollout.response_length) is the whole trajectory's
budget there and here (rollout.multi_turn.max_total_tokens). Real verl picks each row's agent loop by its
`agent_name` column, else `default_agent_loop`: rows without one run single-turn there, and do here
(a note says so). `use_inference_chat_template=True` (re-rendering earlier turns with the template) and
`num_repeat_rollouts` are refused; `tokenization_sanity_check_mode` (a warning) is accepted.
"""

from __future__ import annotations

from verl.compat.real_keys import ROLLOUT, as_bool, as_int, expand_path, ignored, only, pick, reads, refuse

MT = f"{ROLLOUT}.multi_turn"
AGENT = f"{ROLLOUT}.agent"
KEEP = {"left": "head", "right": "tail", "middle": "middle"}
PARSERS = {"hermes": "hermes"}
REAL_PARSERS = ("hermes", "gpt-oss", "qwen3_coder")  # real verl 0.9's ToolParser registry


def _turns(ctx, budget: int) -> int:
    assistant = ctx.get(f"{MT}.max_assistant_turns")
    user = ctx.get(f"{MT}.max_user_turns")
    limits = [as_int(assistant, f"{MT}.max_assistant_turns", low=1)] if assistant else []
    if user:  # after that many user turns the next model turn is the last
        limits.append(as_int(user, f"{MT}.max_user_turns", low=1) + 1)
    return min(limits) if limits else budget


def _format(ctx) -> str:
    value = ctx.get(f"{MT}.format") or "hermes"
    if value in PARSERS:
        return PARSERS[value]
    why = ("its tool-call format is not parsed here (hermes is)" if value in REAL_PARSERS else
           f"real verl's own ToolParser has no {value!r} format either (its: {', '.join(REAL_PARSERS)})")
    raise refuse(f"{MT}.format", value, why)


def _enable(value, ctx, key):
    if not as_bool(value, key):
        return {}
    if as_bool(ctx.get(f"{MT}.use_inference_chat_template") or False, f"{MT}.use_inference_chat_template"):
        raise refuse(f"{MT}.use_inference_chat_template", True, "re-rendering the earlier turns with the chat template; "
                     "the trajectory keeps the tokens the model saw and sampled here (docs/agents.md, Chat templates)")
    if ctx.get(f"{MT}.num_repeat_rollouts") is not None:
        raise refuse(f"{MT}.num_repeat_rollouts", ctx.get(f"{MT}.num_repeat_rollouts"),
                     "repeating a trajectory's rollout; rollout.n samples each prompt")
    if ctx.get(f"{MT}.function_tool_path"):
        raise refuse(f"{MT}.function_tool_path", ctx.get(f"{MT}.function_tool_path"),
                     "@function_tool files; give the functions as rollout.tools (docs/agents.md)")
    tools, interaction = ctx.get(f"{MT}.tool_config_path"), ctx.get(f"{MT}.interaction_config_path")
    if not tools and not interaction:
        ctx.notes.append(f"{key}=True without a tool or interaction file: one model turn per sample, as real verl's tool "
                         "agent loop without tools")
        return {}
    budget = ctx.get(f"{ROLLOUT}.response_length") or ctx.get("data.max_response_length") or 512
    budget = as_int(budget, "data.max_response_length", low=1)
    agent = pick(ctx.get(f"{AGENT}.default_agent_loop") or "single_turn_agent", f"{AGENT}.default_agent_loop",
                 {"single_turn_agent": "single_turn_agent", "tool_agent": "tool_agent"})
    if agent == "single_turn_agent":
        ctx.notes.append(f"multi-turn: a data row without an agent_name column runs single-turn, as in real verl (its "
                         f"{AGENT}.default_agent_loop=single_turn_agent); agent_name=tool_agent rows, or "
                         f"{AGENT}.default_agent_loop=tool_agent, run with the tools")
    out = {"rollout.multi_turn.max_total_tokens": budget, "rollout.multi_turn.max_turns": _turns(ctx, budget),
           "rollout.multi_turn.stop_at_tool_call": False,
           "rollout.multi_turn.max_calls_per_turn": as_int(ctx.get(f"{MT}.max_parallel_calls") or 1,
                                                           f"{MT}.max_parallel_calls", low=1),
           "rollout.multi_turn.max_tool_output_chars": as_int(ctx.get(f"{MT}.max_tool_response_length") or 256,
                                                              f"{MT}.max_tool_response_length", low=1),
           "rollout.multi_turn.tool_output_keep": pick(ctx.get(f"{MT}.tool_response_truncate_side") or "middle",
                                                       f"{MT}.tool_response_truncate_side", KEEP),
           "rollout.multi_turn.tool_format": _format(ctx), "rollout.multi_turn.default_agent": agent}
    if tools:
        out["rollout.tool_config"] = expand_path(tools)
    if interaction:
        out["rollout.interaction_config"] = expand_path(interaction)
    return out


_READ = "multi_turn.enable"
ENTRIES: list[tuple[str, dict]] = [
    (f"{MT}.enable", dict(convert=_enable, target="rollout.tool_config, rollout.interaction_config, "
                                                  "rollout.multi_turn.*", real_default=False,
                          note="True: the multi-turn rollout with real verl's tool / interaction files (the keys "
                               "below; docs/agents.md)")),
    (f"{MT}.tool_config_path", reads(_READ)),
    (f"{MT}.interaction_config_path", reads(_READ)),
    (f"{MT}.max_assistant_turns", reads(_READ + ": rollout.multi_turn.max_turns")),
    (f"{MT}.max_user_turns", reads(_READ + ": rollout.multi_turn.max_turns (+1)")),
    (f"{MT}.max_parallel_calls", reads(_READ + ": rollout.multi_turn.max_calls_per_turn", real_default=1)),
    (f"{MT}.max_tool_response_length", reads(_READ + ": rollout.multi_turn.max_tool_output_chars",
                                             real_default=256)),
    (f"{MT}.tool_response_truncate_side", reads(_READ + ": rollout.multi_turn.tool_output_keep",
                                                real_default="middle")),
    (f"{MT}.format", reads(_READ + ": rollout.multi_turn.tool_format (hermes)", real_default="hermes")),
    (f"{MT}.use_inference_chat_template", reads(_READ + " (only False)", real_default=False)),
    (f"{MT}.num_repeat_rollouts", reads(_READ + " (only null)")),
    (f"{MT}.function_tool_path", reads(_READ + " (only null)")),
    (f"{MT}.tokenization_sanity_check_mode", ignored("a warning about re-tokenized turns; turns are never "
                                                     "re-tokenized here")),
    (f"{MT}.*", ignored("used with multi_turn.enable only")),
    (f"{AGENT}.default_agent_loop", reads(_READ + ": rollout.multi_turn.default_agent",
                                          real_default="single_turn_agent")),
    (f"{AGENT}.agent_loop_config_path", only(None, why="custom agent loop classes")),
    (f"{ROLLOUT}.over_sample_rate", ignored("real verl 0.9 declares it and none of its code reads it: no effect "
                                            "there either")),
]
