"""WHICH rungs a plan judges: the request's profiles, with what the fit solver derives for this machine (a model
of the user's gets configurations derived from the rungs' intents; on a GPU the rungs' keys written `auto`; on
the CPU the completion cap the task needs), each as a candidate for the stages (launcher.plan.stages)."""

from __future__ import annotations

from launcher.plan.candidate import Candidate
from launcher.plan.derive import as_written, derive_cpu_lengths, derive_ladder, derive_rungs
from launcher.plan.request import PlanRequest

# Correctness rewards that judge a program by its test cases: a profile judged by one trains programs.
PROGRAM_JUDGES = ("code", "binary_code")


def ladder_rungs(profiles: list) -> list:
    """The profiles of a folder that are rungs of its ladder: a profile written with tools or an environment
    (docs/tools.md), or judged on programs passing test cases (the code demo, docs/cpu-demo.md), trains another
    thing than its neighbours, so it is never a fallback from them and runs with --profile; a folder of such
    profiles alone is a ladder of its own."""
    plain = [p for p in profiles if not (p.tools or p.environment or p.correctness in PROGRAM_JUDGES)]
    return plain or profiles


def ladder(request: PlanRequest) -> tuple[list[Candidate], list[str]]:
    """(the candidates, the derivation's notes for the plan)."""
    profiles, machine, measurements = list(request.profiles), request.machine, request.measurements
    if not request.derive:
        return as_written(profiles), []
    if machine.gpus and request.model is not None:
        return derive_ladder(profiles, request.model, machine, pinned=request.pinned, measurements=measurements)
    if machine.gpus:
        return derive_rungs(profiles, machine, measurements=measurements)
    # the CPU: no fit solver, but a completion cap written `auto` is still the task's, never a placeholder
    return derive_cpu_lengths(profiles, measurements=measurements)
