"""Evaluation during training: the interval (eval_steps, auto at about a tenth of training time), the curve in
metrics.jsonl, report.md and summary.json with its best step, and a signal during an evaluation, on CPU."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest

from profiles.evaluation_steps import EVAL_TIME_SHARE, eval_interval
from profiles.load import load_profile
from support.cli import start_train_py, train_py
from support.waiting import finish
from trainer.report import evaluation_figures

REPO = Path(__file__).resolve().parents[3]
CPU_DEFAULT = REPO / "profiles" / "cpu-tiny-8gen.yaml"
SMALL = REPO / "profiles" / "cpu-tiny-4gen.yaml"


def test_auto_evaluates_at_about_a_tenth_of_training_time():
    profile = load_profile(CPU_DEFAULT)
    every, why = eval_interval(profile)
    cost = profile.eval_samples / profile.effective_batch  # steps one evaluation is worth at most
    assert cost / every <= EVAL_TIME_SHARE < cost / (every - 1)
    assert 0 < every < profile.max_steps and why.startswith("auto")


def test_auto_is_off_where_no_interval_is_shorter_than_the_run():
    every, why = eval_interval(load_profile(SMALL, ["max_steps=20"]))  # 32 samples / 4 a step: every 80
    assert every == 0 and "not shorter than the run" in why


@pytest.mark.parametrize(
    "given, every",
    [(["eval_steps=5"], 5), (["eval_steps=0"], 0), (["eval_samples=0"], 0), (["eval_samples=0", "eval_steps=400"], 0)],
)
def test_a_given_interval_is_kept(given, every):
    assert eval_interval(load_profile(SMALL, given))[0] == every


def test_zero3_evaluates_only_before_and_after():
    profile = load_profile(REPO / "profiles" / "multi-4x80gb-qwen2.5-14b.yaml", ["zero_stage=3", "eval_steps=10"])
    assert eval_interval(profile) == (0, "ZeRO-3 partitions the weights across the ranks: rank 0 cannot generate alone")


def test_the_best_step_and_where_it_is_kept(tmp_path):
    (tmp_path / "checkpoint-20").mkdir()
    before = {"accuracy": 0.2, "well_formed": 0.5}
    after = {"accuracy": 0.5, "well_formed": 1.0}
    points = [{"step": 10, "accuracy": 0.4, "well_formed": 0.9}, {"step": 20, "accuracy": 0.6, "well_formed": 1.0}]
    figures = evaluation_figures(before, points, after, 30, 10, "every 10 steps", 3.0, 30.0, tmp_path)
    assert [p["step"] for p in figures["points"]] == [0, 10, 20, 30]
    assert figures["best"] == {"step": 20, "accuracy": 0.6, "well_formed": 1.0, "saved_in": "checkpoint-20"}
    assert figures["share_of_training_time"] == 0.1
    tie = evaluation_figures(
        before, [{"step": 10, "accuracy": 0.5, "well_formed": 1.0}], after, 30, 10, "", 1, 10, tmp_path
    )
    assert tie["best"]["step"] == 30 and tie["best"]["saved_in"] == "adapter"  # a tie goes to the later step


@pytest.fixture(scope="module")
def train_env(tiny_cache):
    import os

    env = dict(os.environ, GRPO_TRAIN_CACHE=str(tiny_cache), PYTHONUNBUFFERED="1")
    for name in ("GRPO_INJECT_OOM", "GRPO_TRAIN_NO_UNSLOTH", "GRPO_ATTEMPT_ESTIMATE_GIB"):
        env.pop(name, None)
    return env


def test_the_curve_of_a_cpu_run(tmp_path, train_env):
    attempt_dir = tmp_path / "attempt-01"
    result = train_py(
        "--profile",
        str(SMALL),
        "--attempt-dir",
        str(attempt_dir),
        "--set",
        "max_steps=6",
        "--set",
        "eval_steps=2",
        "--set",
        "eval_samples=8",
        "--set",
        "train_samples=64",
        "--set",
        "save_steps=2",
        env=train_env,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rows = [json.loads(line) for line in (attempt_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]  # still one line a step
    evaluated = {r["step"]: r["eval"] for r in rows if "eval" in r}
    assert sorted(evaluated) == [2, 4]  # step 6 is the final evaluation's
    for point in evaluated.values():
        assert 0 <= point["accuracy"] <= 1 and 0 <= point["well_formed"] <= 1 and point["total"] == 8
    summary = json.loads((attempt_dir / "summary.json").read_text())
    curve = summary["evaluation"]["points"]
    assert [(p["step"], p["when"]) for p in curve] == [(0, "before"), (2, "during"), (4, "during"), (6, "after")]
    assert curve[1]["accuracy"] == evaluated[2]["accuracy"]
    assert summary["evaluation"]["best"]["step"] in (0, 2, 4, 6)
    # the evaluations that beat every earlier one (a tie keeps the earlier) kept the model in best-adapter/
    best_so_far, beaten = curve[0]["accuracy"], []
    for step in (2, 4):
        if evaluated[step]["accuracy"] > best_so_far:
            best_so_far, beaten = evaluated[step]["accuracy"], [*beaten, step]
    assert [step for step, point in evaluated.items() if point.get("kept_best")] == beaten
    final, best = summary["evaluation"]["final"], summary["evaluation"]["best"]
    assert (final["step"], final["accuracy"], final["saved_in"]) == (6, curve[3]["accuracy"], "adapter")
    kept = attempt_dir / "best-adapter"
    if final["accuracy"] >= best_so_far:  # the final model is the best: adapter/ holds it, best-adapter/ goes
        assert best["saved_in"] == "adapter" and not kept.exists()
    elif beaten:
        assert best["saved_in"] == "best-adapter" and best["step"] == beaten[-1]
        assert json.loads((kept / "best.json").read_text())["step"] == beaten[-1]
        assert (kept / "adapter_config.json").is_file()  # saved as adapter/ is
    else:  # the model before training: nothing trained is kept beside the final one
        assert best["step"] == 0 and best["saved_in"] is None and not kept.exists()
    assert "evaluation.png" in summary["plots"]
    report = (attempt_dir / "report.md").read_text()
    assert "## Held-out evaluation over the run" in report and "| 4 | during |" in report
    assert "![evaluation](evaluation.png)" in report


def test_a_signal_during_an_evaluation_stops_it_and_saves_the_step(tmp_path, train_env):
    attempt_dir = tmp_path / "attempt-sig"
    process = start_train_py(
        "--profile",
        str(SMALL),
        "--attempt-dir",
        str(attempt_dir),
        "--set",
        "max_steps=50",
        "--set",
        "save_steps=50",
        "--set",
        "eval_steps=2",
        "--set",
        "eval_samples=200",
        "--set",
        "train_samples=64",
        env=train_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for line in process.stdout:  # progress-bound: the line the evaluation prints as it starts
            if line.startswith("evaluating at step 2"):
                break
        process.send_signal(signal.SIGTERM)
        _, stderr = finish(process)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, stderr[-3000:]
    assert "SIGTERM received while evaluating" in stderr
    outcome = json.loads((attempt_dir / "outcome.json").read_text())
    assert outcome["status"] == "interrupted" and outcome["steps"] == 2
    assert outcome["checkpoint"] == "checkpoint-2"  # the step it stopped at is saved, for --resume
    rows = [json.loads(line) for line in (attempt_dir / "metrics.jsonl").read_text().splitlines()]
    assert all("eval" not in r for r in rows)  # the stopped evaluation is not recorded as one
    assert not (attempt_dir / "summary.json").exists()  # stopped as the final evaluation stops: no report


def test_a_sleeping_engine_is_woken_for_the_evaluation_and_put_back_to_sleep(monkeypatch):
    from evaluation.generate import _awake

    calls = []

    class Engine:
        class llm_engine:  # noqa: N801 - vLLM's attribute name
            @staticmethod
            def is_sleeping():
                return True

        def wake_up(self):
            calls.append("wake_up")

        def sleep(self, level):
            calls.append(f"sleep {level}")

    monkeypatch.delenv("VLLM_SLEEP_MODE", raising=False)
    with _awake(Engine()):
        calls.append("generate")
    assert calls == ["wake_up", "generate", "sleep 1"]
    with _awake(None):  # no engine (transformers): nothing to wake
        pass
