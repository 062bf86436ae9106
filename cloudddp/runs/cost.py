"""What a run cost next to what was estimated when it was submitted: the runner's cost report.

:class:`CostReport` puts a backend's :class:`~cloudddp.catalog.bill.Bill` next to the estimate the plan had at
submit (kept in the run record's info at launch), the budget and what the budget watch did. A backend that
cannot say reports no bill, and the report says why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cloudddp.catalog.bill import Bill
from cloudddp.plan import Estimate


@dataclass
class CostReport:
    """A run's bill next to the estimate its plan had at submit."""

    run_id: str
    backend: str
    state: str
    estimate: Estimate | None
    bill: Bill | None
    reason: str = ""
    """Why there is no bill (or no estimate)."""
    max_cost: float | None = None
    budget: dict[str, Any] = field(default_factory=dict)
    """What the budget watch did: started (pid), stopped the run (at what spend), or why it could not watch."""
    measured: dict[str, Any] | None = None
    """The step time kept from this run for the next estimate, or why none."""
    attempts: list[dict[str, Any]] = field(default_factory=list)
    """A run under recovery: every attempt's ``run_id``, ``state`` and ``cost`` (``bill`` is the current one's)."""

    @property
    def actual_cost(self) -> float | None:
        """What the job cost: the bill's, or every attempt's together under recovery (None if one is unknown)."""
        if self.attempts:
            costs = [a["cost"] for a in self.attempts]
            return None if any(c is None for c in costs) else float(sum(costs))
        return self.bill.cost if self.bill else None

    @property
    def estimated_cost(self) -> float | None:
        return self.estimate.total_cost if self.estimate else None

    @property
    def difference(self) -> float | None:
        """Actual over estimated cost, minus one (0.1: 10 % over the estimate)."""
        est, actual = self.estimated_cost, self.actual_cost
        if actual is None or not est:
            return None
        return actual / est - 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "backend": self.backend,
            "state": self.state,
            "estimate": self.estimate.to_dict() if self.estimate else None,
            "actual": self.bill.to_dict() if self.bill else None,
            "reason": self.reason,
            "estimated_cost": self.estimated_cost,
            "actual_cost": self.actual_cost,
            "attempts": self.attempts,
            "difference": self.difference,
            "max_cost": self.max_cost,
            "budget": self.budget,
            "measured": self.measured,
        }
