#!/usr/bin/env python3
"""Held-out accuracy of the CPU default during GRPO, over several seeds: is the learning real and steady?

    python benchmarks/learning_curve.py [--profile profiles/cpu-tiny-8gen.yaml] [--seeds 3407,1,2,3,4,5]
                                        [--every 50] [--held-out 200] [--out learning_curve.png]

For each seed, `train.py train --profile ... --set seed=S` runs as a child process (the product's own path: the
tiny model built and warm-started for that seed, then GRPO), checkpointing every `--every` steps. Each
checkpoint's adapter is then scored greedily on the held-out problems (never seen in training or in the
warm start). Step 0 is the warm-started model; the random model's accuracy comes from the build record.
Prints one line per seed, the mean and spread per step and a Markdown table (gain, well-formed answers,
the share of groups that taught nothing), writes a JSON beside the PNG. `--results a.json,b.json` redraws
the PNG, JSON and table from earlier runs' JSON (seeds measured in separate processes) without training.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def train(profile: str, seed: int, every: int, held_out: int, out: Path, extra: list[str]) -> Path:
    """Run one seeded training in a child process; the attempt folder."""
    sets = [f"seed={seed}", f"save_steps={every}", f"eval_samples={held_out}", *extra]
    command = [sys.executable, str(REPO / "train.py"), "train", "--profile", profile, "--output-dir", str(out)]
    for item in sets:
        command += ["--set", item]
    subprocess.run(command, check=True, cwd=REPO)
    return next(out.glob("run-*/attempt-*"))


def score_checkpoints(attempt: Path, held_out: int) -> dict:
    """{step: held-out accuracy} for the warm start (step 0) and every checkpoint's adapter."""
    sys.path.insert(0, str(REPO))
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tasks import load_task
    from tiny_model.build import ensure_tiny
    from tiny_model.warm_start import measure_heldout

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    summary = json.loads((attempt / "summary.json").read_text())
    profile = summary["profile"]
    base_path = ensure_tiny(profile["dataset"], seed=profile["seed"])
    tokenizer = AutoTokenizer.from_pretrained(base_path)
    rows = load_task(profile["dataset"], "test", limit=held_out)
    curve = {0: measure_heldout(AutoModelForCausalLM.from_pretrained(base_path), tokenizer, rows)["accuracy"]}
    for checkpoint in sorted(attempt.glob("checkpoint-*"), key=lambda p: int(p.name.rsplit("-", 1)[1])):
        if (checkpoint / "adapter_config.json").is_file():
            model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_path), str(checkpoint))
        else:  # lora_rank 0: the checkpoint holds every weight
            model = AutoModelForCausalLM.from_pretrained(str(checkpoint))
        curve[int(checkpoint.name.rsplit("-", 1)[1])] = measure_heldout(model, tokenizer, rows)["accuracy"]
    record = summary.get("warm_start") or {}
    signal = summary.get("group_signal") or {}
    return {
        "seed": profile["seed"],
        "random": record.get("random_accuracy"),
        "curve": curve,
        "train_seconds": summary["train_seconds"],
        "wall_seconds": summary["wall_seconds"],
        "after": summary["accuracy"]["after"],
        "well_formed_after": summary["accuracy"]["well_formed_after"],
        "warm_start": {key: record.get(key) for key in ("steps", "stopped", "restated", "seconds")},
        "groups_alike": signal.get("groups_alike"),
        "groups_all_correct": signal.get("groups_all_correct"),
        "groups_all_wrong": signal.get("groups_all_wrong"),
    }


