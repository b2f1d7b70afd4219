"""The ledger end to end on the CPU ladder: a run's OOM and success plan the next run; --calibrate measures the
rungs; --ledger reports them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
QUICK = ["--set", "max_steps=2", "--set", "save_steps=2", "--set", "eval_samples=0", "--set", "train_samples=32"]


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("grpo-cache")  # the tiny model is built once for the module


def _run(args, env, timeout=600):
    return subprocess.run([sys.executable, str(REPO / "train.py"), *args], cwd=REPO, env=env, text=True,
                          capture_output=True, timeout=timeout)


def _env(cache: Path, ledger: Path, **extra) -> dict:
    env = dict(os.environ, GRPO_TRAIN_CACHE=str(cache), GRPO_TRAIN_LEDGER=str(ledger), **extra)
    env.pop("GRPO_INJECT_OOM", None)
    env.update(extra)
    return env


def _attempts(output: Path) -> list[dict]:
    (run,) = sorted(output.glob("run-*"))
    return [json.loads(line) for line in (run / "attempts.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_an_oom_then_a_success_plan_the_next_run(tmp_path, shared_cache):
    ledger = tmp_path / "ledger.jsonl"
    first = _run(["--auto", "--output-dir", str(tmp_path / "one"), *QUICK],
                 _env(shared_cache, ledger, GRPO_INJECT_OOM="cpu-tiny-8gen"))
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    statuses = [(a["profile"], a["status"]) for a in _attempts(tmp_path / "one")]
    assert statuses[0] == ("cpu-tiny-8gen", "oom") and statuses[-1] == ("cpu-tiny-4gen", "ok")

    plan = _run(["--auto", "--dry-run", "--json"], _env(shared_cache, ledger))
    verdicts = {c["profile"]: c for c in json.loads(plan.stdout)["candidates"]}
    eight, four = verdicts["cpu-tiny-8gen"], verdicts["cpu-tiny-4gen"]
    assert not eight["fits"] and eight["measured"]["oom_lower_bound_gib"] > 0
    assert "ran out of memory here needing at least" in eight["reason"]
    assert four["fits"] and four["measured"]["peak_gib"] > 0 and four["measured"]["runs"] == 1
    assert "measured" in four["reason"] and "est." in four["reason"]

    second = _run(["--auto", "--output-dir", str(tmp_path / "two"), *QUICK], _env(shared_cache, ledger))
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert [(a["profile"], a["status"]) for a in _attempts(tmp_path / "two")] == [("cpu-tiny-4gen", "ok")]
    assert _attempts(tmp_path / "two")[0]["probe"]["peak_gib"] > 0  # attempts.jsonl keeps the probe's figures
    assert "ran out of memory here needing at least" in second.stdout  # the plan says why 8gen was passed over

    report = _run(["--ledger"], _env(shared_cache, ledger))
    assert report.returncode == 0 and "cpu-tiny-4gen" in report.stdout and "cpu-tiny-8gen" in report.stdout

    ignored = _run(["--auto", "--dry-run", "--json", "--ignore-ledger"], _env(shared_cache, ledger))
    candidates = json.loads(ignored.stdout)["candidates"]
    assert all(c["measured"] is None for c in candidates) and json.loads(ignored.stdout)["chosen"] == "cpu-tiny-8gen"


@pytest.mark.slow
def test_calibrate_measures_every_rung_and_the_plan_uses_it(tmp_path, shared_cache):
    ledger = tmp_path / "ledger.jsonl"
    done = _run(["--calibrate", "--output-dir", str(tmp_path / "cal"), *QUICK], _env(shared_cache, ledger))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    entries = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert sorted(e["profile"] for e in entries) == ["cpu-tiny-4gen", "cpu-tiny-8gen"]
    assert all(e["probe"]["peak_gib"] > 0 and e["peak_gib"] > 0 for e in entries)
    assert not list((tmp_path / "cal").glob("calibrate-*/probe-*/checkpoint-*"))  # probes train nothing
    plan = json.loads(_run(["--auto", "--dry-run", "--json"], _env(shared_cache, ledger)).stdout)
    assert all(c["measured"] is not None for c in plan["candidates"])
    assert plan["chosen"] == "cpu-tiny-8gen"
