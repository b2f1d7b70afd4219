"""HOW a candidate is judged: the stages, in order, each taking a candidate and returning it with what it adds.
A new planning concern is one module here with an `add(candidate, planning)` and its place in STAGES."""

from __future__ import annotations

from launcher.plan.candidate import Candidate
from launcher.plan.request import Planning
from launcher.plan.stages import limits, memory, refusals, run_length, step_time, updates

STAGES = (limits.add, memory.add, step_time.add, run_length.add, updates.add, refusals.add)


def through_stages(candidate: Candidate, planning: Planning) -> Candidate:
    for stage in STAGES:
        if candidate.settled:
            break
        candidate = stage(candidate, planning)
    return candidate
