"""Does the CPU default learn? The tiny model's warm start, the report's three points, and (slow) a short
seeded GRPO run whose held-out accuracy must rise well above the warm start's: the learning regression test."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from rewards import for_layout
from support.cli import cpu_run_env, train_py
from tasks import arithmetic, load_task
from tiny_model import build as tiny
from tiny_model import warm_start
from trainer.report import scored_examples, write_report

REPO = Path(__file__).resolve().parents[2]
PROFILE = REPO / "profiles" / "cpu-tiny-8gen.yaml"


def test_worked_solutions_of_the_default_level_score_full_marks():
    rows = arithmetic.generate(200, seed=11)
    texts = [warm_start.worked_completion(row) for row in rows]
    assert "<<" not in "".join(texts)  # GSM8K's calculator notes are not part of the taught answer
    for name, fn in for_layout().items():
        assert fn(texts, answer=[row["answer"] for row in rows]) == [1.0] * len(rows), name


def test_warm_start_problems_never_hold_a_held_out_question():
    held_out = {row["prompt"][-1]["content"] for row in load_task("arithmetic", "test")}
    rows = warm_start.training_rows(seed=3407, count=3000)
    assert len(rows) == 3000
    assert not held_out & {row["question"] for row in rows}
    assert warm_start.training_rows(seed=3407, count=50) == rows[:50]


def test_read_warm_start_is_none_beside_a_model_without_one(tmp_path):
    assert tiny.read_warm_start(tmp_path) is None
    (tmp_path / tiny.WARM_START_FILE).write_text('{"steps": 3}')
    assert tiny.read_warm_start(tmp_path) == {"steps": 3}


def test_report_shows_random_warm_start_and_after_with_scored_samples(tmp_path):
    weights = {"xml_soft": 0.5, "accuracy": 2.0}
    right = "<reasoning>\n4 + 8 = 12.\n</reasoning>\n<answer>\n12\n</answer>"
    wrong = "<reasoning>\n4 + 8 = 13.\n</reasoning>\n<answer>\n13\n</answer>"
    before = scored_examples([{"completion": wrong, "answer": "12"}], weights)
    after = scored_examples([{"completion": right, "answer": "12"}], weights)
    assert before[0]["rewards"] == {"xml_soft": 1.0, "accuracy": 0.0} and before[0]["reward"] == 0.5
    assert after[0]["reward"] == 2.5
    summary = {
        "status": "ok",
        "steps": 10,
        "max_steps": 10,
        "train_seconds": 1.0,
        "wall_seconds": 2.0,
        "profile": {"name": "cpu-tiny-8gen", "model": "tiny", "dataset": "arithmetic"},
        "device": {"name": "CPU"},
        "backend": "transformers",
        "train_rows": 5,
        "dropped_prompts": 0,
        "memory": {"peak_gib": 0.5, "estimate_gib": 0.6, "measure": "RSS", "ratio": 0.8},
        "rewards": {"window": 1, "total": {"first": 1.0, "last": 2.0}},
        "accuracy": {"samples": 200, "before": 0.25, "after": 0.5, "examples_before": before, "examples_after": after},
        "warm_start": {
            "steps": 200,
            "held_out": 200,
            "seconds": 30.0,
            "random_accuracy": 0.0,
            "warm_start_accuracy": 0.25,
            "warm_start_well_formed": 1.0,
        },
    }
    write_report(tmp_path, summary)
    report = (tmp_path / "report.md").read_text()
    assert "random model -> warm start -> after GRPO: 0.000 -> 0.250 -> 0.500" in report
    assert "## Sample answers before training" in report and "reward 0.50" in report
    assert "## Sample answers after training" in report and "reward 2.50" in report
    assert json.loads((tmp_path / "summary.json").read_text())["warm_start"]["random_accuracy"] == 0.0


def test_well_formed_share_counts_full_layouts_only():
    from evaluation.score import well_formed_share

    right = "<reasoning>\n4 + 8 = 12.\n</reasoning>\n<answer>\n12\n</answer>"
    assert well_formed_share([right, right, "12", "<answer>12</answer>"]) == 0.5
    assert well_formed_share([]) is None


# ------------------------------------------------------------------ the learning regression test

SHORT_RUN_STEPS = 75  # the profile's settings, fewer steps: the gain must show well before the profile's end
LEARNING_STEPS = os.environ.get("GRPO_LEARNING_TEST_STEPS", "")  # longer runs by hand, e.g. 300
OTHER_SEED = 2  # not the profile's: where the former fixed warm start left GRPO nothing to learn (+0.5 points)
DEFAULT_GAIN_FLOOR = 0.15  # the bar for the first impression; measured +24 to +26 on three kernels
SHORT_RUN_GAIN_FLOOR = 0.10  # 75 steps at seed 2


def _metrics(attempt_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (attempt_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("which", ["the default", "other seed"])
def test_grpo_raises_held_out_accuracy_well_above_the_warm_start(
    which, tmp_path, tiny_cache, tiny_seed, record_property
):
    """Held-out accuracy (all 500 held-out problems, greedy) after GRPO must beat the warm start by 15 points at
    the default (it gains 24-26 on AVX-512, AVX2 and torch's `default` kernels: docs/cpu-demo.md) and by 10 at the
    shorter other seed.
    "the default": `python train.py train` without a GPU, exactly as a user runs it (the CPU ladder's first
    rung at the profile's seed, its tiny model built once for the session); it also leaves its adapter, report
    and plots, and its sampled answers get right more often and stay well-formed. "other seed": a shorter
    seeded run of the CPU default at another seed, its own tiny model built inside the run."""
    # the CPU default's two threads, unless the caller asks for another count (one on a busy machine)
    env = cpu_run_env(tiny_cache, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2"))
    if which == "the default":
        env["CUDA_VISIBLE_DEVICES"] = ""
        args = ["train", "--output-dir", str(tmp_path / "out")]
        if LEARNING_STEPS:
            args += ["--set", f"max_steps={LEARNING_STEPS}"]
    else:
        steps = int(LEARNING_STEPS or SHORT_RUN_STEPS)
        # evaluated before and after (eval_samples), not during: the curve has its own test
        overrides = [
            f"seed={OTHER_SEED}",
            "eval_samples=500",
            f"max_steps={steps}",
            f"save_steps={steps}",
            "eval_steps=0",
        ]
        args = ["--profile", str(PROFILE), "--output-dir", str(tmp_path / "out")]
        for item in overrides:
            args += ["--set", item]
    started = time.time()
    result = train_py(*args, env=env, timeout=1800)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    attempt_dir = sorted((tmp_path / "out").glob("run-*/attempt-*"))[-1]
    summary = json.loads((attempt_dir / "summary.json").read_text())
    # the time it takes is a benchmark's figure, not a test's (benchmarks/learning_curve.py and the README
    # report it): recorded in the test report, never asserted
    record_property("wall_seconds", round(time.time() - started, 1))
    record_property("train_seconds", summary["train_seconds"])
    accuracy, warm = summary["accuracy"], summary["warm_start"]
    assert accuracy["samples"] == 500
    # "before" is the warm-started policy (batching may flip a near-tie in greedy decoding, no more)
    assert warm["warm_start_accuracy"] == pytest.approx(accuracy["before"], abs=0.02)
    assert warm["random_accuracy"] <= 0.05
    assert warm["restated"] >= 0.95, warm  # the warm start's answers read the problem's numbers
    assert 0.05 <= accuracy["before"] <= 0.6, accuracy  # weak enough to leave GRPO room
    floor = DEFAULT_GAIN_FLOOR if which == "the default" else SHORT_RUN_GAIN_FLOOR
    assert accuracy["after"] >= accuracy["before"] + floor, (which, accuracy["before"], accuracy["after"])
    assert warm["weights"] == "shipped", warm  # the same warm-start bytes on every machine (tiny_model.shipped)
    assert accuracy["well_formed_after"] >= 0.9, accuracy  # greedy held-out answers keep the layout
    assert summary["steps"] == (summary["max_steps"] if which == "the default" else steps)
    if which == "the default":
        assert summary["profile"]["name"] == PROFILE.stem and summary["profile"]["seed"] == tiny_seed
        rows = _metrics(attempt_dir)
        first = sum(r["rewards"]["accuracy"] for r in rows[:20]) / 20
        last = sum(r["rewards"]["accuracy"] for r in rows[-20:]) / 20
        assert last > first + 0.05, (first, last)  # the warm start already writes the format: GRPO learns the sums
        assert sum(r["rewards"]["xml_soft"] for r in rows[-20:]) / 20 >= 0.9
        for name in (
            "adapter/adapter_model.safetensors",
            "report.md",
            "rewards.png",
            "completion_length.png",
            "memory.png",
        ):
            assert (attempt_dir / name).is_file(), name
    signal = summary["group_signal"]  # the run shows what it learned from
    assert signal is not None and 0 <= signal["groups_alike"]["last"] <= 1
