"""The kit's child: what it is asked to time (kit.json), and the plan's shape timed only where the probe's
time allows it, a failure there (an out-of-memory) leaving the probe's other figures standing."""

from __future__ import annotations

import json
import time

import pytest

PLANNED = {
    "profile": "fit-x",
    "sequences": 128,
    "generations": 8,
    "micro_batch": 16,
    "prompt_tokens": 147,
    "wave_tokens": 555,
    "step_tokens": 472,
    "predicted_wave_s": 30.0,
    "predicted_step_s": 10.0,
}


@pytest.fixture
def timers(monkeypatch):
    from measure import child

    calls = []

    def wave(trainer, loaded, lengths, reader, shape=None):
        calls.append(("generation", lengths, shape["sequences"]))
        return [{"seconds": 1.0}]

    def step(trainer, loaded, lengths, reader, shape=None):
        calls.append(("training", lengths, shape["micro_batch"]))
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(child, "timed_waves", wave)
    monkeypatch.setattr(child, "timed_steps", step)
    return calls


def test_the_plans_shape_is_timed_at_its_own_batch_and_lengths_and_a_failure_there_is_reported(timers):
    from measure.child import MemoryReader, timed_planned

    out = timed_planned(None, None, PLANNED, MemoryReader(False), deadline=time.time() + 1000)
    assert timers == [("generation", [555], 128), ("training", [472], 16)]
    assert out["plan"] == PLANNED and out["generation"] == [{"seconds": 1.0}]
    assert out["training_error"].startswith("RuntimeError: CUDA out of memory")


@pytest.mark.parametrize("left_s", [0.0, 100.0, -50.0])
def test_the_plans_shape_is_left_out_where_it_could_cost_the_probe_its_figures(timers, left_s):
    from measure.child import PLANNED_MARGIN, PLANNED_RESERVE_S, MemoryReader, timed_planned

    assert PLANNED_MARGIN * 40.0 > 100.0 - PLANNED_RESERVE_S  # 3 x (30 + 10) s do not fit in 100 s
    out = timed_planned(None, None, PLANNED, MemoryReader(False), deadline=time.time() + left_s)
    assert timers == [] and out["why"].startswith("not timed: 120 s")


def test_what_the_kit_asks_is_read_and_a_file_not_as_it_writes_it_falls_back_to_the_default(tmp_path):
    from measure.child import KIT_FILE, read_kit_file

    assert read_kit_file(tmp_path, (64, 320)) == ((64, 320), None, None)  # no file
    (tmp_path / KIT_FILE).write_text(json.dumps({"lengths": [8, 32], "planned": PLANNED, "deadline": 5.5}))
    assert read_kit_file(tmp_path, (64, 320)) == ((8, 32), PLANNED, 5.5)
    (tmp_path / KIT_FILE).write_text(json.dumps({"lengths": [8], "planned": "all", "deadline": "soon"}))
    assert read_kit_file(tmp_path, (64, 320)) == ((8,), None, None)
    (tmp_path / KIT_FILE).write_text("{not json")
    assert read_kit_file(tmp_path, (64, 320)) == ((64, 320), None, None)
