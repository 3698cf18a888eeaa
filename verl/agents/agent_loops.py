"""Which rows of a multi-turn run are multi-turn: real verl's per-row agent loop.

A data row may name its loop in a top-level `agent_name` column (real verl's layout; kept in the
row's extra fields): `tool_agent` (the multi-turn loop: tools, interactions) or `single_turn_agent`
(one model turn, no tools in its prompt). A row without one takes
`rollout.multi_turn.default_agent` (tool_agent here; main_ppo sets real verl's
`rollout.agent.default_agent_loop`, whose default is single_turn_agent).
"""

from __future__ import annotations

AGENT_LOOPS = ("tool_agent", "single_turn_agent")
MULTI_TURN = "tool_agent"


def row_agent(extra: dict, default: str) -> str:
    """The agent loop of a row with extra fields `extra`; ValueError for a name that is not a loop here."""
    name = (extra or {}).get("agent_name") or default
    if name not in AGENT_LOOPS:
        raise ValueError(f"agent_name {name!r} is not an agent loop here (there are: {', '.join(AGENT_LOOPS)})")
    return name
