"""What `--auto --set model=M --gpu-memory G` plans for every catalogue model on common cards, before the fit
solver (the shipped rungs with the model swapped in) and with it (configurations derived from the rungs'
intents), by the estimator alone (no ledger).

    python benchmarks/fit_grid.py [--out benchmarks/fit_grid.md] [--json FILE]

For each pair: the choice, the share of usable memory it needs (estimate / (card - margin)), whether it
reached its ambition, and for pairs where nothing fits, why. The summary counts "nothing fits" pairs and the
median use of usable memory (all pairs, and pairs whose choice is below its ambition).
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
from launcher.plan.choose import make_plan  # noqa: E402
from launcher.plan.derive import best_fit, derive_ladder  # noqa: E402
from launcher.plan.solve import objective  # noqa: E402
from profiles.catalog import CATALOGUE  # noqa: E402
from profiles.load import load_profiles  # noqa: E402

# (GiB, card name for its compute capability): 8, 12, T4, 16, L4/A10, 24, A100 40 GB, A100 80 GB
CARDS = ((8.0, None), (12.0, None), (15.0, "Tesla T4"), (16.0, None), (22.5, None), (24.0, None),
         (40.0, "A100 40GB"), (80.0, "A100 80GB"))


def _short(profile) -> str:
    bits = "4b" if profile.load_in_4bit else "16b"
    return (f"{profile.num_generations}x{profile.effective_batch // profile.num_generations}x"
            f"{profile.max_completion_length} r{profile.lora_rank} {bits}"
            + ("" if profile.fast_inference else " hf"))


def pair(model: str, gib: float, name: str | None, profiles_dir: Path) -> dict:
    """Before and after for one model on one card."""
    machine = detect_machine(what_if_gib=gib, what_if_name=name)
    rungs = load_profiles(profiles_dir, [f"model={model}"], device="cuda")
    row: dict = {"model": model, "card_gib": gib, "card": name or f"{gib:g} GiB card"}

    before = make_plan(rungs, machine)
    chosen = next((c for c in before.candidates if c.fits), None)
    usable = machine.primary.free_gib - before.margin_gib
    row["before"] = None if chosen is None else {
        "profile": chosen.profile.name, "shape": _short(chosen.profile), "need_gib": chosen.estimate.total_gib,
        "use": chosen.estimate.total_gib / usable, "objective": objective(chosen.profile)}

    started = time.process_time()  # CPU time: what the plan costs, whatever else the machine runs
    ladder, _ = derive_ladder(rungs, model, machine)
    after = make_plan(ladder, machine)
    row["plan_seconds"] = time.process_time() - started
    chosen = next((c for c in after.candidates if c.fits), None)
    fits = best_fit(rungs, model, machine.primary)
    top = fits[0] if fits else None
    if chosen is None:
        row["after"] = None
        row["why"] = top.reason if top is not None else "no rung"
    else:
        row["after"] = {"profile": chosen.profile.name, "shape": _short(chosen.profile),
                        "need_gib": chosen.estimate.total_gib, "use": chosen.estimate.total_gib / usable,
                        "objective": objective(chosen.profile), "vllm": chosen.profile.gpu_memory_utilization
                        if chosen.profile.fast_inference else None,
                        "at_ambition": bool(top is not None and top.at_ambition),
                        "ambition": top.ambition.text() if top is not None else None,
                        "card_for_ambition_gib": top.card_for_ambition_gib if top is not None else None,
                        "given_up": [g.text() for g in top.given_up] if top is not None else []}
    return row


def summary(rows: list[dict], key: str) -> dict:
    chosen = [r[key] for r in rows if r[key] is not None]
    out = {"nothing_fits": sum(1 for r in rows if r[key] is None),
           "median_use": statistics.median(c["use"] for c in chosen) if chosen else None}
    below = [c["use"] for c in chosen if c.get("at_ambition") is False]
    if key == "after":
        out["below_ambition"] = len(below)
        out["median_use_below_ambition"] = statistics.median(below) if below else None
        out["over_usable"] = sum(1 for c in chosen if c["use"] > 1 + 1e-9)
    return out


def table(rows: list[dict], key: str) -> list[str]:
    models = list(dict.fromkeys(r["model"] for r in rows))
    cards = list(dict.fromkeys(r["card_gib"] for r in rows))
    lines = ["| model | " + " | ".join(f"{g:g} GiB" + (" (T4)" if g == 15 else "") for g in cards) + " |",
             "|---|" + "---|" * len(cards)]
    cell = {(r["model"], r["card_gib"]): r[key] for r in rows}
    for model in models:
        cells = []
        for g in cards:
            c = cell[(model, g)]
            if c is None:
                cells.append("nothing fits")
            elif key == "before":
                cells.append(f"{c['profile'].removeprefix('gpu-')} {c['use']:.2f}")
            else:
                cells.append(f"{c['shape']} {c['use']:.2f}" + ("" if c["at_ambition"] else "*"))
        lines.append(f"| {model.split('/')[-1]} | " + " | ".join(cells) + " |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "fit_grid.md"))
    parser.add_argument("--json", help="also write the rows as JSON here")
    parser.add_argument("--profiles-dir", default=str(REPO / "profiles"))
    args = parser.parse_args()

    rows = [pair(arch.name, gib, name, Path(args.profiles_dir)) for arch in CATALOGUE for gib, name in CARDS]
    before, after = summary(rows, "before"), summary(rows, "after")
    unfit = [r for r in rows if r["after"] is None]
    lines = ["# Fit grid: what `--auto --set model=M --gpu-memory G` plans, before and after the fit solver", "",
             "Written by `python benchmarks/fit_grid.py` (estimator only, no ledger). Cells: before, the rung "
             "chosen and its use of usable memory (estimate / (card - margin)); after, generations x prompts x "
             "completion tokens, LoRA rank, weights (`hf`: transformers generates, vLLM off), and use; `*` marks "
             "a choice below its ambition (something of "
             "the experiment given up: generations, length, rank or 16-bit).", "",
             "| | before | after |", "|---|---|---|",
             f"| pairs where nothing fits | {before['nothing_fits']} | {after['nothing_fits']} |",
             f"| median use of usable memory (all chosen) | {before['median_use']:.2f} | {after['median_use']:.2f} |",
             f"| choices below their ambition | - | {after['below_ambition']} |",
             "| median use where below the ambition | - | "
             + (f"{after['median_use_below_ambition']:.2f}" if after["median_use_below_ambition"] else "-") + " |",
             f"| choices over usable memory | 0 | {after['over_usable']} |",
             f"| slowest plan (derive + judge, one pair, CPU time) | - | {max(r['plan_seconds'] for r in rows):.3f} s |", "",
             "## Pairs where nothing fits after", ""]
    lines += [f"- {r['model']} on {r['card']}: {r['why']}" for r in unfit] or ["- none"]
    lines += ["", "## Before: the shipped rungs with the model swapped in", ""] + table(rows, "before")
    lines += ["", "## After: derived by the fit solver", ""] + table(rows, "after") + [""]
    Path(args.out).write_text("\n".join(lines), encoding="utf-8")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1), encoding="utf-8")
    print("\n".join(lines[:14]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
