"""HOW the fit solver's answer is shown (`python train.py --fit --set model=ORG/NAME`): the derived profile as YAML
that loads as it is, led by comment lines saying what it needs, what was given up against the ambition (GiB per
lever) and what card the full ambition needs; or one JSON object with --json."""

from __future__ import annotations

import json
import sys

from contract.errors import EXIT_OK, EXIT_OUT_OF_MEMORY, UsageError
from launcher.plan.settings import settings_of
from launcher.plan.derive import best_fit, fit_gpus
from launcher.plan.solve import Fit, objective, quality_key


def fit_text(result: Fit, card: str) -> str:
    """The profile YAML with a header of comments (YAML ignores them: the whole text loads with --profile)."""
    p = result.profile
    amb = result.ambition
    lines = [f"# {p.name}: derived by `train.py --fit` for {card}",
             f"# {result.reason}",
             f"# objective: {p.num_generations} generations x {p.generation_batch // p.num_generations} prompt(s) "
             f"x {p.max_completion_length} tokens = {objective(p)} completion tokens per step"
             + (f" over {p.num_gpus} training GPUs" if p.num_gpus > 1 else "") + " "
             f"(ambition {amb.objective})",
             f"# ambition: {amb.text()}"]
    if result.given_up:
        lines.append("# given up against the ambition (each saving counted after the ones above it):")
        width = max(len(g.lever) for g in result.given_up)
        for g in result.given_up:
            lines.append(f"#   {g.lever.replace('_', ' '):<{width}}  {g.before:>9} -> {g.after:<9} "
                         f"saves {g.saves_gib:6.2f} GiB")
    else:
        lines.append("# nothing given up: the full ambition fits")
    lines.append(f"# the full ambition needs {result.ambition_need_gib:.2f} GiB: a card of "
                 f"{result.card_for_ambition_gib:.1f} GiB or more")
    return "\n".join(lines) + "\n" + p.to_yaml()


def fit_json(result: Fit, card: str) -> dict:
    p = result.profile
    return {"card": card, "usable_gib": round(result.usable_gib, 3),
            "profile": p.to_dict() if p is not None else None,
            "settings": settings_of(p) if p is not None else None,
            "need_gib": None if result.need_gib is None else round(result.need_gib, 3),
            "objective": objective(p) if p is not None else None,
            "ambition": {"source": result.ambition.source, "objective": result.ambition.objective,
                         "text": result.ambition.text(), "need_gib": round(result.ambition_need_gib, 3),
                         "card_gib": round(result.card_for_ambition_gib, 1)},
            "given_up": [g.to_json() for g in result.given_up], "reason": result.reason}


def print_fit(rungs, model: str, machine, *, pinned=(), measurements=None, as_json: bool = False) -> int:
    """Solve for `model` on the machine's card from every rung's intent and print the most ambitious answer."""
    gpu = machine.primary
    if gpu is None:
        raise UsageError("--fit needs a card to fit: none was found (fix: add --gpu-memory GIB)")
    results = best_fit(rungs, model, gpu, pinned=pinned, machine=machine, measurements=measurements)
    if not results:
        raise UsageError("--fit: no single-GPU cuda profile in the ladder to take an ambition from "
                         "(fix: --profiles-dir with gpu-*.yaml)")
    best = results[0]
    if best.profile is not None and len(machine.gpus) > 1:  # --gpus N: data parallel and the vLLM server too
        rung = next(r for r in rungs if r.name == best.ambition.source)
        spread = fit_gpus(rung, model, machine, pinned=pinned, measurements=measurements)
        if spread is not None and quality_key(spread.profile) > quality_key(best.profile):
            best = spread
    card = f"{gpu.name} ({gpu.total_gib:g} GiB)" if len(machine.gpus) == 1 else \
        f"{len(machine.gpus)} x {gpu.name} ({gpu.total_gib:g} GiB each)"
    if as_json:
        print(json.dumps(fit_json(best, card), indent=2))
    elif best.profile is not None:
        sys.stdout.write(fit_text(best, card))
    else:
        print(f"{model} on {card}: {best.reason}", file=sys.stderr)
        print(f"the full ambition ({best.ambition.text()}) needs {best.ambition_need_gib:.2f} GiB: a card of "
              f"{best.card_for_ambition_gib:.1f} GiB or more", file=sys.stderr)
    return EXIT_OK if best.profile is not None else EXIT_OUT_OF_MEMORY
