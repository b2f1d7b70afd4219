"""WHICH profile runs: the plan of a request (launcher.plan.request), every candidate of its ladder through the
stages (launcher.plan.stages), and the first that fits, in ladder order, chosen.

A profile fits when vLLM can start in its share of the card and its estimated total stays within the free
memory less a margin (GPU_MARGIN_TEXT says how much and why). The candidate and plan records are
launcher.plan.candidate's; here the plan gets its notes.
"""

from __future__ import annotations

from launcher.plan.candidate import Candidate, Plan
from launcher.plan.completion_lengths import lengths_notes
from launcher.plan.ladder import ladder
from launcher.plan.request import Planning, PlanRequest
from launcher.plan.stages import through_stages


def make_plan(request: PlanRequest) -> Plan:
    """The request's ladder judged for its machine: cuda profiles on a GPU, cpu ones without; the first that
    fits chosen; the notes of the machine, the choice, the derivation and the chosen one's lengths."""
    candidates, derivation_notes = ladder(request)
    derived = [c.profile for c in candidates]
    planning = Planning.of(request, candidates)
    judged = [through_stages(c, planning) for c in planning.candidates]
    chosen = next((c for c in judged if c.fits), None)
    notes = [*planning.notes, *_choice_notes(planning, judged, chosen), *derivation_notes]
    notes += lengths_notes(chosen.profile if chosen else None, request.measurements)
    return Plan(request.machine, judged, chosen.profile if chosen else None, planning.margin_gib, notes, derived)


def _choice_notes(planning: Planning, candidates: list[Candidate], chosen: Candidate | None) -> list[str]:
    """vLLM off on this card, what the ledger changed, and what the chosen one's run and standby mean."""
    gpu, notes = planning.gpu, []
    if gpu is not None and any(c.reason.startswith("vLLM off") for c in candidates):
        notes.append(
            f"{gpu.name}: no bfloat16, so vLLM is off for the models it refuses in float16 (Gemma 2/3, "
            "GLM-4); those rungs generate with transformers: slower, the KV cache in the training process"
        )
    notes.extend(c.ledger_note for c in candidates if c.ledger_note)
    if chosen is None:
        return notes
    notes.extend(chosen.notes)
    run, profile = chosen.run, chosen.profile
    total = run.total_hours if run is not None else None
    if run is not None and total and run.budget_hours and total > run.budget_hours * 1.1:
        # pinned steps past the budget: it stops at the budget
        notes.append(
            f"{profile.name}: its {run.steps:,} steps ({run.basis}) are predicted to take {total:.1f} h, past "
            f"the --hours {run.budget_hours:g} budget by more than 10%: the run stops at the budget with a "
            "checkpoint, the adapter and the report"
        )
    if profile.fast_inference and profile.vllm_standby and profile.load_in_4bit:
        from launcher.plan.levers import STANDBY_FAILURES

        notes.append(
            f"{profile.name} runs vLLM standby with 4-bit weights, which the fit solver never chooses by "
            f"itself: {STANDBY_FAILURES}; vllm_standby: false avoids it"
        )
    return notes
