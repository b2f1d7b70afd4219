"""A reward model trains a policy on the CPU: `rewards` names the offline tiny reward model's folder
(`model:FOLDER`), the attempt loads it beside the policy, scores every completion with it, and its scores reach
metrics.jsonl under the model's name, as TRL logs a reward model."""

from __future__ import annotations

from support.cli import short_cpu_run
from tiny_model.reward_model import ensure_tiny_reward_model


def test_a_reward_model_scores_a_cpu_run(tmp_path):
    folder = ensure_tiny_reward_model(seed=0, root=tmp_path / "reward-models")
    result, lines = short_cpu_run(tmp_path, [f"rewards={{accuracy: 1.0, 'model:{folder}': 0.5}}"])
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert lines and all(set(r["rewards"]) == {"accuracy", folder.name} for r in lines)
    scores = [r["rewards"][folder.name] for r in lines]
    # a step's mean over 128 completions of random weights: a number, not the 0.0 of a completion left unread
    assert all(isinstance(s, float) and s != 0.0 for s in scores), scores
    assert len(set(scores)) == len(scores), scores  # each step's completions scored anew
    print("reward model scores by step:", scores)
