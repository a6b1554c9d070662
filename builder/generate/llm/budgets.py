"""Spending caps of an LLM run: tokens and dollars over the whole run, checked before every request.

Rounds and samples per round bound the loop's shape (loop.py); this tracker bounds its spending. A cap
stops new requests; requests already in flight finish and are counted, so a run can overshoot a cap
by at most `concurrency - 1` responses.
"""

from __future__ import annotations

import threading

from builder.generate.llm.settings import Budget


class BudgetTracker:
    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.cost_usd = 0.0
        self.requests = 0
        self._lock = threading.Lock()

    def charge(self, prompt_tokens: int, completion_tokens: int, cost_usd: float | None) -> None:
        with self._lock:
            self.prompt_tokens += prompt_tokens
            self.completion_tokens += completion_tokens
            self.cost_usd += cost_usd or 0.0
            self.requests += 1

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def exhausted(self) -> str | None:
        """Why no further request may start, or None."""
        with self._lock:
            cap = self.budget.max_total_tokens
            if cap is not None and self.total_tokens >= cap:
                return f"token budget spent ({self.total_tokens} of {cap} tokens)"
            cost_cap = self.budget.max_cost_usd
            if cost_cap is not None and self.cost_usd >= cost_cap:
                return f"cost budget spent (${self.cost_usd:.4f} of ${cost_cap:.4f})"
        return None

    def summary(self) -> dict:
        return {
            "requests": self.requests,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cost_usd": round(self.cost_usd, 6),
        }
