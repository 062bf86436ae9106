"""What a plan says of its budget (``resources.max_cost``): the estimate against it, and whether the backend can
hold a run to it."""

from __future__ import annotations

from typing import Any

from cloudddp.plan import Plan


def budget_warnings(plan: Plan[Any, Any], backend: str, enforced: bool, why_not: str) -> list[str]:
    """The warnings of ``plan`` rendered by ``backend``; ``enforced``: whether the backend stops a run at its
    budget (``why_not`` says why it cannot)."""
    if plan.max_cost is None:
        return []
    out = []
    total = plan.estimate.total_cost if plan.estimate else None
    if total is not None and total > plan.max_cost:
        out.append(f"resources.max_cost: the estimated cost ${total:,.2f} is over the budget of ${plan.max_cost:,.2f}")
    elif total is None:
        out.append(
            f"resources.max_cost: there is no cost estimate to check the budget of ${plan.max_cost:,.2f} against"
        )
    if not enforced:
        out.append(f"resources.max_cost is not enforced by the {backend} backend: {why_not}")
    return out
