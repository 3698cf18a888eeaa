"""Real verl's GSM8K answer-checking tool (`verl.tools.gsm8k_tool.Gsm8kTool`), its behaviour:

`execute(answer=...)` prefixes the answer with '#### ' unless it starts so, scores it with the
GSM8K rule in `flexible` mode against the instance's ground truth (`create_kwargs.ground_truth`,
from the row's `extra_info.tools_kwargs.calc_gsm8k_reward`), and answers
"Current parsed answer='72' reward=1.0". Its step reward is 0.0 when the score improved on the
instance's last one and -0.05 otherwise; real verl's loop creates a fresh instance per call, so a
first call always starts from 0.0 (a wrong answer: -0.05).
"""

from __future__ import annotations

from typing import Any, Optional
from uuid import uuid4

from verl.rewards.real_verl_scores.gsm8k import compute_score
from verl.tools.base_tool import BaseTool
from verl.tools.schemas import ToolResponse


class AnswerCheckingTool(BaseTool):
    """The shared shape of real verl's answer-checking tools: keep the last answer per instance,
    score it, and charge 0.05 for a submission that did not improve. Subclasses define `score`."""

    def __init__(self, config: dict, tool_schema):
        super().__init__(config, tool_schema)
        self._instance_dict: dict[str, dict] = {}

    async def create(self, instance_id: Optional[str] = None, ground_truth: Optional[str] = None,
                     **kwargs) -> tuple[str, ToolResponse]:
        instance_id = instance_id or str(uuid4())
        if ground_truth is None:
            ground_truth = (kwargs.get("create_kwargs") or {}).get("ground_truth")
        self._instance_dict[instance_id] = {"response": "", "ground_truth": ground_truth, "reward": 0.0}
        return instance_id, ToolResponse()

    def submitted(self, answer: str) -> str:
        return answer

    def score(self, response: str, ground_truth) -> float:
        raise NotImplementedError

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs) -> tuple[ToolResponse, float, dict]:
        answer = parameters.get("answer", "")
        answer = answer if isinstance(answer, str) else str(answer)
        state = self._instance_dict[instance_id]
        state["response"] = self.submitted(answer)
        reward = await self.calc_reward(instance_id)
        step_reward = 0.0 if reward > state["reward"] else -0.05
        state["reward"] = reward
        return ToolResponse(text=f"Current parsed {answer=} {reward=}"), step_reward, {}

    async def calc_reward(self, instance_id: str, **kwargs) -> float:
        state = self._instance_dict[instance_id]
        return self.score(state["response"], state["ground_truth"])

    async def release(self, instance_id: str, **kwargs) -> None:
        self._instance_dict.pop(instance_id, None)


class Gsm8kTool(AnswerCheckingTool):
    def submitted(self, answer: str) -> str:
        return answer if answer.startswith("#### ") else "#### " + answer

    def score(self, response: str, ground_truth) -> float:
        return compute_score(response, ground_truth, method="flexible", format_score=0.0, score=1.0)
