#!/usr/bin/env python3
"""One generation serving several updates, measured on the CPU default: held-out accuracy gained per wall-minute
of training with steps_per_generation at 1, 2 and 4 optimizer steps per generation, the same wall time each, over
three seeds (benchmarks/generation_reuse.md).

    python benchmarks/generation_reuse.py [--updates 1,2,4] [--seeds 3407,2,3] [--hours 0.05] [--held-out 200]

Each run is batch_sweep.py's (the product's own `train --profile profiles/cpu-tiny-8gen.yaml`, its 16 prompts x 8
generations a step, a constant learning rate, budgeted by `--hours`, the held-out problems scored greedily before
and after) with `--set steps_per_generation=U` (one micro-batch a step: U micro-batches are U optimizer steps).
The figures: updates per minute (a generation batch of U steps' prompts is generated at once, the later U - 1
updates on completions of an older policy), the gain and the gain per minute, and the gain per update against
one generation per update: what an update on older completions is worth, which the planner's objective uses.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from batch_sweep import default_prompts, run  # noqa: E402


def table(rows: list[dict], updates: list[int]) -> list[str]:
    base = [r for r in rows if r["updates_per_generation"] == updates[0]]
    per_update_base = statistics.mean(r["gain"] / r["steps"] for r in base if r["steps"])
    lines = [
        "| updates per generation | steps (mean) | s per step | updates per min | gain, points (mean +/- sd) | "
        "gain per minute (mean +/- sd) | gain per update / one generation each | per seed |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for u in updates:
        mine = [r for r in rows if r["updates_per_generation"] == u]
        gains = [100 * r["gain"] for r in mine]
        per_min = [100 * r["gain_per_minute"] for r in mine]
        per_update = statistics.mean(r["gain"] / r["steps"] for r in mine if r["steps"])
        updates_per_min = statistics.mean(r["updates_per_minute"] for r in mine)
        lines.append(
            f"| {u} | {statistics.mean(r['steps'] for r in mine):.0f} | {60 / updates_per_min:.2f} | "
            f"{updates_per_min:.1f} | {statistics.mean(gains):+.1f} +/- {statistics.pstdev(gains):.1f} | "
            f"{statistics.mean(per_min):+.2f} +/- {statistics.pstdev(per_min):.2f} | "
            f"{per_update / per_update_base:.2f} | "
            + ", ".join(f"{r['seed']}: {100 * r['gain']:+.1f}" for r in mine)
            + " |"
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--updates", default="1,2,4")
    parser.add_argument("--seeds", default="3407,2,3")
    parser.add_argument("--hours", type=float, default=0.05)
    parser.add_argument("--held-out", type=int, default=200)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "generation_reuse.md"))
    parser.add_argument("--results", default="", help="an earlier run's JSON: write the table only")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    updates = [int(u) for u in args.updates.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    prompts = default_prompts()
    if args.results:
        rows = json.loads(Path(args.results).read_text(encoding="utf-8"))["runs"]
    else:
        rows = []
        for seed in seeds:  # seed by seed, every setting in turn: the machine's load falls on each alike
            for u in updates:
                with tempfile.TemporaryDirectory() as folder:
                    row = run(prompts, seed, args.hours, args.held_out, Path(folder), (f"steps_per_generation={u}",))
                row["updates_per_generation"] = u
                rows.append(row)
                print(json.dumps(row), flush=True)
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps({"runs": rows}, indent=1) + "\n", encoding="utf-8")
    text = [
        "# One generation, several updates: steps_per_generation on the CPU default",
        "",
        f"Written by `python benchmarks/generation_reuse.py` (the method is in its docstring): {len(seeds)} seeds x "
        f"{len(updates)} settings, {prompts} prompts x 8 generations a step, each run budgeted `--hours "
        f"{args.hours:g}`, accuracy on {args.held_out} held-out problems (greedy) before and after.",
        "",
        *table(rows, updates),
        "",
    ]
    out.write_text("\n".join(text), encoding="utf-8")
    print("\n".join(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
