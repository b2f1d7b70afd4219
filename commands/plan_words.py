"""WHAT the planner's answers say on the command line: what stopped a configuration's prompts per step, how a
fitted configuration was judged, and which pinned keys are to blame when nothing fits. `plan` and `fit` word
the solver's data here (the refusals that `plan --json` carries are worded in launcher.plan.wording)."""

from __future__ import annotations

from launcher.plan.levers import MAX_PROMPTS_PER_STEP
from launcher.plan.value import critical_batch
from launcher.plan.wording import nothing_fits


def limit_text(limited_by: str) -> str:
    """What stopped the prompts per step (the solver's `limited_by`), in words."""
    return {
        "memory": "memory (the next prompts per step do not fit)",
        "objective": f"the objective (more prompts per step would learn less per hour, {critical_batch().text()})",
        "cap": f"the prompts-per-step cap ({MAX_PROMPTS_PER_STEP}), the card still had room",
        "pinned": "the pinned batch",
    }.get(limited_by, limited_by)


def fit_reason(result) -> str:
    """How a fit (launcher.plan.outcome.Fit) was judged: what it needs of the usable memory and on what
    measurement, or why nothing fits (`fit --json`'s `reason`)."""
    if result.profile is None:
        return nothing_fits(result.shortfall)
    measured, est = result.measured, result.estimate
    source = f" ({measured.text()}; est. {est.total_gib:.2f})" if measured is not None else ""
    return f"fits: {result.need_gib:.2f} of {result.usable_gib:.2f} GiB usable{source}"


def pin_problem(result) -> str | None:
    """When the pinned keys are why nothing fits (without them a configuration does), which ones; else None
    (`fit --json`'s `pin_problem`)."""
    pins = result.shortfall.pins if result.profile is None and result.shortfall is not None else ()
    if not pins:
        return None
    return f"with --set {', '.join(pins)} nothing fits on this card, and without them a configuration does"
