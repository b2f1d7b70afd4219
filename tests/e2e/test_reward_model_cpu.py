"""A reward model trains a policy on the CPU: `rewards` names the offline tiny reward model's folder
(`model:FOLDER`), the attempt loads it beside the policy, scores every completion with it, and its scores reach
metrics.jsonl under the model's name, as TRL logs a reward model."""

from __future__ import annotations

import json
import os
from pathlib import Path

from support.cli import REPO, train_py
from tiny_model.reward_model import ensure_tiny_reward_model

CPU = REPO / "profiles" / "cpu-tiny-8gen.yaml"


def test_a_reward_model_scores_a_cpu_run(tmp_path):
    folder = ensure_tiny_reward_model(seed=0, root=tmp_path / "reward-models")
    env = dict(os.environ, GRPO_TRAIN_CACHE=str(tmp_path / "cache"), PYTHONUNBUFFERED="1", CUDA_VISIBLE_DEVICES="")
    for name in ("GRPO_INJECT_OOM", "GRPO_TRAIN_NO_UNSLOTH", "GRPO_ATTEMPT_ESTIMATE_GIB", "HF_TOKEN"):
        env.pop(name, None)
    sets = [
        f"rewards={{accuracy: 1.0, 'model:{folder}': 0.5}}",
        "length_probe=0",
        "max_steps=2",
        "save_steps=2",
        "eval_samples=2",
        "train_samples=16",
    ]
    args = [item for pair in sets for item in ("--set", pair)]
    result = train_py("--profile", str(CPU), *args, "--output-dir", "outputs", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    attempt_dir = (next(Path(tmp_path / "outputs").glob("run-*")) / "final").resolve()
    lines = [json.loads(x) for x in (attempt_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    assert lines and all(set(r["rewards"]) == {"accuracy", folder.name} for r in lines)
    scores = [r["rewards"][folder.name] for r in lines]
    # a step's mean over 128 completions of random weights: a number, not the 0.0 of a completion left unread
    assert all(isinstance(s, float) and s != 0.0 for s in scores), scores
    assert len(set(scores)) == len(scores), scores  # each step's completions scored anew
    print("reward model scores by step:", scores)
