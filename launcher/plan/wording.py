"""WHAT the fit solver's refusals say: the sentences that `plan --json` carries as a rung's `reason` (a rung
nothing could be derived from for the card), worded here from the solver's data (launcher.plan.outcome) so that
the search stays free of prose; `fit` prints the same words. The command's own lines are in commands/."""

from __future__ import annotations

from contract.errors import ProfileError
from launcher.plan.outcome import BATCH, REFUSED, VLLM, Shortfall


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
