#!/usr/bin/env python3
"""The plan's stated run time against the measured wall time on the CPU (benchmarks/cpu_run_time.md).

    python benchmarks/cpu_run_time.py [--cases NAME,...] [--markdown FILE] [--json FILE]
    python benchmarks/cpu_run_time.py --constants-from RUNS.json (the constants fitted to the fit cases of RUNS.json)
    python benchmarks/cpu_run_time.py --restate RUNS.json [--markdown FILE] (RUNS.json stated again, not run)

Each case is the product's own command, `python train.py train --profile P --set ...`, timed from its start to
its exit, beside what `python train.py plan --json` with the same arguments stated for it just before (the chosen
candidate's run: its total hours, its steps and the parts beside them). The cases share one fresh ledger: the
first case's length probe leaves the tiny model's answer lengths there, as any run on a machine does, and every
case has a shape of its own, so each stated step time is the CPU step-time model's (launcher/plan/cpu_speed.py),
never a measurement of an earlier case.

The `fit` cases are those the CPU's constants (launcher/plan/cpu_speed.py, launcher/plan/run_time.py) were fitted
to: their steps, evaluations and start; the `check` cases, the shipped CPU profiles and shapes apart from the
fit's, are the check. The error is stated / measured, over the whole run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EIGHT = "profiles/cpu-tiny-8gen.yaml"
FOUR = "profiles/cpu-tiny-4gen.yaml"
# (name, role, profile, --set values)
CASES = (
    ("fit-32x1", "fit", EIGHT, ("per_device_train_batch_size=32", "max_steps=40", "eval_samples=100")),
    ("fit-256x1", "fit", EIGHT, ("per_device_train_batch_size=256", "max_steps=20", "eval_samples=100")),
    ("fit-128x1-cap32", "fit", EIGHT, ("max_completion_length=32", "max_steps=30", "eval_samples=200")),
    ("fit-64x1-cap40", "fit", EIGHT, ("per_device_train_batch_size=64", "max_completion_length=40", "max_steps=40")),
    ("cpu-tiny-8gen", "check", EIGHT, ()),
    ("cpu-tiny-4gen", "check", FOUR, ()),
    ("8gen-64x1", "check", EIGHT, ("per_device_train_batch_size=64", "max_steps=80", "save_steps=40")),
    ("8gen-96x1-beta", "check", EIGHT, ("per_device_train_batch_size=96", "max_steps=50", "beta=0.04")),
)


def _args(profile: str, sets: tuple[str, ...]) -> list[str]:
    args = ["--profile", str(REPO / profile)]
    for item in sets:
        args += ["--set", item]
    return args


def stated(profile: str, sets: tuple[str, ...], env: dict) -> dict:
    """What `plan --json` states for the case: the chosen candidate's run and step."""
    done = subprocess.run(
        [sys.executable, str(REPO / "train.py"), "plan", *_args(profile, sets), "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    plan = json.loads(done.stdout)
    chosen = next(c for c in plan["candidates"] if c["profile"] == plan["chosen"])
    return {"run": chosen["run"], "step_s": chosen["speed"]["step_s"]}


def measured(profile: str, sets: tuple[str, ...], env: dict, out: Path) -> dict:
    """The case's command timed, with its attempt's figures."""
    command = [sys.executable, str(REPO / "train.py"), "train", *_args(profile, sets), "--output-dir", str(out)]
    started = time.monotonic()
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, env=env)
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"{profile} {sets}: exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    summary = json.loads(next(out.glob("run-*/attempt-*/summary.json")).read_text(encoding="utf-8"))
    evaluation = summary.get("evaluation") or {}
    return {
        "wall_s": round(wall, 1),
        "attempt_s": summary.get("wall_seconds"),
        "train_s": summary.get("train_seconds"),
        "steps": summary.get("steps"),
        "step_s": (summary.get("speed") or {}).get("step_s"),
        "completion_mean": (summary.get("speed") or {}).get("completion_mean"),
        "evaluations": len(evaluation.get("points") or []),
        "eval_during_s": evaluation.get("seconds_during_training"),
        "phases": summary.get("phases"),
    }


def table(rows: list[dict]) -> list[str]:
    lines = [
        "| case | role | steps | step s: stated / measured | evaluations | run: stated / measured | error |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['name']} | {r['role']} | {r['measured']['steps']} | {r['stated_step_s']:.2f} / "
            f"{r['measured']['step_s']:.2f} | {r['measured']['evaluations']} | {r['stated_s']:.0f} s / "
            f"{r['measured']['wall_s']:.0f} s | {r['error']:.2f} |"
        )
    return lines


def summary_lines(rows: list[dict]) -> list[str]:
    out = []
    for role in ("fit", "check"):
        errors = [r["error"] for r in rows if r["role"] == role]
        if errors:
            off = [max(e, 1 / e) - 1 for e in errors]
            out.append(
                f"{role}: median {100 * statistics.median(off):.0f}% off (stated / measured median "
                f"{statistics.median(errors):.2f}), worst {100 * max(off):.0f}% off, n={len(errors)}"
            )
    return out


def _patched(module, values: dict):
    saved = {name: getattr(module, name) for name in values}
    for name, value in values.items():
        setattr(module, name, value)
    return saved


def fit(rows: list[dict]) -> dict:
    """The fitted constants from the `fit` rows: the step's (launcher/plan/cpu_speed.py FITTED) by least squares
    on the relative error of the measured seconds per step, none negative; the run's (launcher/plan/run_time.py
    FITTED) as the median of what each fit run measured of them."""
    import itertools

    sys.path.insert(0, str(REPO))
    from launcher.plan import cpu_speed, run_time
    from launcher.plan.step_shape import shape_of
    from profiles.catalog import resolve
    from profiles.load import load_profile

    tiny = resolve("tiny")
    fits = [r for r in rows if r["role"] == "fit"]
    shapes = []
    for r in fits:
        profile = load_profile(REPO / r["profile"], r["sets"])
        expected = max(1, round(r["measured"]["completion_mean"]))
        shapes.append(replace(shape_of(profile, tiny, None), expected=expected, float32=True, generator="transformers"))
    names = cpu_speed.FITTED
    weights = [1.0 / r["measured"]["step_s"] for r in fits]
    best = None
    for flops in (cpu_speed.FLOPS_PER_THREAD,):  # measured, not fitted: the fitted constants are linear in a step
        design, targets = [], []
        for r, shape in zip(fits, shapes):

            def at(values: dict, shape=shape, flops=flops) -> float:
                saved = _patched(cpu_speed, {**values, "FLOPS_PER_THREAD": flops})
                try:
                    return cpu_speed.step_time(shape).step_s
                finally:
                    _patched(cpu_speed, saved)

            zero = dict.fromkeys(names, 0.0)
            base = at(zero)
            design.append([at({**zero, name: 1.0}) - base for name in names])
            targets.append(r["measured"]["step_s"] - base)
        for size in range(len(names), -1, -1):  # non-negative least squares by the subsets of the constants
            for chosen in itertools.combinations(range(len(names)), size):
                coef = (
                    _least_squares(
                        [[row[i] * w for i in chosen] for row, w in zip(design, weights)],
                        [t * w for t, w in zip(targets, weights)],
                    )
                    if chosen
                    else []
                )
                if coef is None or any(c < 0 for c in coef):
                    continue
                values = [0.0] * len(names)
                for i, c in zip(chosen, coef):
                    values[i] = c
                residual = sum(
                    (sum(v * x for v, x in zip(values, row)) - t) ** 2 * w * w
                    for row, t, w in zip(design, targets, weights)
                )
                if best is None or residual < best[0]:
                    best = (residual, values, flops)
    step = dict(zip(names, best[1])) if best else {}
    starts = [r["measured"]["wall_s"] - r["measured"]["attempt_s"] + r["measured"]["phases"]["load"] for r in fits]
    reports = [r["measured"]["phases"]["adapter"] + r["measured"]["phases"]["report"] for r in fits]
    per_row = []
    for r in fits:
        profile = load_profile(REPO / r["profile"], r["sets"])
        saved = _patched(cpu_speed, step)
        try:
            timed = run_time.run_time(profile, tiny, 1)
            generated = timed.parts["evaluations"] / timed.evaluations - run_time.EVAL_ROW_S * profile.eval_samples
        finally:
            _patched(cpu_speed, saved)
        per_row.append(max(0.0, (r["measured"]["phases"]["evaluation_before"] - generated) / profile.eval_samples))
    return {
        **{name: round(value, 6) for name, value in step.items()},
        "CPU_START_S": round(statistics.median(starts), 2),
        "REPORT_S": round(statistics.median(reports), 2),
        "EVAL_ROW_S": round(statistics.median(per_row), 5),
    }


def _least_squares(a: list[list[float]], b: list[float]) -> list[float] | None:
    """x minimising |a x - b| (the normal equations, solved by Gaussian elimination); None if singular."""
    n = len(a[0])
    m = [
        [sum(row[i] * row[j] for row in a) for j in range(n)] + [sum(row[i] * y for row, y in zip(a, b))]
        for i in range(n)
    ]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[pivot][col]) < 1e-15:
            return None
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(n):
            if r != col:
                factor = m[r][col] / m[col][col]
                m[r] = [x - factor * y for x, y in zip(m[r], m[col])]
    return [m[i][n] / m[i][i] for i in range(n)]


