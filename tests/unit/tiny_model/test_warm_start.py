"""Does the tiny model's warm start stop on its measured criterion, read the right thing, and build the same
weights whatever the machine's thread count?"""

from __future__ import annotations

import pytest

from tasks import load_task
from tiny_model import build as tiny
from tiny_model import warm_start


def test_restates_reads_the_problems_numbers_not_the_result():
    row = {"answer_text": "7 + 5 = <<7+5=12>>12.\n#### 12", "answer": "12"}
    assert warm_start.restates("<reasoning>\n7 + 5 = 12.\n</reasoning>\n<answer>\n12\n</answer>", row)
    assert warm_start.restates("<reasoning>\n7 + 5 = 13.\n</reasoning>\n<answer>\n13\n</answer>", row)
    assert not warm_start.restates("<reasoning>\n7 + 6 = 13.\n</reasoning>\n<answer>\n13\n</answer>", row)
    assert not warm_start.restates("<reasoning>\n7 - 5 = 2.\n</reasoning>", row)
    assert not warm_start.restates("<reasoning>\n17 + 5 = 22.\n</reasoning>", row)
    assert not warm_start.restates("7 + 5 = 12", row)  # no reasoning block


def test_check_rows_are_their_own_stream_and_never_held_out():
    rows = warm_start.check_rows(warm_start.CHECK_ROWS)
    held_out = {row["prompt"][-1]["content"] for row in load_task("arithmetic", "test")}
    assert len(rows) == warm_start.CHECK_ROWS
    assert not held_out & {row["prompt"][-1]["content"] for row in rows}
    assert all(row["prompt"][-1]["content"] == row["question"] and row["answer_text"] for row in rows)


@pytest.fixture(scope="module")
def tiny_parts():
    """A tokenizer and a freshly initialised tiny model (no warm start), as the build makes them."""
    shape = tiny.tiny_shape()
    tokenizer = tiny._build_tokenizer(tiny._corpus("arithmetic", 0), shape)
    return tokenizer, shape


def _scripted(monkeypatch, readings):
    """The criterion's readings, one per check, instead of generating answers."""
    calls = []

    def check(model, tokenizer, rows, tokens=48):
        calls.append(len(rows))
        restated, accuracy = readings[len(calls) - 1]
        return {"restated": restated, "accuracy": accuracy}

    monkeypatch.setattr(warm_start, "check", check)
    return calls


def _short(monkeypatch, max_steps=8):
    monkeypatch.setattr(warm_start, "WARM_START_MIN_STEPS", 2)
    monkeypatch.setattr(warm_start, "WARM_START_CHECK_EVERY", 1)
    monkeypatch.setattr(warm_start, "WARM_START_MAX_STEPS", max_steps)
    monkeypatch.setattr(warm_start, "CHECK_ROWS", 4)
    monkeypatch.setattr(warm_start, "WARM_START_BATCH", 4)


def test_warm_start_stops_once_the_numbers_are_read_and_the_sums_still_weak(monkeypatch, tiny_parts):
    tokenizer, shape = tiny_parts
    _short(monkeypatch)
    readings = [(0.5, 0.45), (0.99, 0.7), (0.97, 0.2), (0.96, 0.45), (0.9, 0.45), (0.96, 0.41), (0.99, 0.5), (0.2, 0.2)]
    calls = _scripted(monkeypatch, readings)
    monkeypatch.setattr(warm_start, "WARM_START_MAX_STEPS", 10)
    done = warm_start.train_warm_start(tiny._build_model(tokenizer, shape, 0), tokenizer, seed=0)
    # checks at steps 2..8: numbers misread; read, sums too strong; read, sums too weak; both met once, then the
    # numbers misread (the count starts over); both met at steps 7 and 8 in a row
    assert done["stopped"] == "criterion" and done["steps"] == 8
    assert [c["step"] for c in done["checks"]] == [2, 3, 4, 5, 6, 7, 8] and calls == [4] * 7


def test_the_long_variant_stops_at_its_first_check_inside_the_band(monkeypatch, tiny_parts):
    # the readings that keep the default going to step 8 stop the long variant at step 5, the first check in the band
    tokenizer, shape = tiny_parts
    _short(monkeypatch)
    readings = [(0.5, 0.45), (0.99, 0.7), (0.97, 0.2), (0.96, 0.45), (0.9, 0.45), (0.96, 0.41), (0.99, 0.5), (0.2, 0.2)]
    calls = _scripted(monkeypatch, readings)
    model = tiny._build_model(tokenizer, shape, 0)
    done = warm_start.train_warm_start(model, tokenizer, seed=0, long_answers=True)
    assert done["stopped"] == "criterion" and done["steps"] == 5 and calls == [4] * 4


def test_the_long_variants_stop_is_part_of_its_build_only(monkeypatch):
    shape = tiny.tiny_shape()
    plain, long = tiny.build_key("arithmetic", 0, shape), tiny.build_key("arithmetic", 0, shape, long_answers=True)
    monkeypatch.setattr(warm_start, "LONG_BAND_CHECKS", 2)
    assert tiny.build_key("arithmetic", 0, shape) == plain
    assert tiny.build_key("arithmetic", 0, shape, long_answers=True) != long


