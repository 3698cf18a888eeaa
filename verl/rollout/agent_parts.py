"""What a multi-turn rollout is built from, read from `config.rollout`: its tools (functions and real
verl's tool classes), its environment (a class, or real verl's interactions), and the wrapper around an
engine (`build_multi_turn`). The trainer asks `agent_tool_schemas` before any model loads, so a bad tool
spec or file fails in seconds.
"""

from __future__ import annotations

from verl.errors import ConfigError
from verl.rollout.base import RolloutEngine
from verl.rollout.multi_turn import MultiTurnRollout


def build_multi_turn(engine: RolloutEngine, tokenizer, config) -> MultiTurnRollout:
    """The multi-turn wrapper `config.rollout` asks for, around `engine`."""
    from verl.agents.environment import load_environment
    from verl.data.prompts import uses_chat_template

    r = config.rollout
    tools = rollout_tools(r)
    env = load_environment(r.environment) if r.environment else None
    if r.interaction_config:
        from verl.interactions.interaction_config import interaction_environment

        env = interaction_environment(r.interaction_config, timeout_s=r.multi_turn.tool_timeout_s)
    return MultiTurnRollout(engine, tokenizer, r, chat=uses_chat_template(tokenizer, config.data), tools=tools,
                            environment=env, template_kwargs=config.data.chat_template_kwargs)


def rollout_tools(rollout_cfg) -> list:
    """The Tools of `rollout.tools` (functions) and `rollout.tool_config` (real verl's tool classes,
    verl/tools/tool_config.py); ConfigError for a bad spec or file, or one name given twice."""
    from verl.agents.tools import load_tools

    tools = load_tools(rollout_cfg.tools) if rollout_cfg.tools else []
    if rollout_cfg.tool_config:
        from verl.tools.tool_config import load_tool_config

        names = {t.name for t in tools}
        for tool in load_tool_config(rollout_cfg.tool_config):
            if tool.name in names:
                raise ConfigError(f"rollout.tool_config: the tool '{tool.name}' of '{rollout_cfg.tool_config}' has "
                                  "the name of one of rollout.tools; tool names must be unique")
            tools.append(tool)
    return tools


def agent_tool_schemas(rollout_cfg) -> list | None:
    """JSON schemas of rollout.tools and rollout.tool_config for the chat template (None without tools);
    loading them (and rollout.interaction_config's classes) before any model loads makes a bad tool spec
    or file fail in seconds."""
    if rollout_cfg.interaction_config:
        from verl.interactions.interaction_config import load_interactions

        load_interactions(rollout_cfg.interaction_config)
    if not (rollout_cfg.tools or rollout_cfg.tool_config):
        return None
    return [tool.schema for tool in rollout_tools(rollout_cfg)]
