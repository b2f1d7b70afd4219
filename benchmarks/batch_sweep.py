#!/usr/bin/env python3
"""The critical batch measured on the CPU default: held-out accuracy gained per wall-minute of training at 1 to 32
prompts per step, the same wall time each, over three seeds; B fitted to it.

    python benchmarks/batch_sweep.py [--prompts 1,2,4,8,16,32] [--seeds 3407,2,3] [--hours 0.05]
                                     [--held-out 200] [--out benchmarks/batch_sweep.md]

Each run is the product's own path: `train.py train --profile profiles/cpu-tiny-8gen.yaml` with prompts per
step P (batch P x 8 generations, one micro-batch), a constant learning rate (no warm-up: the same rate at every
P), as many steps as the budget `--hours` allows (train --hours stops it with the adapter and the report), and
the held-out problems scored greedily before and after. The figure per run: accuracy after less before, over
the minutes training took. B is fitted to learning per minute = updates per minute x P / (P + B), the planner's
objective (launcher/plan/value.py), with each run's own measured updates per minute: the B (and one scale)
whose prediction is nearest the measured gains, least squares over every run. The tiny models of the seeds are
built (warm-started) first, outside the measured runs. One torch thread (OMP_NUM_THREADS=1): the machine's other
work slows every run alike.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROFILE = REPO / "profiles" / "cpu-tiny-8gen.yaml"
GENERATIONS = 8


def default_prompts() -> int:
    """The prompts per step the CPU default runs, read from its profile."""
    sys.path.insert(0, str(REPO))
    from profiles.load import load_profile

    profile = load_profile(PROFILE)
    return profile.effective_batch // profile.num_generations


def run(prompts: int, seed: int, hours: float, held_out: int, out: Path, extra: tuple[str, ...] = ()) -> dict:
    """One budgeted run; its summary's figures. `extra`: more --set KEY=VALUE for the run."""
    sets = [
        *extra,
        f"seed={seed}",
        f"per_device_train_batch_size={prompts * GENERATIONS}",
        "gradient_accumulation_steps=1",
        "max_steps=100000",
        "save_steps=100000",
        "warmup_ratio=0.0",
        f"eval_samples={held_out}",
        "eval_steps=0",
    ]
    command = [sys.executable, str(REPO / "train.py"), "train", "--profile", str(PROFILE), "--output-dir", str(out)]
    command += ["--hours", f"{hours:g}"]
    for item in sets:
        command += ["--set", item]
    started = time.time()
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(
            f"P={prompts} seed={seed}: exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        )
    summary = json.loads(next(out.glob("run-*/attempt-*/summary.json")).read_text(encoding="utf-8"))
    records = [json.loads(line) for line in next(out.glob("run-*/attempts.jsonl")).read_text().splitlines()]
    minutes = summary["train_seconds"] / 60.0
    before, after = summary["accuracy"]["before"], summary["accuracy"]["after"]
    return {
        "prompts": prompts,
        "seed": seed,
        "steps": summary["steps"],
        "train_minutes": round(minutes, 3),
        "wall_seconds": round(time.time() - started, 1),
        "step_s": (summary.get("speed") or {}).get("step_s"),
        "before": before,
        "after": after,
        "gain": round(after - before, 4),
        "gain_per_minute": round((after - before) / minutes, 5) if minutes > 0 else None,
        "updates_per_minute": round(summary["steps"] / minutes, 3) if minutes > 0 else None,
        "stopped_by": records[-1].get("stopped_by"),
    }


def fit_critical_batch(rows: list[dict]) -> tuple[float, float, float]:
    """(B, scale, residual sum of squares): gain per minute ~ scale x updates per minute x P / (P + B), least
    squares over the runs, B on a log grid from 1/4 to 1024 prompts."""
    best = None
    for i in range(0, 161):
        b = 0.25 * 2 ** (i / 16)
        xs = [r["updates_per_minute"] * r["prompts"] / (r["prompts"] + b) for r in rows]
        ys = [r["gain_per_minute"] for r in rows]
        denom = sum(x * x for x in xs)
        scale = sum(x * y for x, y in zip(xs, ys)) / denom if denom else 0.0
        sse = sum((y - scale * x) ** 2 for x, y in zip(xs, ys))
        if best is None or sse < best[2]:
            best = (b, scale, sse)
    return best


def table(rows: list[dict], prompts: list[int], b: float, scale: float) -> list[str]:
    lines = [
        "| prompts per step | steps (mean) | s per step | updates per min | gain, points (mean +/- sd) | "
        "gain per minute (mean +/- sd) | fitted | per seed |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for p in prompts:
        mine = [r for r in rows if r["prompts"] == p]
        gains = [100 * r["gain"] for r in mine]
        per_min = [100 * r["gain_per_minute"] for r in mine]
        updates = statistics.mean(r["updates_per_minute"] for r in mine)
        fitted = 100 * scale * updates * p / (p + b)
        lines.append(
            f"| {p} | {statistics.mean(r['steps'] for r in mine):.0f} | {60 / updates:.2f} | {updates:.1f} | "
            f"{statistics.mean(gains):+.1f} +/- {statistics.pstdev(gains):.1f} | "
            f"{statistics.mean(per_min):+.2f} +/- {statistics.pstdev(per_min):.2f} | {fitted:+.2f} | "
            + ", ".join(f"{r['seed']}: {100 * r['gain']:+.1f}" for r in mine)
            + " |"
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", default="1,2,4,8,16,32")
    parser.add_argument("--seeds", default="3407,2,3")
    parser.add_argument("--hours", type=float, default=0.05, help="each run's budget (load and evaluation included)")
    parser.add_argument("--held-out", type=int, default=200)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "batch_sweep.md"))
    parser.add_argument("--results", default="", help="an earlier run's JSON: fit and write the table only")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    prompts = [int(p) for p in args.prompts.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    rows: list[dict] = []
    if args.results:
        rows = json.loads(Path(args.results).read_text(encoding="utf-8"))["runs"]
    else:
        with tempfile.TemporaryDirectory(prefix="batch-sweep-") as tmp:
            for seed in seeds:  # build (warm-start) each seed's tiny model outside the measured runs
                warm = Path(tmp) / f"warm-{seed}"
                subprocess.run(
                    [sys.executable, str(REPO / "train.py"), "train", "--profile", str(PROFILE), "--output-dir",
                     str(warm), "--set", f"seed={seed}", "--set", "max_steps=1", "--set", "eval_samples=0"],
                    cwd=REPO, capture_output=True, check=True,
                )  # fmt: skip
            for seed in seeds:
                for p in prompts:
                    result = run(p, seed, args.hours, args.held_out, Path(tmp) / f"p{p}-s{seed}")
                    rows.append(result)
                    print(json.dumps(result), flush=True)
    b, scale, sse = fit_critical_batch(rows)
    means = {p: statistics.mean(r["gain_per_minute"] for r in rows if r["prompts"] == p) for p in prompts}
    best = max(means, key=means.get)
    updates = {p: statistics.mean(r["updates_per_minute"] for r in rows if r["prompts"] == p) for p in prompts}
    planned = max(prompts, key=lambda p: updates[p] * p / (p + b))  # the objective with the fitted B
    profile_prompts = default_prompts()
    spread = {p: statistics.pstdev(r["gain_per_minute"] for r in rows if r["prompts"] == p) for p in prompts}
    close = [p for p in prompts if means[p] >= means[best] - spread[best]]
    lines = [
        "# The critical batch on the CPU default",
        "",
        "Written by `python benchmarks/batch_sweep.py` (the method is in its docstring): "
        f"{len(seeds)} seeds x {len(prompts)} prompts-per-step settings, each run budgeted `--hours {args.hours:g}` "
        f"(about {statistics.mean(r['train_minutes'] for r in rows):.1f} min of training), accuracy on "
        f"{args.held_out} held-out problems (greedy) before and after, constant learning rate 5e-4.",
        "",
        *table(rows, prompts, b, scale),
        "",
        f"Fitted: **B = {b:.1f} prompts** (learning per minute ~ updates per minute x P / (P + B); "
        f"residual {math.sqrt(sse / len(rows)) * 100:.2f} points a minute, root mean square).",
        "",
        f"- best measured: P = {best} ({100 * means[best]:+.2f} points a minute, mean of the seeds)",
        f"- the objective with the fitted B chooses P = {planned} ({100 * means[planned]:+.2f}, "
        f"{means[planned] / means[best]:.2f} of the best)",
        f"- the CPU default ({PROFILE.relative_to(REPO)}) runs P = {profile_prompts} "
        f"({100 * means[profile_prompts]:+.2f}, {means[profile_prompts] / means[best]:.2f} of the best)"
        if profile_prompts in means
        else "",
        "",
        "Seeds differ more than settings (each seed warm-starts its own tiny model): the table's spread is "
        "between seeds; B is fitted to every run. "
        + (
            f"Every setting from P = {min(close)} to {max(close)} lies within one standard deviation of the best "
            "mean: the sweep cannot tell them apart, and B is known to within a wide range (a flat curve: the "
            "larger B, the nearer the objective is to prompts per minute)."
            if len(close) > 1
            else ""
        ),
    ]
    Path(args.out).write_text("\n".join(lines) + "\n", encoding="utf-8")
    Path(args.out).with_suffix(".json").write_text(
        json.dumps({"critical_batch": b, "scale": scale, "runs": rows}, indent=1) + "\n", encoding="utf-8"
    )
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
