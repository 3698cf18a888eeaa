"""What a multi-turn rollout is built from, read from `config.rollout`: its tools (functions and real
verl's tool classes), its environment (a class, or real verl's interactions), and the wrapper around an
engine (`build_multi_turn`). The trainer loads them once (`load_agent_parts`) before any model loads, so a
bad tool spec or file fails in seconds, and the same tool and interaction objects then serve the rollout,
whichever backend built its engine (in this process, or vLLM replicas under Ray).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from verl.errors import ConfigError
from verl.rollout.base import RolloutEngine
from verl.rollout.multi_turn import MultiTurnRollout


@dataclasses.dataclass
class AgentParts:
    """A multi-turn run's tools (verl.agents.tools.Tool) and environment factory (a no-argument callable
    making one Environment per trajectory, or None)."""
    tools: list
    environment: Optional[Any] = None

    @property
    def tool_schemas(self) -> list | None:
        """The tools' JSON schemas for the chat template; None without tools."""
        return [tool.schema for tool in self.tools] or None


def load_agent_parts(rollout_cfg) -> AgentParts | None:
    """rollout.tools / tool_config / environment / interaction_config, loaded (real verl's tool and
    interaction classes constructed) once; None for a single-turn run. ConfigError for a bad spec or file."""
    if not rollout_cfg.is_multi_turn:
        return None
    from verl.agents.environment import load_environment

    r = rollout_cfg
    env = load_environment(r.environment) if r.environment else None
    if r.interaction_config:
        from verl.interactions.interaction_config import interaction_environment

        env = interaction_environment(r.interaction_config, timeout_s=r.multi_turn.tool_timeout_s)
    return AgentParts(rollout_tools(r), env)


def build_multi_turn(engine: RolloutEngine, tokenizer, config, parts: AgentParts) -> MultiTurnRollout:
    """The multi-turn wrapper `config.rollout` asks for, around `engine`, with the run's loaded parts."""
    from verl.data.prompts import uses_chat_template

    return MultiTurnRollout(engine, tokenizer, config.rollout, chat=uses_chat_template(tokenizer, config.data),
                            tools=parts.tools, environment=parts.environment,
                            template_kwargs=config.data.chat_template_kwargs)


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
