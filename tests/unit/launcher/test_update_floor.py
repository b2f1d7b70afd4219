"""The update floor (launcher.plan.stages.updates and the ladder's guard): a run has at least its min_updates
optimizer steps, or the plan says so and what would reach them; the default figure is what published runs train."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from launcher.card.detect import detect_machine
from launcher.plan.choose import make_plan
from launcher.plan.duration import run_length
from launcher.plan.request import PlanRequest
from profiles.fields import ProfileFields
from profiles.load import load_profile, load_profiles

REPO = Path(__file__).resolve().parents[3]
PROFILES = REPO / "profiles"
FLOOR_NOTE = "a run should reach (min_updates)"


def test_the_default_floor_is_the_fewest_steps_a_published_text_run_trained_to_the_end():
    runs = yaml.safe_load((REPO / "benchmarks" / "published_step_times.yaml").read_text())
    finished = [
        int(done)
        for run in runs
        if not run.get("vision")
        for done, total in re.findall(r"for (\d+)/(\d+) steps", run.get("how_measured") or "")
        if done == total
    ]
    assert len(finished) >= 15  # the figure rests on many runs, not one
    assert ProfileFields.model_fields["min_updates"].default == min(finished) == 100


def _model_plan(model: str, gib: float, card: str, *sets: str):
    machine = detect_machine(what_if_gib=gib, what_if_name=card)
    rungs = load_profiles(PROFILES, [f"model={model}", *sets], device="cuda")
    pinned = {s.split("=", 1)[0] for s in sets}
    return make_plan(PlanRequest(rungs, machine, model=model, pinned=pinned))


def test_a_run_below_the_floor_says_so_and_what_reaches_it():
    plan = _model_plan("microsoft/phi-4", 15.0, "Tesla T4")
    chosen = next(c for c in plan.candidates if c.fits)
    assert chosen.run.steps < 100
    note = next(n for n in plan.notes if FLOOR_NOTE in n)
    hours = float(re.search(r"--hours ([\d.]+) gives it 100", note).group(1))
    assert hours * 3600 / chosen.speed.step_s >= 100 > (hours - 0.1) * 3600 / chosen.speed.step_s
    assert "a smaller model" in note


def test_no_word_where_the_floor_is_off_or_the_user_pinned_the_length():
    assert not any(FLOOR_NOTE in n for n in _model_plan("microsoft/phi-4", 15.0, "Tesla T4", "min_updates=0").notes)
    pinned = _model_plan("microsoft/phi-4", 15.0, "Tesla T4", "max_steps=20")
    assert not any(FLOOR_NOTE in n for n in pinned.notes)


def test_the_ladders_guard_counts_updates_not_epochs():
    """A 14B run of about 300 updates on an A100 40GB is a normal run (a fifth of an epoch is not the measure)."""
    machine = detect_machine(what_if_gib=40.0, what_if_name="NVIDIA A100-SXM4-40GB")
    plan = make_plan(PlanRequest([p for p in load_profiles(PROFILES) if p.device == "cuda"], machine))
    chosen = next(c for c in plan.candidates if c.fits)
    assert "14B" in chosen.profile.description or "14b" in chosen.profile.name
    assert chosen.run.steps >= 100 and chosen.run.epochs < 0.2
    assert not any(FLOOR_NOTE in n for n in plan.notes)
    # on a card where the 14B rung makes fewer than 100 updates, it gives way, saying why
    l4 = make_plan(
        PlanRequest(
            [p for p in load_profiles(PROFILES) if p.device == "cuda"],
            detect_machine(what_if_gib=22.5, what_if_name="NVIDIA L4"),
        )
    )
    refused = next(c for c in l4.candidates if c.profile.name == "gpu-40gb-qwen2.5-14b")
    assert not refused.fits and refused.reason.startswith("derived for this card its run has")


def test_a_derived_rung_that_cuts_the_answers_gives_way():
    machine = detect_machine(what_if_gib=16.0, what_if_name="NVIDIA GeForce RTX 4060 Ti")
    plan = make_plan(PlanRequest([p for p in load_profiles(PROFILES) if p.device == "cuda"], machine))
    cut = next(c for c in plan.candidates if c.profile.name == "gpu-40gb-qwen2.5-14b")
    assert not cut.fits and "completions are cut at" in cut.reason
    chosen = next(c for c in plan.candidates if c.fits)
    assert chosen.profile.max_completion_length >= 640


def test_the_default_run_is_raised_to_the_floor_when_an_epoch_is_shorter():
    profile = load_profile(PROFILES / "cpu-tiny-8gen.yaml", ["max_steps=auto"])
    short = run_length(profile, None, 16, rows=500, rows_basis="500 rows")  # an epoch: 32 steps
    assert short.steps == 100 and "min_updates" in short.basis
    within = run_length(profile, 200.0, 16, rows=500, rows_basis="500 rows")  # 4 h hold 72 steps of 200 s
    assert within.steps == 72
    off = run_length(
        load_profile(PROFILES / "cpu-tiny-8gen.yaml", ["max_steps=auto", "min_updates=0"]),
        None,
        16,
        rows=500,
        rows_basis="500 rows",
    )
    assert off.steps == 32 and off.basis.startswith("default: one epoch")