def plot(results: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = sorted(set.intersection(*(set(r["curve"]) for r in results)))
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    for r in results:
        ax.plot(steps, [r["curve"][s] for s in steps], color="0.6", linewidth=1, alpha=0.8)
    means = [statistics.mean(r["curve"][s] for r in results) for s in steps]
    spread = [statistics.pstdev([r["curve"][s] for r in results]) for s in steps]
    ax.plot(steps, means, color="black", linewidth=2.4, label=f"mean of {len(results)} seeds (grey: each)")
    ax.fill_between(
        steps,
        [m - d for m, d in zip(means, spread)],
        [m + d for m, d in zip(means, spread)],
        color="tab:blue",
        alpha=0.2,
        label="mean +/- standard deviation",
    )
    randoms = [r["random"] for r in results if r["random"] is not None]
    if randoms:
        ax.axhline(statistics.mean(randoms), color="tab:red", linestyle="--", label="random model")
    ax.set_xlabel("GRPO step (0 = warm start)")
    ax.set_ylabel("held-out accuracy (greedy)")
    ax.set_ylim(0, 1)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def table(results: list[dict], steps: list[int]) -> str:
    """The seeds as a Markdown table: warm start, held-out accuracy at each measured step, gain, well-formed
    answers after, and the run's share of groups that taught nothing at its start and end."""
    shown = [s for s in steps if s]
    lines = [
        "| seed | warm start (steps) | "
        + " / ".join(f"step {s}" for s in shown)
        + " | gain | well-formed after | alike groups first -> last |",
        "|---|---|---|---|---|---|",
    ]
    gains = []
    for r in results:
        gain = r["curve"][shown[-1]] - r["curve"][0]
        gains.append(gain)
        alike = r.get("groups_alike") or {}
        lines.append(
            f"| {r['seed']} | {r['curve'][0]:.3f} ({r['warm_start']['steps']}) | "
            + " / ".join(f"{r['curve'][s]:.3f}" for s in shown)
            + f" | {100 * gain:+.1f} | {r['well_formed_after']:.3f} | "
            f"{alike.get('first', float('nan')):.2f} -> {alike.get('last', float('nan')):.2f} |"
        )
    means = [statistics.mean(r["curve"][s] for r in results) for s in [0, *shown]]
    lines.append(
        f"| mean | {means[0]:.3f} | "
        + " / ".join(f"{m:.3f}" for m in means[1:])
        + f" | {100 * statistics.mean(gains):+.1f} (min {100 * min(gains):+.1f}) | "
        f"{min(r['well_formed_after'] for r in results):.3f} (min) | |"
    )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default=str(REPO / "profiles" / "cpu-tiny-8gen.yaml"))
    parser.add_argument("--seeds", default="3407,1,2,3,4,5")
    parser.add_argument("--every", type=int, default=50, help="steps between held-out measurements")
    parser.add_argument("--held-out", type=int, default=200)
    parser.add_argument("--set", action="append", default=[], help="extra profile override, repeatable")
    parser.add_argument("--results", default="", help="earlier runs' JSON files, comma-separated: redraw only")
    parser.add_argument("--out", default="learning_curve.png")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "2")
    results = []
    for path in filter(None, args.results.split(",")):
        for result in json.loads(Path(path).read_text(encoding="utf-8")):
            results.append({**result, "curve": {int(step): acc for step, acc in result["curve"].items()}})
    with tempfile.TemporaryDirectory(prefix="learning-curve-") as tmp:
        for seed in [] if args.results else (int(s) for s in args.seeds.split(",")):
            attempt = train(args.profile, seed, args.every, args.held_out, Path(tmp) / f"seed-{seed}", args.set)
            result = score_checkpoints(attempt, args.held_out)
            results.append(result)
            points = " ".join(f"{step}:{acc:.3f}" for step, acc in sorted(result["curve"].items()))
            print(f"seed {seed}: random {result['random']}, {points} (train {result['train_seconds']} s)", flush=True)
    steps = sorted(set.intersection(*(set(r["curve"]) for r in results)))
    for step in steps:
        values = [r["curve"][step] for r in results]
        print(
            f"step {step:4d}: mean {statistics.mean(values):.3f}  sd {statistics.pstdev(values):.3f}  "
            f"min {min(values):.3f}  max {max(values):.3f}"
        )
    print(table(results, steps))
    out = Path(args.out)
    plot(results, out, f"{Path(args.profile).stem}: held-out accuracy during GRPO")
    out.with_suffix(".json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {out} and {out.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
