"""The refusals, the stage that adds WHY a rung that fits is still not the ladder's choice: nothing could be
derived for its `auto` keys, or its derived run covers too little of the data (launcher.plan.duration.too_short).
A profile the user named runs however little it covers."""

from __future__ import annotations

from launcher.plan.candidate import Candidate
from launcher.plan.duration import DEFAULT_HOURS, MIN_RUN_EPOCHS, too_short
from launcher.plan.request import Planning


def add(candidate: Candidate, planning: Planning) -> Candidate:
    if candidate.not_derived is not None:  # a rung nothing could be derived from: its placeholders never run
        candidate.fits, candidate.reason = False, candidate.not_derived
        return candidate
    if candidate.coverage is None:
        return candidate
    judged, timed_as = candidate.coverage
    brief = too_short(judged, timed_as) if judged is not None else None
    if brief:
        candidate.fits, candidate.reason = False, f"{brief}; {candidate.reason}"
    elif judged is not candidate.run and too_short(candidate.run):
        candidate.speed_note = _guessed_speed_note(planning.gpu, candidate.profile.name, timed_as)
    return candidate


def _guessed_speed_note(gpu, name: str, timed_as: str | None) -> str:
    """Why a rung whose run at the default card's speed covers too little of the data may still be chosen."""
    judged = (
        f"judged as the fastest card of about {gpu.total_gib:g} GiB the table knows ({timed_as}) would run it"
        if timed_as
        else f"not judged: the table knows no card of about {gpu.total_gib:g} GiB"
    )
    return (
        f"{gpu.name} is not in the card table: its steps are timed at the default card's speed, which errs long, "
        f"so whether a rung's run covers {MIN_RUN_EPOCHS:g} epochs of the data is {judged}; {name}'s run is the "
        f"steps the default speed fits into {DEFAULT_HOURS:g} h, so on a faster card it ends sooner (--hours H "
        "or --set max_steps=N for a longer run)"
    )
