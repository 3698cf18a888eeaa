"""Real verl's GSM8K interaction (`verl.interactions.gsm8k_interaction.Gsm8kInteraction`), its
behaviour: the last assistant message is scored with the GSM8K rule in `strict` mode (the last
'#### <number>' of its last 300 characters, compared as a string with the ground truth from
`interaction_kwargs.ground_truth`). 1.0: the user says "Your response is correct!" and the
trajectory ends; otherwise "Your response is incorrect! You need to reflect on your answer and try
again." and the model goes on. The turn score is that 1.0 or 0.0."""

from __future__ import annotations

from typing import Any, Optional
from uuid import uuid4

from verl.interactions.base import BaseInteraction
from verl.rewards.real_verl_scores.gsm8k import compute_score

CORRECT = "Your response is correct!"
INCORRECT = "Your response is incorrect! You need to reflect on your answer and try again."


class Gsm8kInteraction(BaseInteraction):
    def __init__(self, config: dict):
        super().__init__(config)
        self._instance_dict: dict[str, dict] = {}

    async def start_interaction(self, instance_id: Optional[str] = None, ground_truth: Optional[str] = None,
                                **kwargs) -> str:
        instance_id = instance_id or str(uuid4())
        self._instance_dict[instance_id] = {"response": "", "ground_truth": ground_truth, "reward": 0.0}
        return instance_id

    async def generate_response(self, instance_id: str, messages: list[dict[str, Any]],
                                **kwargs) -> tuple[bool, str, float, dict]:
        content = next((m.get("content") for m in reversed(messages) if m.get("role") == "assistant"), "")
        self._instance_dict[instance_id]["response"] = content or ""
        reward = await self.calculate_score(instance_id)
        return (True, CORRECT, reward, {}) if reward == 1.0 else (False, INCORRECT, reward, {})

    async def calculate_score(self, instance_id: str, **kwargs) -> float:
        state = self._instance_dict[instance_id]
        return compute_score(state["response"], state["ground_truth"], method="strict", format_score=0.0, score=1.0)

    async def finalize_interaction(self, instance_id: str, **kwargs) -> None:
        self._instance_dict.pop(instance_id, None)
