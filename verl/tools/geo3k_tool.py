"""Real verl's Geometry3K answer-checking tool (`verl.tools.geo3k_tool.Geo3kTool`): as the GSM8K
tool (verl/tools/gsm8k_tool.py), the answer taken as written (no \\boxed{} needed) and graded
against the ground truth as real verl's geo3k scorer grades (mathruler's grade_answer: our
verl/rewards/geo3k.py answers_equal), 1.0 or 0.0 with no format part."""

from __future__ import annotations

from verl.rewards.geo3k import answers_equal
from verl.tools.gsm8k_tool import AnswerCheckingTool


class Geo3kTool(AnswerCheckingTool):
    def score(self, response: str, ground_truth) -> float:
        return 1.0 if answers_equal(response, str(ground_truth)) else 0.0
