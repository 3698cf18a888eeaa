"""verl.roles.ModelRole's awake_token_budget, for a worker whose `budget` is a TokenBudget
(verl/workers/memory_budget.py) or None. Kept apart so that the optimizer module, which the budget's
module imports, can give it to every trainable worker."""

from __future__ import annotations

from typing import Optional


class AwakeBudget:
    budget = None  # a TokenBudget where the worker derives its micro-batches from the free memory

    def awake_token_budget(self) -> Optional[int]:
        """The token budget the free memory beside the awake engine gives, derived now; None without a
        derived budget, or with one already derived (what the memory was then is unknown)."""
        budget = self.budget
        if budget is None or budget.tokens is not None:
            return None
        return budget.estimate()[0]