def _stated_fields(profile: str, sets: tuple[str, ...], env: dict, wall_s: float) -> dict:
    said = stated(profile, sets, env)
    stated_s = said["run"]["total_hours"] * 3600
    return {
        "stated_s": round(stated_s, 1),
        "stated_step_s": said["step_s"],
        "stated_parts": said["run"]["beside_steps"],
        "error": round(stated_s / wall_s, 3) if wall_s else None,
    }


def run_cases(wanted: list[str]) -> list[dict]:
    """Each case planned, then run and timed, over one fresh ledger; the ledger as the plan read it is kept in
    the row (`ledger_before`), so that the statement can be made again with other constants (--restate)."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="cpu-run-time-") as folder:
        ledger = Path(folder) / "ledger.jsonl"
        env = {**os.environ, "GRPO_TRAIN_LEDGER": str(ledger)}
        for name, role, profile, sets in CASES:
            if name not in wanted:
                continue
            before = ledger.read_text(encoding="utf-8") if ledger.exists() else ""
            said = _stated_fields(profile, sets, env, 0.0)
            load = os.getloadavg()[0]
            got = measured(profile, sets, env, Path(folder) / name)
            got["load_before"], got["load_after"] = round(load, 2), round(os.getloadavg()[0], 2)
            row = {"name": name, "role": role, "profile": profile, "sets": list(sets), **said, "measured": got}
            row["error"] = round(row["stated_s"] / got["wall_s"], 3)
            row["ledger_before"] = before
            rows.append(row)
            print(table(rows)[-1], flush=True)
    return rows


def restate(rows: list[dict]) -> list[dict]:
    """Each row's statement made again by today's plan, from the ledger it was first planned with."""
    with tempfile.TemporaryDirectory(prefix="cpu-run-time-") as folder:
        for row in rows:
            ledger = Path(folder) / f"{row['name']}.jsonl"
            ledger.write_text(row.get("ledger_before", ""), encoding="utf-8")
            env = {**os.environ, "GRPO_TRAIN_LEDGER": str(ledger)}
            row.update(_stated_fields(row["profile"], tuple(row["sets"]), env, row["measured"]["wall_s"]))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default=",".join(c[0] for c in CASES))
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--constants-from", type=Path, metavar="RUNS.json", help="print the constants fitted to these runs"
    )
    parser.add_argument(
        "--restate", type=Path, metavar="RUNS.json", help="state these runs again with today's constants (no runs)"
    )
    args = parser.parse_args()
    if args.constants_from:
        print(json.dumps(fit(json.loads(args.constants_from.read_text(encoding="utf-8"))), indent=1))
        return 0
    if args.restate:
        rows = restate(json.loads(args.restate.read_text(encoding="utf-8")))
    else:
        rows = run_cases(args.cases.split(","))
    machine = f"{os.cpu_count()} CPU cores ({platform.machine()}), Python {platform.python_version()}"
    loads = [r["measured"].get("load_before") for r in rows if r["measured"].get("load_before") is not None]
    load_text = f"load average {min(loads):.1f}-{max(loads):.1f} as the runs started" if loads else ""
    text = [
        "# The plan's stated run time against the measured wall time (CPU)",
        "",
        "`python benchmarks/cpu_run_time.py --json RUNS.json --markdown benchmarks/cpu_run_time.md`: each case's "
        "`python train.py train` timed from start to exit, beside what `plan --json` states for it from the ledger "
        "it ran with (benchmarks/cpu_run_time.py says how). Error: stated / measured.",
        "",
        f"Machine: {machine}; {load_text}.",
        "",
        *table(rows),
        "",
        *summary_lines(rows),
        "",
    ]
    print("\n".join(summary_lines(rows)))
    if args.markdown:
        args.markdown.write_text("\n".join(text), encoding="utf-8")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
