"""A reward written for open-r1 (it reads the gold from `solution`, the worked solution, by its own name) trains
on problem/solution data on the CPU: the column reaches it as TRL passes it, the project's rewards score the
boxed final answer, and the data check says where the gold was read from."""

from __future__ import annotations

import json
import os
from pathlib import Path

from support.cli import REPO, train_py

CPU = REPO / "profiles" / "cpu-tiny-8gen.yaml"

# The shape of open-r1's accuracy reward: the gold is read from `solution`; a missing column would be a TypeError
REWARD_FILE = """def accuracy_reward(completions, solution, **kwargs):
    assert all("\\\\boxed" in s for s in solution), solution
    return [0.5 for _ in completions]
"""


def test_an_open_r1_reward_reads_solution_by_its_name(tmp_path):
    rows = [
        {"problem": f"What is {i} plus {i + 3}?", "solution": f"Add them.\\nThe sum is $\\\\boxed{{{2 * i + 3}}}$."}
        for i in range(20)
    ]
    (tmp_path / "math.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (tmp_path / "r1_rewards.py").write_text(REWARD_FILE, encoding="utf-8")
    env = dict(os.environ, GRPO_TRAIN_CACHE=str(tmp_path / "cache"), PYTHONUNBUFFERED="1", CUDA_VISIBLE_DEVICES="")
    for name in ("GRPO_INJECT_OOM", "GRPO_TRAIN_NO_UNSLOTH", "GRPO_ATTEMPT_ESTIMATE_GIB", "HF_TOKEN"):
        env.pop(name, None)
    sets = [
        "dataset=math.jsonl",
        "rewards={accuracy: 1.0, r1_rewards.py:accuracy_reward: 1.0}",
        "length_probe=0",
        "max_steps=2",
        "save_steps=2",
        "eval_samples=2",
        "train_samples=16",
    ]
    args = [item for pair in sets for item in ("--set", pair)]
    result = train_py("--profile", str(CPU), *args, "--output-dir", "outputs", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "the final answer of each worked solution in 'solution'" in result.stdout
    attempt_dir = (next(Path(tmp_path / "outputs").glob("run-*")) / "final").resolve()
    lines = [json.loads(x) for x in (attempt_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    assert lines and all(set(r["rewards"]) == {"accuracy", "accuracy_reward"} for r in lines)


# TRL's documentation's first custom reward, written for its standard format: completions are strings
TEXT_REWARD_FILE = """def distinct_characters(completions, **kwargs):
    assert all(isinstance(c, str) for c in completions), [type(c) for c in completions]
    return [float(len(set(c))) for c in completions]
"""


def test_text_prompts_stay_text_and_their_completions_reach_rewards_as_text(tmp_path):
    rows = [{"prompt": f"{i} plus {i + 3} is", "answer": str(2 * i + 3)} for i in range(20)]
    (tmp_path / "text.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (tmp_path / "text_rewards.py").write_text(TEXT_REWARD_FILE, encoding="utf-8")
    env = dict(os.environ, GRPO_TRAIN_CACHE=str(tmp_path / "cache"), PYTHONUNBUFFERED="1", CUDA_VISIBLE_DEVICES="")
    for name in ("GRPO_INJECT_OOM", "GRPO_TRAIN_NO_UNSLOTH", "GRPO_ATTEMPT_ESTIMATE_GIB", "HF_TOKEN"):
        env.pop(name, None)
    sets = [
        "dataset=text.jsonl",
        "rewards={text_rewards.py:distinct_characters: 1.0}",
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
    scores = [r["rewards"]["distinct_characters"] for r in lines]
    assert scores and all(score > 1.0 for score in scores), scores  # a chat's len(set(...)) would be 1.0
