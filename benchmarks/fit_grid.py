"""What `plan --set model=M --gpu-memory G --gpu-name N` chooses for every catalogue model on eight cards, before
and after the planner for learning per hour, by the estimator and the step-time model alone (no ledger).

    python benchmarks/fit_grid.py [--out benchmarks/fit_grid.md] [--json FILE]

Before: the choices of the fit solver at commit 3a0a67b (most completion tokens per step), kept in
benchmarks/fit_grid_before.json (written by that commit's benchmarks/fit_grid.py); their prompts per hour are
predicted here with today's step-time model, on the same cards. After: today's plan. For each pair: the shape
(generations x prompts per step x completion cap, LoRA rank, weights), its use of usable memory (need / (card -
margin)), the predicted prompts per hour, and what stopped its prompts per step. The summary checks the planner's
promises: no pair below 0.6 of usable memory unless throughput has saturated, more than one prompt per step for
models up to 3B on 40 and 80 GB cards, no choice above 0.92 of usable memory without a ledger measurement, no
completion cap above what the task needs kept by giving up LoRA rank or 16-bit.
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
from launcher.plan.derive import derive_ladder  # noqa: E402
from launcher.plan.lengths import completion_plan  # noqa: E402
from launcher.plan.margins import ESTIMATE_MAX_USE  # noqa: E402
from launcher.plan.speed import predict  # noqa: E402
from profiles.catalog import CATALOGUE, resolve  # noqa: E402
from profiles.load import load_profiles  # noqa: E402
from profiles.schema import profile_from_dict  # noqa: E402

BEFORE = REPO / "benchmarks" / "fit_grid_before.json"
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
    """The 3a0a67b choice of one pair with its prompts per hour predicted by today's model."""
    chosen = row.get("chosen")
    if chosen is None:
        return None
    settings = dict(chosen["settings"])
    p = profile_from_dict(settings, "<before>")
    arch = resolve(p.model)
    est = estimate(p, arch, machine.primary)
    time_ = predict(p, arch, machine.primary, est)
    return {
        "shape": chosen["shape"],
        "use": chosen["use"],
        "need_gib": chosen["need_gib"],
        "prompts": p.effective_batch // p.num_generations,
        "prompts_per_hour": time_.prompts_per_hour,
        "step_s": time_.step_s,
        "at_ambition": chosen["at_ambition"],
    }


def after_row(model: str, machine, profiles_dir: Path) -> dict:
    rungs = load_profiles(profiles_dir, [f"model={model}"], device="cuda")
    started = time.process_time()  # CPU time: what the plan costs, whatever else the machine runs
    limits: dict = {}
    ladder, notes = derive_ladder(rungs, model, machine, limits=limits)
    plan = make_plan(ladder, machine, limits=limits)
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
    return {
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
                cells.append(f"{c['shape']} {c['use']:.2f} {c['prompts_per_hour']:.0f}/h")
        lines.append(f"| {model.split('/')[-1]} | " + " | ".join(cells) + " |")
    return lines


def summary(rows: list[dict]) -> list[str]:
    before = [r["before"] for r in rows if r["before"] is not None]
    after = [r["after"] for r in rows if "shape" in r["after"]]
    gain = [
        r["after"]["prompts_per_hour"] / r["before"]["prompts_per_hour"]
        for r in rows
        if r["before"] is not None and "shape" in r["after"] and r["before"]["prompts_per_hour"] > 0
    ]
    low = [r for r in rows if "shape" in r["after"] and r["after"]["use"] < LOW_USE]
    low_unsaturated = [r for r in low if r["after"]["limited_by"] not in ("throughput", "cap")]
    small_big = [r for r in rows if r["card_gib"] >= 40 and resolve(r["model"]).computed_params <= SMALL_MODEL_PARAMS]
    small_one = [r for r in small_big if "shape" not in r["after"] or r["after"]["prompts"] <= 1]
    unmeasured = [r["after"]["use"] for r in rows if "shape" in r["after"] and not r["after"]["measured"]]
    over_cap = [r for r in rows if "shape" in r["after"] and r["after"]["cap"] > r["after"]["task_cap"]]
    lines = [
        "| | before (3a0a67b) | after |",
        "|---|---|---|",
        f"| pairs where nothing fits | {sum(1 for r in rows if r['before'] is None)} | {len(rows) - len(after)} |",
        f"| median use of usable memory | {statistics.median(b['use'] for b in before):.2f} | "
        f"{statistics.median(a['use'] for a in after):.2f} |",
        f"| most use of usable memory (no ledger measurement) | {max(b['use'] for b in before):.2f} | "
        f"{max(unmeasured):.2f} (limit {ESTIMATE_MAX_USE}) |",
        f"| pairs below {LOW_USE} of usable memory | {sum(1 for b in before if b['use'] < LOW_USE)} | {len(low)} "
        f"({len(low_unsaturated)} not stated as saturated) |",
        f"| median prompts per step | {statistics.median(b['prompts'] for b in before):g} | "
        f"{statistics.median(a['prompts'] for a in after):g} |",
        f"| models up to 3B on 40/80 GB with one prompt per step | "
        f"{sum(1 for r in small_big if r['before'] is None or r['before']['prompts'] <= 1)} of {len(small_big)} | "
        f"{len(small_one)} of {len(small_big)} |",
        f"| median predicted prompts per hour (same model) | "
        f"{statistics.median(b['prompts_per_hour'] for b in before):.0f} | "
        f"{statistics.median(a['prompts_per_hour'] for a in after):.0f} |",
        f"| prompts per hour after / before, per pair (median, least) | - | {statistics.median(gain):.2f}x, "
        f"{min(gain):.2f}x |",
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
        "# Fit grid: what the plan chooses for each model and card, before and after planning for learning per hour",
        "",
        "Written by `python benchmarks/fit_grid.py` (estimate and step-time model only, no ledger). Cells: "
        "generations x prompts per step x completion cap, LoRA rank, weights (`hf`: transformers generates, "
        "vLLM off), use of usable memory (need / (card - margin)), predicted prompts per hour. Before: the fit "
        "solver of commit 3a0a67b (most completion tokens per step; benchmarks/fit_grid_before.json), its "
        "prompts per hour predicted with today's model on the same card. The 8-24 GiB sizes of the earlier grid "
        "are named after a common card of that size (the step-time model needs the card's speed).",
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
    lines += ["", "## Before (3a0a67b)", ""] + table(rows, "before")
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
