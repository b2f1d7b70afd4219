"""A signal after training (during the final evaluation) stops the attempt as promised, with exit 130, and
`--resume` then finishes it without training past max_steps: the checkpoint already holds every step, so the
resumed attempt saves, evaluates and reports it. A real CPU run through the supervisor (slow)."""

from __future__ import annotations

import json

from support.cli import REPO, train_py

CPU = REPO / "profiles" / "cpu-tiny-4gen.yaml"

# The correctness reward judges the evaluation before training (call 1) and after it (call 2): on its
# second call it sends this process a SIGTERM, as a user's `docker stop` would during that evaluation.
JUDGE = """import os, signal
from pathlib import Path
from rewards.accuracy import accuracy

COUNT = Path(__file__).with_name("judge-calls")

def judge(completions, answer, **kwargs):
    calls = int(COUNT.read_text()) + 1 if COUNT.exists() else 1
    COUNT.write_text(str(calls))
    if calls == 2:
        os.kill(os.getpid(), signal.SIGTERM)
    return accuracy(completions=completions, answer=answer)
"""


def test_sigterm_in_the_final_evaluation_stops_then_resume_finishes_without_a_step_past_max(tmp_path, tiny_cache):
    import os

    (tmp_path / "judge.py").write_text(JUDGE)
    env = {k: v for k, v in os.environ.items() if k not in ("GRPO_INJECT_OOM", "GRPO_TRAIN_NO_UNSLOTH")}
    env.update(GRPO_TRAIN_CACHE=str(tiny_cache), PYTHONUNBUFFERED="1", PYTHONPATH=str(REPO))
    out = tmp_path / "out"
    sets = [
        "max_steps=2",
        "save_steps=2",
        "eval_samples=2",
        "train_samples=16",
        "probe=false",
        f"correctness={tmp_path / 'judge.py'}:judge",
    ]
    args = [arg for pair in sets for arg in ("--set", pair)]
    first = train_py("--profile", str(CPU), *args, "--output-dir", str(out), cwd=tmp_path, env=env)
    text = first.stdout + first.stderr
    assert first.returncode == 130, text[-4000:]
    assert "SIGTERM received while finishing: the adapter is saved; stopping without the final evaluation" in text
    run_dir = next(out.glob("run-*"))
    attempt = next(run_dir.glob("attempt-01-*"))
    outcome = json.loads((attempt / "outcome.json").read_text())
    assert outcome["status"] == "interrupted" and outcome["steps"] == 2, outcome
    assert not (attempt / "summary.json").exists()  # the report was left for --resume

    second = train_py("--resume", "--output-dir", str(out), cwd=tmp_path, env=env)
    text = second.stdout + second.stderr
    assert second.returncode == 0, text[-4000:]
    assert "already holds max_steps (2): nothing left to train" in text
    assert "step 3/2" not in text
    resumed = next(run_dir.glob("attempt-02-*"))
    outcome = json.loads((resumed / "outcome.json").read_text())
    assert outcome["status"] == "ok" and outcome["steps"] == 2, outcome
    assert outcome["peak_gib"] is None  # no training step here: nothing measured for the ledger
    assert "2 steps in 0.0 s, no step trained in this attempt" in text
    assert not (resumed / "metrics.jsonl").exists() or not (resumed / "metrics.jsonl").read_text().strip()
    summary = json.loads((resumed / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["accuracy"]["after"] is not None
    assert (resumed / "adapter" / "adapter_model.safetensors").is_file()
