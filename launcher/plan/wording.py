"""WHAT the fit solver's answers say: the sentences that `plan --json` carries as a rung's `reason` (a rung
nothing could be derived from for the card), what stopped a configuration's prompts per step, how a fit was
judged, and which pinned keys are to blame when nothing fits; worded here from the solver's data
(launcher.plan.outcome) so that the search stays free of prose, and `plan` and `fit` print the same words."""

from __future__ import annotations

from contract.errors import ProfileError
from launcher.plan.levers import MAX_PROMPTS_PER_STEP
from launcher.plan.outcome import BATCH, REFUSED, VLLM, Shortfall
from launcher.plan.value import critical_batch


def nothing_fits(shortfall: Shortfall) -> str:
    """Why nothing fits: the least configuration, and what it needs against the card (or why it cannot start)."""
    s = shortfall
    if s.kind == BATCH:
        return (
            f"nothing fits: {s.generations} generations x {s.prompts} prompt(s) per step cannot be cut into "
            "the pinned batch"
        )
    what = (
        f"{s.generations} generations of {s.completion} tokens, LoRA {s.rank}, "
        f"{'4-bit' if s.four_bit else '16-bit'}, {s.prompts} prompt(s) a step, batch "
        f"{s.batch}, " + ("vLLM holding one group" if s.vllm else "transformers generating")
    )
    if s.kind == VLLM:
        return f"nothing fits: even {what}: {s.vllm_problem}"
    if s.kind == REFUSED:
        return (
            f"nothing fits: even {what} is refused here (estimated {s.need_gib:.2f} GiB of {s.limit_gib:.2f} an "
            "estimate may use); this machine's ledger or a pinned key rules out every larger step"
        )
    return (
        f"nothing fits: even {what} needs {s.need_gib:.2f} GiB, {s.limit_gib:.2f} of {s.usable_gib:.2f} usable "
        "an estimate may use (largest: "
        + ", ".join(f"{k} {v:.2f}" for k, v in s.largest)
        + f"); a card of {s.card_gib:.1f} GiB would hold it"
    )


def pinned_vllm_refused(refusal: str) -> ProfileError:
    """The refusal of fast_inference pinned true on a card whose vLLM refuses the model (`refusal`: why)."""
    return ProfileError(
        "--set",
        "fast_inference",
        f"pinned true, but {refusal}",
        "drop --set fast_inference=true: transformers generates on this card",
    )


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
