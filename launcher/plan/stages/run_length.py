"""The run length, the stage that adds HOW MANY steps a candidate trains (launcher.plan.duration: its steps,
prompts, epochs and predicted hours, within --hours) and sets its max_steps to them, so that the attempt trains
exactly what the plan says; and, for a rung derived on a card the table does not know, the run the coverage
rule judges instead (the refusals stage reads it)."""

from __future__ import annotations

from dataclasses import replace

from launcher.plan.candidate import Candidate
from launcher.plan.duration import run_length, seconds_text
from launcher.plan.request import Planning
from tasks.size import train_rows


def add(candidate: Candidate, planning: Planning) -> Candidate:
    profile = candidate.profile
    step_s = candidate.speed.step_s if candidate.speed is not None else None
    candidate.run = _run(profile, step_s, planning.request.hours)
    if step_s is not None:
        beside = _beside(candidate, planning)
        hours = planning.request.hours
        if hours and candidate.run.basis.startswith("--hours"):  # a budget of wall-clock hours holds it all
            spare = max(hours - beside.seconds / 3600, step_s / 3600)
            candidate.run = replace(
                _run(profile, step_s, spare),
                basis=f"--hours {hours:g} at the predicted step, {seconds_text(beside.seconds)} of it beside the steps",
                budget_hours=hours,
            )
            beside = _beside(candidate, planning)
        candidate.run = replace(candidate.run, beside=beside)
    if (
        candidate.written is not None
        and candidate.not_derived is None
        and candidate.fits
        and not planning.request.named
    ):
        candidate.coverage = _coverage_run(candidate, planning)
    if profile.max_steps != candidate.run.steps:
        candidate.profile = profile.model_copy(update={"max_steps": candidate.run.steps})
    return candidate


def _beside(candidate: Candidate, planning: Planning):
    """What the candidate's run does beside its steps, timed (launcher.plan.run_time)."""
    from launcher.plan.completion_lengths import completion_plan
    from launcher.plan.run_time import run_time

    profile, run = candidate.profile, candidate.run
    assert run is not None, "timed after its run length"
    arch = planning.arch(profile.model)
    lengths = completion_plan(profile, arch, measurements=planning.request.measurements)
    return run_time(profile, arch, run.steps, planning.gpu, candidate.estimate, lengths)


def _run(profile, step_s: float | None, hours: float | None):
    rows, basis = train_rows(
        profile.dataset, profile.train_samples, config=profile.dataset_config or None, split=profile.train_split
    )
    prompts = profile.completions_per_step // profile.num_generations
    return run_length(profile, step_s, prompts, hours=hours, rows=rows, rows_basis=basis)


def _coverage_run(candidate: Candidate, planning: Planning) -> tuple:
    """(the run the data-coverage rule judges, the card it is timed as; None: the card's own). A card the card
    table does not know is timed at the default card's speed, which errs long on purpose, so its run's epochs
    say nothing of what the card can do: the rule judges instead the run the candidate (before its run length is
    set) would have on the fastest card the table knows with about its memory, so that a rung is passed over
    only where no known card of that memory could run enough of the data. No known card of that memory: not
    judged (None, None). A step of the shape measured on this machine is the card's own speed."""
    speed = candidate.speed
    if speed is None or speed.card_known or speed.measured_s is not None:
        return candidate.run, None
    from launcher.card.detect import MIN_CAPABILITY
    from launcher.card.facts import cards_like
    from launcher.plan.completion_lengths import completion_plan
    from launcher.plan.speed import predict

    gpu = planning.gpu
    like = cards_like(gpu.total_gib, MIN_CAPABILITY)
    if not like:
        return None, None
    profile = candidate.profile
    arch = planning.arch(profile.model)
    lengths = completion_plan(profile, arch, measurements=planning.request.measurements)
    step_s, card = min(
        (predict(profile, arch, replace(gpu, name=card.name), candidate.estimate, lengths).step_s, card.name)
        for card in like
    )
    return _run(profile, step_s, planning.request.hours), card
