"""mask_truncated_completions with a cap every completion reaches leaves every completion out of the loss: the
loss is 0 and nothing trains. After a few such steps the attempt stops, refusing its input (exit 2 for the
run), naming the keys and the fix, instead of ending "ok" with nothing learned."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from contract.errors import UsageError
from trainer.callbacks import ALL_CUT_STEPS, TelemetryCallback


class Memory:
    def sample(self):
        return None


def telemetry(tmp_path, masks: bool) -> TelemetryCallback:
    callback = TelemetryCallback(tmp_path / "metrics.jsonl", ["accuracy"], Memory(), cap=256, masks_cut=masks)
    callback.on_train_begin(None, None, None)
    return callback


def log(callback, step: int, clipped: float) -> None:
    logs = {"loss": 0.0, "reward": 0.1, "completions/clipped_ratio": clipped}
    callback.on_log(None, SimpleNamespace(global_step=step, max_steps=50), None, logs=logs)


def test_every_completion_cut_and_masked_stops_the_attempt(tmp_path):
    callback = telemetry(tmp_path, masks=True)
    for step in range(1, ALL_CUT_STEPS):
        log(callback, step, 1.0)
    with pytest.raises(UsageError) as info:
        log(callback, ALL_CUT_STEPS, 1.0)
    text = str(info.value)
    assert "mask_truncated_completions" in text and "max_completion_length 256" in text and "fix:" in text


def test_some_completions_within_the_cap_train_on(tmp_path):
    callback = telemetry(tmp_path, masks=True)
    for step in range(1, 3 * ALL_CUT_STEPS):
        log(callback, step, 1.0 if step % ALL_CUT_STEPS else 0.75)


def test_without_masking_cut_completions_still_train(tmp_path):
    callback = telemetry(tmp_path, masks=False)
    for step in range(1, 3 * ALL_CUT_STEPS):
        log(callback, step, 1.0)
