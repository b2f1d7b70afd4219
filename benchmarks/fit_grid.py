"""What `plan --set model=M --gpu-memory G --gpu-name N` chooses for every catalogue model on eight cards, before and
after planning the run (issue 40), by the estimator and the step-time model alone (no ledger).

    python benchmarks/fit_grid.py [--out benchmarks/fit_grid.md] [--json FILE]

Before: the choices of commit 0d192c7 (learning counted as prompts per hour, more prompts per step while they
add 3% an hour, every run 250 steps), kept in benchmarks/fit_grid_before.json with the step time that commit
predicted; their hours are 250 of those steps. After: today's plan, its run the default length (one epoch of
the training split within launcher.plan.duration.DEFAULT_HOURS). For each pair: the shape (generations x prompts
per step x completion cap, LoRA rank, weights), its use of usable memory, the predicted steps, hours and
epochs, and the objective: learning per hour = updates per hour x P / (P + B) (launcher/plan/value.py, B the
GPU estimate), the before choices' counted at the step time they were planned with. The summary checks the
promises: no default plan past DEFAULT_HOURS, no choice above 0.92 of usable memory without a ledger
measurement, no completion cap above what the task needs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from launcher.card.detect import detect_machine  # noqa: E402
from launcher.memory.estimate import estimate  # noqa: E402
from launcher.plan.choose import make_plan  # noqa: E402
from launcher.plan.completion_lengths import completion_plan  # noqa: E402
from launcher.plan.duration import DEFAULT_HOURS  # noqa: E402
from launcher.plan.levers import objective  # noqa: E402
from launcher.plan.margins import ESTIMATE_MAX_USE  # noqa: E402
from launcher.plan.request import PlanRequest  # noqa: E402
from launcher.plan.speed import predict  # noqa: E402
from launcher.plan.value import critical_batch, learning_per_hour  # noqa: E402
from profiles.catalog import CATALOGUE, resolve  # noqa: E402
from profiles.load import load_profiles  # noqa: E402
from profiles.schema import profile_from_dict  # noqa: E402

BEFORE = REPO / "benchmarks" / "fit_grid_before.json"
BEFORE_COMMIT = "0d192c7"
# (GiB, the card's NVML name): the sizes of the earlier grid, each named after a common card of that size
CARDS = (
    (8.0, "NVIDIA GeForce RTX 4060"),
    (12.0, "NVIDIA GeForce RTX 3060"),
    (15.0, "Tesla T4"),
    (16.0, "NVIDIA GeForce RTX 4060 Ti"),
    (22.5, "NVIDIA L4"),
    (24.0, "NVIDIA GeForce RTX 4090"),
    (40.0, "A100 40GB"),
    (80.0, "A100 80GB"),
)
SMALL_MODEL_PARAMS = 3.5e9  # "models up to 3B"
LOW_USE = 0.6


def _shape(p) -> str:
    bits = "4b" if p.load_in_4bit else "16b"
    return (
        f"{p.num_generations}x{p.effective_batch // p.num_generations}x{p.max_completion_length} r{p.lora_rank} "
        f"{bits}" + ("" if p.fast_inference else " hf")
    )


def before_row(row: dict, machine) -> dict | None:
    """The 0d192c7 choice of one pair: its shape, prompts, the step time it was planned with, its 250-step run,
    and the objective counted at that step time."""
    chosen = row.get("chosen")
    if chosen is None:
        return None
    steps = chosen.get("max_steps") or 250
    updates = 3600.0 / chosen["step_s"]
    p = profile_from_dict(dict(chosen["settings"]), "<before>")
    arch = resolve(p.model)
    now = predict(p, arch, machine.primary, estimate(p, arch, machine.primary))
    return {
        "objective_now": objective(p, now),  # the same choice, at today's step-time model
        "step_s_now": now.step_s,
        "shape": chosen["shape"],
        "use": chosen["use"],
        "need_gib": chosen["need_gib"],
        "prompts": chosen["prompts"],
        "prompts_per_hour": chosen["prompts_per_hour"],
        "step_s": chosen["step_s"],
        "steps": steps,
        "hours": steps * chosen["step_s"] / 3600.0,
        "objective": learning_per_hour(updates, chosen["prompts"], critical_batch("cuda").prompts),
        "limited_by": chosen.get("limited_by"),
    }


def after_row(model: str, machine, profiles_dir: Path) -> dict:
    rungs = load_profiles(profiles_dir, [f"model={model}"], device="cuda")
    started = time.process_time()  # CPU time: what the plan costs, whatever else the machine runs
    plan = make_plan(PlanRequest(rungs, machine, model=model))
    notes = plan.notes
    seconds = time.process_time() - started
    chosen = next((c for c in plan.candidates if c.fits), None)
    usable = machine.primary.free_gib - plan.margin_gib
    if chosen is None:
        return {
            "plan_seconds": seconds,
            "why": next(
                (n for n in notes if "nothing fits" in n), plan.candidates[0].reason if plan.candidates else "no rung"
            ),
        }
    p = chosen.profile
    need = chosen.measured.need_gib if chosen.measured is not None else chosen.estimate.total_gib
    arch = resolve(model)
    task = completion_plan(p.model_copy(update={"expected_completion_length": 0}), arch)
    run = chosen.run
    return {
        "steps": run.steps,
        "hours": run.hours,
        "epochs": run.epochs,
        "objective": objective(p, chosen.speed),
        "plan_seconds": seconds,
        "profile": p.name,
        "shape": _shape(p),
        "need_gib": need,
        "use": need / usable,
        "prompts": p.effective_batch // p.num_generations,
        "prompts_per_hour": chosen.speed.prompts_per_hour,
        "step_s": chosen.speed.step_s,
        "limited_by": chosen.limited_by,
        "bound_by": chosen.speed.limited_by,
        "cap": p.max_completion_length,
        "task_cap": task.cap,
        "lora_rank": p.lora_rank,
        "four_bit": p.load_in_4bit,
        "measured": chosen.measured is not None,
        "notes": [n for n in notes if "given up" in n],
    }


def table(rows: list[dict], key: str) -> list[str]:
    models = list(dict.fromkeys(r["model"] for r in rows))
    cards = list(dict.fromkeys((r["card_gib"], r["card"]) for r in rows))
    lines = [
        "| model | "
        + " | ".join(f"{g:g} GiB {name.replace('NVIDIA ', '').replace('GeForce ', '')}" for g, name in cards)
        + " |",
        "|---|" + "---|" * len(cards),
    ]
    cell = {(r["model"], r["card_gib"]): r[key] for r in rows}
    for model in models:
        cells = []
        for g, _ in cards:
            c = cell[(model, g)]
            if c is None or "shape" not in c:
                cells.append("nothing fits")
            else:
                cells.append(
                    f"{c['shape']} {c['use']:.2f}; {c['steps']} steps {c['hours']:.1f} h; {c['objective']:.1f}/h"
                )
        lines.append(f"| {model.split('/')[-1]} | " + " | ".join(cells) + " |")
    return lines


def summary(rows: list[dict]) -> list[str]:
    before = [r["before"] for r in rows if r["before"] is not None]
    after = [r["after"] for r in rows if "shape" in r["after"]]
    gain = [
        r["after"]["objective"] / r["before"]["objective_now"]
        for r in rows
        if r["before"] is not None and "shape" in r["after"] and r["before"]["objective_now"] > 0
    ]
    unmeasured = [r["after"]["use"] for r in rows if "shape" in r["after"] and not r["after"]["measured"]]
    over_cap = [r for r in rows if "shape" in r["after"] and r["after"]["cap"] > r["after"]["task_cap"]]
    epochs = [a["epochs"] for a in after if a["epochs"] is not None]
    lines = [
        f"| | before ({BEFORE_COMMIT}) | after |",
        "|---|---|---|",
        f"| pairs where nothing fits | {sum(1 for r in rows if r['before'] is None)} | {len(rows) - len(after)} |",
        f"| predicted hours of a run: median, most | {statistics.median(b['hours'] for b in before):.1f}, "
        f"{max(b['hours'] for b in before):.1f} | {statistics.median(a['hours'] for a in after):.1f}, "
        f"{max(a['hours'] for a in after):.1f} (default at most {DEFAULT_HOURS:g} h) |",
        f"| runs predicted past 8 h / past 24 h | {sum(1 for b in before if b['hours'] > 8)} / "
        f"{sum(1 for b in before if b['hours'] > 24)} | {sum(1 for a in after if a['hours'] > 8)} / "
        f"{sum(1 for a in after if a['hours'] > 24)} |",
        f"| steps of a run: median (least, most) | {statistics.median(b['steps'] for b in before):g} "
        f"({min(b['steps'] for b in before)}, {max(b['steps'] for b in before)}) | "
        f"{statistics.median(a['steps'] for a in after):g} ({min(a['steps'] for a in after)}, "
        f"{max(a['steps'] for a in after)}) |",
        f"| epochs of GSM8K a run covers: median (least, most) | "
        f"{statistics.median(b['steps'] * b['prompts'] / 7473 for b in before):.2f} | "
        f"{statistics.median(epochs):.2f} ({min(epochs):.2f}, {max(epochs):.2f}) |",
        f"| prompts per step: median (least, most) | {statistics.median(b['prompts'] for b in before):g} "
        f"({min(b['prompts'] for b in before)}, {max(b['prompts'] for b in before)}) | "
        f"{statistics.median(a['prompts'] for a in after):g} ({min(a['prompts'] for a in after)}, "
        f"{max(a['prompts'] for a in after)}) |",
        f"| median predicted prompts per hour | {statistics.median(b['prompts_per_hour'] for b in before):.0f} | "
        f"{statistics.median(a['prompts_per_hour'] for a in after):.0f} |",
        f"| median objective (learning per hour, {critical_batch().text()}) | "
        f"{statistics.median(b['objective'] for b in before):.1f} | {statistics.median(a['objective'] for a in after):.1f} |",
        f"| the same before choices at today's step-time model: median objective | "
        f"{statistics.median(b['objective_now'] for b in before):.1f} | - |",
        f"| objective after / before, per pair, both at today's model (median, least, most) | - | "
        f"{statistics.median(gain):.2f}x, {min(gain):.2f}x, {max(gain):.2f}x |",
        f"| most use of usable memory (no ledger measurement) | {max(b['use'] for b in before):.2f} | "
        f"{max(unmeasured):.2f} (limit {ESTIMATE_MAX_USE}) |",
        f"| choices with a cap above what the task needs | - | {len(over_cap)} |",
        f"| slowest plan (derive + judge, one pair, CPU time) | - | "
        f"{max(r['after']['plan_seconds'] for r in rows):.3f} s |",
    ]
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "fit_grid.md"))
    parser.add_argument("--json", help="also write the rows as JSON here")
    parser.add_argument("--profiles-dir", default=str(REPO / "profiles"))
    args = parser.parse_args()

    before = {(r["model"], r["card_gib"]): r for r in json.loads(BEFORE.read_text(encoding="utf-8"))["rows"]}
    rows = []
    for arch in CATALOGUE:
        for gib, name in CARDS:
            machine = detect_machine(what_if_gib=gib, what_if_name=name)
            rows.append(
                {
                    "model": arch.name,
                    "card_gib": gib,
                    "card": machine.primary.name,
                    "before": before_row(before[(arch.name, gib)], machine),
                    "after": after_row(arch.name, machine, Path(args.profiles_dir)),
                }
            )
    low = [r for r in rows if "shape" in r["after"] and r["after"]["use"] < LOW_USE]
    lines = [
        "# Fit grid: what the plan chooses for each model and card, before and after planning the run",
        "",
        "Written by `python benchmarks/fit_grid.py` (estimate and step-time model only, no ledger). Cells: "
        "generations x prompts per step x completion cap, LoRA rank, weights (`hf`: transformers generates, "
        "vLLM off), use of usable memory (need / (card - margin)); the run's steps and predicted hours; the "
        "objective, learning per hour. Before: the plan of commit 0d192c7 (prompts per hour, +3% rule, 250 "
        "steps; benchmarks/fit_grid_before.json), at the step time it predicted. After: today's plan and its "
        "default run. Each card size is named after a common card of that size (the step-time model needs "
        "the card's speed).",
        "",
    ]
    lines += summary(rows)
    lines += ["", f"## Pairs below {LOW_USE} of usable memory after, and why", ""]
    lines += [
        f"- {r['model']} on {r['card']}: {r['after']['shape']}, use {r['after']['use']:.2f}, prompts per step "
        f"limited by {r['after']['limited_by']} (step bound by {r['after']['bound_by']})"
        for r in low
    ] or ["- none"]
    lines += ["", "## Pairs where nothing fits after", ""]
    lines += [f"- {r['model']} on {r['card']}: {r['after']['why']}" for r in rows if "shape" not in r["after"]] or [
        "- none"
    ]
    lines += ["", f"## Before ({BEFORE_COMMIT})", ""] + table(rows, "before")
    lines += ["", "## After", ""] + table(rows, "after")
    lines += [
        "",
        "## After: what stopped the prompts per step",
        "",
        "| model | " + " | ".join(f"{g:g} GiB" for g, _ in CARDS) + " |",
        "|---|" + "---|" * len(CARDS),
    ]
    for arch in CATALOGUE:
        cells = []
        for gib, _ in CARDS:
            after = next(r["after"] for r in rows if r["model"] == arch.name and r["card_gib"] == gib)
            cells.append(f"{after['limited_by']}, {after['step_s']:.0f} s" if "shape" in after else "-")
        lines.append(f"| {arch.name.split('/')[-1]} | " + " | ".join(cells) + " |")
    Path(args.out).write_text("\n".join(lines) + "\n", encoding="utf-8")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1), encoding="utf-8")
    print("\n".join(lines[:18]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
