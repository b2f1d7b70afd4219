"""Does GRPO raise the tiny model's pass rate on the `programs` task? `python benchmarks/code_demo.py` runs
profiles/cpu-tiny-code.yaml once per seed (each seed builds its own warm start), reads each run's summary.json
and writes the held-out pass rate (every test case passed, greedy) before and after GRPO as a table.

    python benchmarks/code_demo.py --seeds 3407 1 2 3 4 --markdown benchmarks/code_demo.md
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
PROFILE = REPO / "profiles" / "cpu-tiny-code.yaml"
SEEDS = (3407, 1, 2, 3, 4)


def run_seed(seed: int, out: Path, cache: Path, threads: int) -> dict:
    """One seeded run of the profile; its figures {seed, before, after, gain, warm_start, wall_seconds, ...}."""
    env = {
        **os.environ,
        "GRPO_TRAIN_CACHE": str(cache),
        "OMP_NUM_THREADS": str(threads),
        "CUDA_VISIBLE_DEVICES": "",
        "PYTHONUNBUFFERED": "1",
    }
    command = [sys.executable, str(REPO / "train.py"), "train", "--profile", str(PROFILE), "--set", f"seed={seed}"]
    command += ["--output-dir", str(out)]
    started = time.time()
    done = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True)
    wall = round(time.time() - started, 1)
    # the run alone keeps the 2-core machine's load near its thread count: above it, other work shared the cores
    load = round(os.getloadavg()[1], 1)
    if done.returncode != 0:
        raise SystemExit(f"seed {seed}: train.py exited {done.returncode}\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    attempt = sorted(out.glob("run-*/attempt-*"))[-1]
    return {**figures(seed, json.loads((attempt / "summary.json").read_text(encoding="utf-8")), wall), "load": load}


def figures(seed: int, summary: dict, wall_seconds: float) -> dict:
    """A run's row of the table, read from its summary.json."""
    accuracy, warm = summary["accuracy"], summary.get("warm_start") or {}
    return {
        "seed": seed,
        "warm_start": warm.get("warm_start_accuracy"),
        "warm_start_steps": warm.get("steps"),
        "warm_start_seconds": warm.get("seconds"),
        "before": accuracy["before"],
        "after": accuracy["after"],
        "gain": round(accuracy["after"] - accuracy["before"], 4),
        "samples": accuracy["samples"],
        "steps": summary["steps"],
        "train_seconds": summary["train_seconds"],
        "wall_seconds": wall_seconds,
    }


def settings_line() -> str:
    """The profile's GRPO settings in a sentence, read from the profile file the runs took."""
    import yaml

    from tiny_model.program_warm_start import PASS_BAND

    p = yaml.safe_load(PROFILE.read_text(encoding="utf-8"))
    prompts = p["per_device_train_batch_size"] * p["gradient_accumulation_steps"] // p["num_generations"]
    rewards = ", ".join(f"{name} {weight}" for name, weight in p["rewards"].items())
    return (
        f"The profile: {prompts} problems x {p['num_generations']} generations a step, temperature "
        f"{p['temperature']}, learning rate {p['learning_rate']}, beta {p['beta']}, {p['max_steps']} steps, "
        f"rewards {rewards}, correctness {p['correctness']}. The warm start stops at its first check inside a "
        f"pass rate of {PASS_BAND[0]}-{PASS_BAND[1]} (tiny_model/program_warm_start.py)."
    )


def markdown(rows: list[dict], threads: int) -> str:
    gains = [row["gain"] for row in rows]
    lines = [
        "# The code demo: GRPO on generated tiny programs (CPU)",
        "",
        "`python benchmarks/code_demo.py --markdown benchmarks/code_demo.md`: `python train.py train --profile "
        "profiles/cpu-tiny-code.yaml --set seed=S` once per seed, each with a fresh model cache (the warm start is "
        "built inside the run). Pass rate: the share of the "
        f"{rows[0]['samples'] if rows else 0} held-out problems whose greedy program passes every test case "
        "(`binary_code`); before = the warm start, after = the model after GRPO.",
        "",
        f"Machine: {os.cpu_count()} CPU cores ({platform.machine()}), {threads} threads, Python "
        f"{platform.python_version()}.",
        "",
        settings_line(),
        "",
        "| seed | warm start (steps, s) | before | after | gain | GRPO steps | train s | wall s | load (5 min) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['seed']} | {row['warm_start_steps']}, {row['warm_start_seconds']} | {row['before']:.2f} | "
            f"{row['after']:.2f} | {row['gain']:+.2f} | {row['steps']} | {row['train_seconds']:.0f} | "
            f"{row['wall_seconds']:.0f} | {row.get('load', '')} |"
        )
    if gains:
        lines += [
            "",
            f"Gain: mean {sum(gains) / len(gains):+.3f}, smallest {min(gains):+.3f}, largest {max(gains):+.3f}.",
            "",
            f"Load: the machine's 5-minute load average as each run ended; the run alone keeps it near {threads}, "
            "and above that other work shared the cores (the seconds are this machine's at that load).",
        ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=list(SEEDS))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--markdown", type=Path, help="write the table here")
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for seed in args.seeds:
            rows.append(run_seed(seed, Path(scratch) / f"seed-{seed}", Path(scratch) / "cache", args.threads))
            print(json.dumps(rows[-1]), flush=True)
    text = markdown(rows, args.threads)
    print(text)
    if args.markdown:
        args.markdown.write_text(text, encoding="utf-8")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
