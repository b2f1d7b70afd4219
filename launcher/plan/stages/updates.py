"""The update floor, the stage that adds WHETHER a candidate's run makes enough optimizer updates to learn: a run
of fewer than its min_updates (the fewest any published text run here trained to completion: 100) says so in
the plan, with what would reach the floor. A length the user pinned (max_steps, num_train_epochs) is theirs.
The ladder's own rungs derived for the card give way to the next one instead (the refusals stage)."""

from __future__ import annotations

import math

from launcher.plan.candidate import Candidate
from launcher.plan.request import Planning


def add(candidate: Candidate, planning: Planning) -> Candidate:
    run, profile = candidate.run, candidate.profile
    floor = profile.min_updates
    if run is None or not floor or run.steps >= floor or run.basis.startswith(("max_steps", "num_train")):
        return candidate
    candidate.notes.append(
        f"{profile.name}: its run has {run.steps:,} optimizer steps ({run.basis}), fewer than the {floor} a run "
        f"should reach (min_updates); {'; '.join(_reaching(candidate, floor))}"
    )
    return candidate


def _reaching(candidate: Candidate, floor: int) -> list[str]:
    """What would give the run `floor` updates: the hours they take at the predicted step, 4-bit weights where
    16-bit ones leave a larger model no room to step faster, a smaller model."""
    profile, speed = candidate.profile, candidate.speed
    ways = []
    if speed is not None and speed.step_s:
        hours = math.ceil(floor * speed.step_s / 360) / 10
        ways.append(f"--hours {hours:g} gives it {floor}")
    if profile.device == "cuda" and not profile.load_in_4bit and profile.uses_lora:
        ways.append("4-bit weights (--set load_in_4bit=true) leave room for more prompts a step")
    ways.append("a smaller model makes more steps in the same hours (`python train.py fit MODEL` plans another)")
    return ways
