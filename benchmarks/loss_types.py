"""A short CPU run of the tiny model per GRPO loss type and importance-sampling level, through `train.py` as the
supervisor starts an attempt: each reaches the trainer with its settings (read back from the trainer's own
config in summary.json) and trains. Writes benchmarks/loss_types.md and .json.

    python benchmarks/loss_types.py [--steps 8]            (about a minute a run on two cores)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "profiles" / "cpu-tiny-4gen.yaml"
# (loss_type, importance_sampling_level, extra --set, plain TRL without Unsloth)
RUNS = [
    ("dapo", "token", [], False),
    ("grpo", "token", [], False),
    ("dr_grpo", "token", [], False),
    ("bnpo", "token", [], False),
    ("cispo", "token", ["epsilon_high=5.0"], False),
    ("sapo", "token", [], False),
    ("vespo", "token", [], False),
    ("luspo", "sequence", [], False),
    ("grpo", "sequence", [], False),
    ("grpo", "sequence", [], True),
]


def run(loss: str, level: str, extra: list[str], plain: bool, steps: int, folder: Path) -> dict:
    attempt = folder / f"attempt-{loss}-{level}{'-trl' if plain else ''}"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("GRPO_INJECT_OOM", None)
    if plain:
        env["GRPO_TRAIN_NO_UNSLOTH"] = "1"
    sets = [
        f"loss_type={loss}",
        f"importance_sampling_level={level}",
        f"max_steps={steps}",
        f"save_steps={steps}",
        "eval_samples=0",
        "train_samples=128",
        *extra,
    ]
    argv = [sys.executable, str(ROOT / "train.py"), "attempt", "--profile", str(PROFILE), "--attempt-dir", str(attempt)]
    for item in sets:
        argv += ["--set", item]
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        return {"loss_type": loss, "level": level, "plain_trl": plain, "error": done.stderr[-800:]}
    summary = json.loads((attempt / "summary.json").read_text())
    rows = [json.loads(line) for line in (attempt / "metrics.jsonl").read_text().splitlines()]
    return {
        "loss_type": loss,
        "level": level,
        "plain_trl": plain,
        "extra": extra,
        "backend": summary["backend"],
        "trainer": summary["loss_settings"]["trainer"],
        "trained_with": summary["loss_settings"],
        "steps": summary["steps"],
        "reward_first": summary["rewards"]["total"]["first"],
        "reward_last": summary["rewards"]["total"]["last"],
        "window": summary["rewards"]["window"],
        "loss_per_step": [r["loss"] for r in rows],
        "seconds": summary["train_seconds"],
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory() as folder:
        for loss, level, extra, plain in RUNS:
            results.append(run(loss, level, extra, plain, args.steps, Path(folder)))
            print(json.dumps({k: v for k, v in results[-1].items() if k != "trained_with"}), flush=True)
    (ROOT / "benchmarks" / "loss_types.json").write_text(json.dumps(results, indent=2) + "\n")
    lines = [
        "# One short CPU run per loss type and importance-sampling level",
        "",
        f"`python benchmarks/loss_types.py --steps {args.steps}`: the tiny model, profile cpu-tiny-4gen "
        f"({args.steps} steps, 4 completions a step). The trainer column is the class that trained; the loss "
        "type and level are read back from its config. Reward: the weighted total, mean of the first and "
        "the last steps (window below).",
        "",
        "| loss_type | importance sampling | path | trainer (its loss_type / level) | steps | reward first -> last "
        "(window) | loss per step |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if "error" in r:
            lines.append(
                f"| {r['loss_type']} | {r['level']} | {'TRL' if r['plain_trl'] else 'Unsloth'} | failed: "
                f"{r['error'].splitlines()[-1] if r['error'] else ''} | | | |"
            )
            continue
        got = r["trained_with"]
        losses = ", ".join("n/a" if v is None else f"{v:.3g}" for v in r["loss_per_step"])
        lines.append(
            f"| {r['loss_type']}{' (' + ', '.join(r['extra']) + ')' if r['extra'] else ''} | {r['level']} | "
            f"{r['backend']} | {r['trainer']} ({got['loss_type']} / {got['importance_sampling_level']}) | "
            f"{r['steps']} | {r['reward_first']} -> {r['reward_last']} ({r['window']}) | {losses} |"
        )
    (ROOT / "benchmarks" / "loss_types.md").write_text("\n".join(lines) + "\n")
    return 0 if all("error" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
