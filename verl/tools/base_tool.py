"""Real verl's `BaseTool`: a stateful tool with a per-call lifecycle.

For each call the rollout makes (verl/agents/class_tools.py, as real verl's tool agent loop):

    instance_id, _ = await tool.create(create_kwargs=sample_tools_kwargs[tool.name]["create_kwargs"])
    response, step_reward, metrics = await tool.execute(instance_id, arguments, agent_data=...)
    await tool.release(instance_id)

`create_kwargs` comes from the data row's `extra_info.tools_kwargs.<tool name>` (real verl's
layout, e.g. the ground truth a checking tool compares with). `calc_reward` is the tool's own
helper: the loop does not call it. One tool object serves every trajectory (its instances are
told apart by `instance_id`), from several threads: keep per-instance state in a dict keyed by it.
"""

from __future__ import annotations

from typing import Any, Optional
from uuid import uuid4

from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse


class BaseTool:
    def __init__(self, config: dict, tool_schema: Optional[OpenAIFunctionToolSchema]):
        self.config = config or {}
        self.tool_schema = tool_schema or self.get_openai_tool_schema()
        if self.tool_schema is None:
            raise ValueError(f"{type(self).__name__}: no tool schema (give tool_schema in the tool YAML)")
        self.name = self.tool_schema.function.name

    def get_openai_tool_schema(self) -> Optional[OpenAIFunctionToolSchema]:
        return getattr(self, "tool_schema", None)

    async def create(self, instance_id: Optional[str] = None, **kwargs) -> tuple[str, ToolResponse]:
        return (instance_id or str(uuid4())), ToolResponse()

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs) -> tuple[ToolResponse, float, dict]:
        return ToolResponse(text="Updated the tool state."), 0.0, {}

    async def calc_reward(self, instance_id: str, **kwargs) -> float:
        return 0.0

    async def release(self, instance_id: str, **kwargs) -> None:
        return None
