"""A reward written for open-r1 (it reads the gold from `solution`, the worked solution, by its own name) trains
on problem/solution data on the CPU: the column reaches it as TRL passes it, the project's rewards score the
boxed final answer, and the data check says where the gold was read from."""

from __future__ import annotations

import json

from support.cli import short_cpu_run

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
    sets = ["dataset=math.jsonl", "rewards={accuracy: 1.0, r1_rewards.py:accuracy_reward: 1.0}"]
    result, lines = short_cpu_run(tmp_path, sets)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "the final answer of each worked solution in 'solution'" in result.stdout
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
    sets = ["dataset=text.jsonl", "rewards={text_rewards.py:distinct_characters: 1.0}"]
    result, lines = short_cpu_run(tmp_path, sets)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    scores = [r["rewards"]["distinct_characters"] for r in lines]
    assert scores and all(score > 1.0 for score in scores), scores  # a chat's len(set(...)) would be 1.0
