"""The update floor over the catalogue: `plan --set model=M` for every catalogue model on seven cards (the
estimator and the step-time model alone, no ledger), and whether each plan whose run has fewer optimizer steps
than its min_updates says so with what would reach them (launcher/plan/stages/updates.py).

    python benchmarks/update_floor.py [--out benchmarks/update_floor.md]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from commands import main  # noqa: E402
from profiles.catalog import CATALOGUE  # noqa: E402

CARDS = (
    ("Tesla T4", 15.0),
    ("NVIDIA A10", 22.5),
    ("NVIDIA L4", 22.5),
    ("NVIDIA GeForce RTX 4090", 24.0),
    ("NVIDIA A100-SXM4-40GB", 40.0),
    ("NVIDIA A100-SXM4-80GB", 80.0),
    ("NVIDIA H100 80GB HBM3", 79.6),
)


def plan_of(model: str, card: str, gib: float) -> dict:
    out = io.StringIO()
    argv = [
        "plan",
        "--json",
        "--ignore-ledger",
        "--set",
        f"model={model}",
        "--gpu-memory",
        f"{gib:g}",
        "--gpu-name",
        card,
    ]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        main(argv)
    return json.loads(out.getvalue())


def rows() -> list[dict]:
    found = []
    for arch in CATALOGUE:
        for card, gib in CARDS:
            plan = plan_of(arch.name, card, gib)
            chosen = next((c for c in plan["candidates"] if c["profile"] == plan["chosen"]), None)
            note = next((n for n in plan["notes"] if "(min_updates)" in n), None)
            found.append(
                {
                    "model": arch.name,
                    "card": card,
                    "steps": chosen["run"]["steps"] if chosen else None,
                    "floor": chosen["settings"].get("min_updates", 100) if chosen else None,
                    "note": note,
                }
            )
    return found


def markdown(found: list[dict]) -> str:
    planned = [r for r in found if r["steps"] is not None]
    under = sorted((r for r in planned if r["steps"] < 100), key=lambda r: r["steps"])
    lines = [
        "# The update floor over the catalogue",
        "",
        f"`plan --set model=M` for {len({r['model'] for r in found})} catalogue models on {len(CARDS)} cards "
        f"({len(found)} pairs, {len(planned)} planned): the run's optimizer steps, median "
        f"{statistics.median(r['steps'] for r in planned):g}, fewest {min(r['steps'] for r in planned)}. "
        f"{len(under)} plans are under the floor of 100 (min_updates); {sum(r['note'] is not None for r in under)} "
        "of them say so with what would reach it. Regenerate: `python benchmarks/update_floor.py`.",
        "",
        "| model | card | steps | what the plan says |",
        "| --- | --- | ---: | --- |",
    ]
    for r in under:
        said = (r["note"] or "nothing").split("(min_updates); ", 1)[-1]
        lines.append(f"| {r['model']} | {r['card']} | {r['steps']} | {said} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "update_floor.md")
    args = parser.parse_args()
    text = markdown(rows())
    args.out.write_text(text)
    print(text)
