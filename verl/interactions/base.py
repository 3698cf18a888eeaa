"""Real verl's `BaseInteraction`. Per trajectory the rollout calls (verl/agents/interactions.py):

    await interaction.start_interaction(instance_id, **row_interaction_kwargs)
    # after each model turn that makes no tool call:
    done, user_text, turn_score, extra = await interaction.generate_response(instance_id, messages,
                                                                             **row_interaction_kwargs)
    await interaction.finalize_interaction(instance_id)      # when the trajectory ends

`messages` is the conversation so far in chat form (the row's prompt messages, then the model's
turns as decoded text and the tool / user turns). One object serves every trajectory: keep state
per `instance_id`.
"""

from __future__ import annotations

from typing import Any, Optional
from uuid import uuid4


class BaseInteraction:
    def __init__(self, config: dict[str, Any]):
        self.config = config or {}
        self.name: str = self.config.get("name", "interaction_agent")

    async def start_interaction(self, instance_id: Optional[str] = None, **kwargs) -> str:
        return instance_id or str(uuid4())

    async def generate_response(self, instance_id: str, messages: list[dict[str, Any]],
                                **kwargs) -> tuple[bool, str, float, dict[str, Any]]:
        return False, "Your current result seems acceptable.", 0.8, {}

    async def calculate_score(self) -> float:
        return 0.0

    async def finalize_interaction(self) -> None:
        return None
