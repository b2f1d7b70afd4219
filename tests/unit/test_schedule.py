"""The order tests/conftest.py hands the tests to pytest-xdist's workers in (tests/support/schedule.py)."""

from __future__ import annotations

import json
import types

import pytest

from support.schedule import UNKNOWN_SLOW_S, group_units, order, read_durations, slice_sizes, write_durations


class _Node:
    """A worker as xdist's scheduler sees it: what it was sent is all the test needs."""

    shutting_down = False

    def __init__(self, name: str):
        self.gateway = types.SimpleNamespace(id=name)
        self.sent: list[int] = []

    def send_runtest_some(self, indices):
        self.sent.extend(indices)

    def send_steal(self, indices):  # asked of a worker with a long queue once another has too few
        pass

    def shutdown(self):  # a worker with too few left and nothing to steal
        pass


@pytest.mark.parametrize("count, workers", [(2004, 3), (10, 3), (7, 2), (5, 4), (3, 3)])
def test_the_slices_are_those_xdists_worksteal_sends_first(count, workers):
    from xdist.scheduler.worksteal import WorkStealingScheduling

    # `pytest -n W` reaches the scheduler as W local workers ("W*popen"), the one option it reads
    config = types.SimpleNamespace(getvalue=lambda name: [f"{workers}*popen"] if name == "tx" else None)
    scheduler = WorkStealingScheduling(config)  # type: ignore[arg-type]
    nodes = [_Node(f"gw{i}") for i in range(workers)]
    collection = [f"t{i}" for i in range(count)]
    for node in nodes:
        scheduler.add_node(node)
        scheduler.add_node_collection(node, collection)
    scheduler.schedule()
    assert [len(node.sent) for node in nodes] == slice_sizes(count, workers)
    assert [i for node in nodes for i in node.sent] == list(range(count))  # contiguous, in order


def test_each_slice_starts_with_its_share_of_the_costly_units_longest_first():
    costs = {"a": 100, "b": 90, "c": 50, "d": 40, "e": 5}
    units = [[name] for name in "edcba"] + [[f"q{i}"] for i in range(10)]
    ordered = order(units, lambda t: costs.get(t, 0.0), workers=2)
    first, second = ordered[:7], ordered[7:]
    assert sorted(ordered) == sorted(t for unit in units for t in unit)
    assert first[:3] == ["a", "d", "e"] and second[:2] == ["b", "c"]  # 145 against 140
    assert all(t.startswith("q") for t in first[3:] + second[2:])  # the cheap ones fill each slice's end


def test_a_unit_stays_together_on_one_worker():
    costs = {"m::1": 30, "m::2": 30, "x": 50, "y": 5}
    units = group_units(["m::1", "x", "m::2", "y", "z", "w"], lambda t: t.split("::")[0])
    assert units == [["m::1", "m::2"], ["x"], ["y"], ["z"], ["w"]]
    ordered = order(units, lambda t: costs.get(t, 0.0), workers=2)
    assert ordered[:2] == ["m::1", "m::2"] and ordered[3] == "x"


def test_without_workers_the_costly_go_first_and_the_rest_keep_their_order():
    costs = {"b": 3, "d": 9}
    assert order([["a"], ["b"], ["c"], ["d"]], lambda t: costs.get(t, 0.0), workers=1) == ["d", "b", "a", "c"]


def test_a_unit_bigger_than_any_slices_room_still_runs():
    units = [[f"m{i}" for i in range(8)], ["a"], ["b"]]
    ordered = order(units, lambda t: 1.0, workers=3)
    assert sorted(ordered) == sorted(t for unit in units for t in unit)


def test_durations_keep_the_slow_and_the_long_and_read_back(tmp_path):
    path = tmp_path / "durations.json"
    kept = write_durations({"quick": 0.01, "long": 12.345, "slow-but-quick": 0.2}, {"slow-but-quick"}, path)
    assert kept == 2 and read_durations(path) == {"long": 12.3, "slow-but-quick": 0.2}


@pytest.mark.parametrize("text", ["", "not json", "[1, 2]", '{"a": "x", "b": -1}'])
def test_an_unreadable_durations_file_orders_by_the_slow_mark_alone(tmp_path, text):
    path = tmp_path / "durations.json"
    path.write_text(text)
    assert read_durations(path) == {}
    assert read_durations(tmp_path / "missing.json") == {}


def test_the_committed_durations_name_tests_that_exist_and_unknown_slow_ones_count_among_the_costly():
    from support.schedule import COSTLY_S, DURATIONS

    data = json.loads(DURATIONS.read_text(encoding="utf-8"))
    assert data and all(key.startswith("tests/") and "::" in key for key in data)
    assert UNKNOWN_SLOW_S >= COSTLY_S
