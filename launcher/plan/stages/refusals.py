"""The refusals, the stage that adds WHY a rung that fits is still not the ladder's choice: nothing could be
derived for its `auto` keys, or its derived run has fewer optimizer updates than its min_updates
(launcher.plan.duration.too_short). A profile the user named runs however few it has."""

from __future__ import annotations

from launcher.plan.candidate import Candidate
from launcher.plan.duration import DEFAULT_HOURS, too_short
from launcher.plan.request import Planning


def add(candidate: Candidate, planning: Planning) -> Candidate:
    if candidate.not_derived is not None:  # a rung nothing could be derived from: its placeholders never run
        candidate.fits, candidate.reason = False, candidate.not_derived
        return candidate
    if candidate.coverage is None:
        return candidate
    cut = _cut_answers(candidate, planning)
    if cut:
        candidate.fits, candidate.reason = False, f"{cut}; {candidate.reason}"
        return candidate
    judged, timed_as = candidate.coverage
    floor = candidate.profile.min_updates
    brief = too_short(judged, floor, timed_as) if judged is not None else None
    if brief:
        candidate.fits, candidate.reason = False, f"{brief}; {candidate.reason}"
    elif candidate.run is not None and judged is not candidate.run and too_short(candidate.run, floor):
        candidate.notes.append(_guessed_speed_note(planning.gpu, candidate.profile, timed_as))
    return candidate


def _guessed_speed_note(gpu, profile, timed_as: str | None) -> str:
    """Why a rung whose run at the default card's speed has too few updates may still be chosen."""
    judged = (
        f"judged as the fastest card of about {gpu.total_gib:g} GiB the table knows ({timed_as}) would run it"
        if timed_as
        else f"not judged: the table knows no card of about {gpu.total_gib:g} GiB"
    )
    return (
        f"{gpu.name} is not in the card table: its steps are timed at the default card's speed, which errs long, "
        f"so whether a rung's run reaches {profile.min_updates} optimizer steps is {judged}; {profile.name}'s run is the "
        f"steps the default speed fits into {DEFAULT_HOURS:g} h, so on a faster card it ends sooner (--hours H "
        "or --set max_steps=N for a longer run)"
    )


def _cut_answers(candidate: Candidate, planning: Planning) -> str | None:
    """Why a rung whose completion cap the solver derived below what the task's answers need gives way: it keeps
    its model by cutting every answer short, the first lever it should give up last."""
    from launcher.plan.completion_lengths import completion_plan

    profile = candidate.profile
    if (candidate.written or {}).get("max_completion_length") != "auto":
        return None
    need = completion_plan(profile, planning.arch(profile.model), measurements=planning.request.measurements).cap
    if profile.max_completion_length >= need:
        return None
    return (
        f"derived for this card its completions are cut at {profile.max_completion_length} tokens, below the "
        f"{need} the task's answers need: the next rung (a smaller model) keeps them whole (--profile to run this "
        "rung anyway)"
    )
