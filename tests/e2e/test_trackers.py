"""Trackers: `report_to: tensorboard` writes event files into the attempt folder, offline, and they read back
with TensorBoard's own reader (the training reward per step, the evaluation during training)."""

from __future__ import annotations

import pytest

from support.cli import REPO, cpu_run_env, train_py

SMALL = REPO / "profiles" / "cpu-tiny-4gen.yaml"


def test_tensorboard_event_files_in_the_attempt_folder_read_back(tmp_path, tiny_cache):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    env = cpu_run_env(tiny_cache, WANDB_MODE="offline", HF_HUB_OFFLINE="1")
    env.pop("TENSORBOARD_LOGGING_DIR", None)
    attempt_dir = tmp_path / "attempt-01-cpu-tiny-4gen"
    result = train_py(
        "--profile",
        str(SMALL),
        "--attempt-dir",
        str(attempt_dir),
        "--set",
        "report_to=tensorboard",
        "--set",
        "max_steps=4",
        "--set",
        "save_steps=4",
        "--set",
        "eval_steps=2",
        "--set",
        "eval_samples=4",
        "--set",
        "train_samples=64",
        env=env,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    board = attempt_dir / "tensorboard"
    assert list(board.glob("events.out.tfevents.*")), list(attempt_dir.iterdir())
    events = EventAccumulator(str(board))
    events.Reload()
    scalars = events.Tags()["scalars"]
    assert [e.step for e in events.Scalars("train/reward")] == [1, 2, 3, 4]
    assert "train/loss" in scalars and "train/rewards/accuracy/mean" in scalars
    evaluated = events.Scalars("eval/accuracy")
    assert [e.step for e in evaluated] == [2] and 0.0 <= evaluated[0].value <= 1.0
    assert [e.step for e in events.Scalars("eval/well_formed")] == [2]
