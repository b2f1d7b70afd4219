"""train --hours on the CPU default: the run stops at its budget with a checkpoint, the adapter and the report,
exits 0, and attempts.jsonl says it stopped for the budget (slow: it trains the tiny model)."""

from __future__ import annotations

import json

from support.cli import REPO, cpu_run_env, train_py


def test_train_stops_at_its_budget_with_a_checkpoint_the_adapter_and_the_report(tmp_path, tiny_cache):
    env = cpu_run_env(tiny_cache)
    result = train_py(
        "train",
        "--profile",
        str(REPO / "profiles" / "cpu-tiny-4gen.yaml"),
        "--output-dir",
        str(tmp_path),
        "--hours",
        "0.01",  # 36 s: the attempt stops when a step and its finishing (20 s and an evaluation) would not fit
        *("--set", "max_steps=100000", "--set", "save_steps=100000", "--set", "warmup_ratio=0"),
        *("--set", "eval_samples=8", "--set", "eval_steps=0", "--set", "train_samples=64"),
        env=env,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run = next(tmp_path.glob("run-*"))
    record = [json.loads(line) for line in (run / "attempts.jsonl").read_text().splitlines()][-1]
    assert record["status"] == "ok" and record["stopped_by"] == "budget"
    assert 0 < record["steps"] < 100000
    attempt = run / record["attempt_dir"]
    assert (attempt / "adapter").is_dir() and (attempt / "report.md").is_file()
    assert (attempt / f"checkpoint-{record['steps']}").is_dir()
    summary = json.loads((attempt / "summary.json").read_text())
    assert summary["stopped_by"] == "budget" and summary["steps"] == record["steps"]
    assert "stopped at the run's time budget" in result.stdout