def test_at_its_limit_the_warm_start_keeps_the_reading_state_nearest_the_band(monkeypatch, tiny_parts):
    import torch

    tokenizer, shape = tiny_parts
    _short(monkeypatch, max_steps=5)
    kept = {}
    readings = iter([(0.1, 0.45), (0.99, 0.8), (0.97, 0.55), (0.98, 0.45)])

    def check(model, tokenizer, rows, tokens=48):
        reading = dict(zip(("restated", "accuracy"), next(readings)))
        kept[reading["accuracy"]] = {k: v.clone() for k, v in model.state_dict().items()}
        return reading

    monkeypatch.setattr(warm_start, "check", check)
    model = tiny._build_model(tokenizer, shape, 0)
    done = warm_start.train_warm_start(model, tokenizer, seed=0)
    assert done["stopped"] == "max_steps" and done["steps"] == 5 and len(done["checks"]) == 4
    # one check inside the band (step 5) is not two in a row; step 5's weights are nearest the band
    assert all(torch.equal(v, kept[0.45][k]) for k, v in model.state_dict().items())


def test_without_a_reading_state_the_warm_start_ends_at_its_limit(monkeypatch, tiny_parts):
    tokenizer, shape = tiny_parts
    _short(monkeypatch, max_steps=4)
    _scripted(monkeypatch, [(0.1, 0.0), (0.5, 0.1), (0.9, 0.2)])
    done = warm_start.train_warm_start(tiny._build_model(tokenizer, shape, 0), tokenizer, seed=0)
    assert done == {"steps": 4, "stopped": "max_steps", "checks": done["checks"]} and len(done["checks"]) == 3


def test_a_fixed_step_count_skips_the_criterion(monkeypatch, tiny_parts):
    tokenizer, shape = tiny_parts
    _short(monkeypatch)
    calls = _scripted(monkeypatch, [])
    done = warm_start.train_warm_start(tiny._build_model(tokenizer, shape, 0), tokenizer, seed=0, steps=3)
    assert done == {"steps": 3, "stopped": "fixed", "checks": []} and calls == []


def test_criterion_settings_are_part_of_the_cached_build(monkeypatch):
    shape = tiny.tiny_shape()
    key = tiny.build_key("arithmetic", 0, shape)
    for name, value in (
        ("RESTATE_TARGET", 0.9),
        ("ACCURACY_BAND", (0.3, 0.5)),
        ("BAND_CHECKS", 1),
        ("WARM_START_MIN_STEPS", 1),
        ("CHECK_ROWS", 7),
        ("WARM_START_THREADS", 2),
    ):
        with monkeypatch.context() as patch:
            patch.setattr(warm_start, name, value)
            assert tiny.build_key("arithmetic", 0, shape) != key, name
    assert tiny.build_key("arithmetic", 0, shape) == key


def test_the_build_is_the_same_whatever_the_callers_thread_count(monkeypatch, tmp_path):
    """The criterion decides where the warm start stops: summed in another order, one greedy answer could
    flip, the stop move, and every later GRPO run with it. The build runs on one thread to rule that out."""
    import torch
    from safetensors.torch import load_file

    _short(monkeypatch, max_steps=6)
    monkeypatch.setattr(warm_start, "HELDOUT_ROWS", 8)
    threads = torch.get_num_threads()
    builds = []
    try:
        for count, name in ((1, "one"), (2, "two")):
            torch.set_num_threads(count)
            builds.append(tiny.ensure_tiny("arithmetic", seed=5, root=tmp_path / name))
    finally:
        torch.set_num_threads(threads)
    first, second = (load_file(path / "model.safetensors") for path in builds)
    assert all(torch.equal(first[k], second[k]) for k in first)
    one, two = (tiny.read_warm_start(path) for path in builds)
    assert one["checks"] == two["checks"] and one["steps"] == two["steps"]
    assert one["stopped"] in ("criterion", "max_steps") and len(one["checks"]) >= 1
    assert torch.get_num_threads() == threads  # the caller's setting is given back


def _stepping(model, count: int):
    """steps as seeded_steps yields them, each setting the weight to its step number (the state a check reads)."""
    import torch

    for step in range(1, count + 1):
        model.train()
        with torch.no_grad():
            model.weight.fill_(float(step))
        yield step, torch.tensor(0.0)


def test_past_the_band_the_programs_stop_keeps_the_nearest_state_that_read():
    import torch

    model = torch.nn.Linear(1, 1, bias=False)
    readings = iter([(0.95, 0.3), (0.95, 0.45), (0.95, 0.8), (0.95, 0.45)])
    band = warm_start.Band(first=2, every=1, target=0.9, band=(0.5, 0.7), in_a_row=1, past_stops=True)
    done = warm_start.train_to_band(
        model, _stepping(model, 9), lambda m: dict(zip(("restated", "accuracy"), next(readings))), band
    )
    # step 4 reads above the band: the pass ends there, with step 3's weights (0.45, nearest the band)
    assert done["stopped"] == "max_steps" and done["steps"] == 3 and [c["step"] for c in done["checks"]] == [2, 3, 4]
    assert float(model.weight) == 3.0 and not model.training


def test_without_past_stops_a_reading_above_the_band_goes_on():
    import torch

    model = torch.nn.Linear(1, 1, bias=False)
    readings = iter([(0.95, 0.8), (0.95, 0.6)])
    band = warm_start.Band(first=1, every=1, target=0.9, band=(0.5, 0.7), in_a_row=1)
    done = warm_start.train_to_band(
        model, _stepping(model, 5), lambda m: dict(zip(("restated", "accuracy"), next(readings))), band
    )
    assert done == {"steps": 2, "stopped": "criterion", "checks": done["checks"]} and float(model.weight) == 2.0
