"""The order tests/conftest.py hands the tests to pytest-xdist's workers in (tests/support/schedule.py)."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest

from support.schedule import (
    UNKNOWN_SLOW_S,
    gone_from_its_file,
    group_units,
    order,
    read_durations,
    slice_sizes,
    write_durations,
)
from support.waiting import run_to_end


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


def test_a_run_of_part_of_the_suite_updates_that_part_only(tmp_path):
    path = tmp_path / "durations.json"
    write_durations({"a": 5.0, "b": 7.0, "c": 3.0}, set(), path)
    kept = write_durations({"a": 6.04, "c": 0.1}, set(), path)  # `a` again, `c` now quick, `b` not run
    assert kept == 2 and read_durations(path) == {"a": 6.0, "b": 7.0}


@pytest.mark.parametrize("text", ["", "not json", "[1, 2]", '{"a": "x", "b": -1}'])
def test_an_unreadable_durations_file_orders_by_the_slow_mark_alone(tmp_path, text):
    path = tmp_path / "durations.json"
    path.write_text(text)
    assert read_durations(path) == {}
    assert read_durations(tmp_path / "missing.json") == {}


def test_an_entry_whose_test_function_is_gone_leaves_at_the_next_write(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text("def test_kept():\n    pass\n")
    assert not gone_from_its_file("tests/test_x.py::test_kept[case]", tmp_path)
    assert gone_from_its_file("tests/test_x.py::test_removed", tmp_path)
    assert gone_from_its_file("tests/test_gone.py::test_kept", tmp_path)
    assert not gone_from_its_file("not a node id", tmp_path)
    path = tmp_path / "durations.json"
    path.write_text('{"tests/unit/test_schedule.py::test_removed_long_ago": 9.0, "b": 7.0}')
    assert write_durations({"a": 6.0}, set(), path) == 2 and read_durations(path) == {"a": 6.0, "b": 7.0}


def test_the_committed_durations_name_tests_that_exist_and_unknown_slow_ones_count_among_the_costly():
    from support.schedule import COSTLY_S, DURATIONS

    data = json.loads(DURATIONS.read_text(encoding="utf-8"))
    assert data and all(key.startswith("tests/") and "::" in key for key in data)
    assert [key for key in data if gone_from_its_file(key)] == []
    assert UNKNOWN_SLOW_S >= COSTLY_S


_CONFTEST = """
import json, os
from pathlib import Path
from support.schedule import deal

def pytest_collection_modifyitems(config, items):
    deal(config, items, json.loads(Path(os.environ["SCHEDULE_DURATIONS"]).read_text()))
"""

_TESTS = """
import os, pytest
from pathlib import Path

@pytest.mark.parametrize("name", [f"long{i}" for i in range(4)] + [f"quick{i}" for i in range(20)])
def test_case(name):
    with open(Path(os.environ["SCHEDULE_LOG"]) / os.environ["PYTEST_XDIST_WORKER"], "a") as log:
        log.write(name + "\\n")
"""


def test_under_xdist_each_worker_starts_on_its_share_of_the_long_tests(tmp_path):
    """A real `pytest -n 2 --dist worksteal` run: each worker's first test is one of the long ones, so that
    neither ends up running them all (the dealing needs to know it runs on a worker, which xdist tells only
    through config.workerinput)."""
    import os
    import sys

    (tmp_path / "conftest.py").write_text(_CONFTEST)
    (tmp_path / "test_cases.py").write_text(_TESTS)
    costs = {f"test_cases.py::test_case[long{i}]": 50.0 - i for i in range(4)}
    (tmp_path / "durations.json").write_text(json.dumps(costs))
    log = tmp_path / "log"
    log.mkdir()
    tests_dir = str(Path(__file__).resolve().parents[1])
    env = dict(
        os.environ,
        SCHEDULE_DURATIONS=str(tmp_path / "durations.json"),
        SCHEDULE_LOG=str(log),
        PYTHONPATH=os.pathsep.join([tests_dir, os.environ.get("PYTHONPATH", "")]),
    )
    done = run_to_end(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist", "worksteal", "-c",
         os.devnull, "--rootdir", str(tmp_path), str(tmp_path)],
        cwd=tmp_path, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    ran = {path.name: path.read_text().split() for path in log.iterdir()}
    assert sorted(ran) == ["gw0", "gw1"] and sum(map(len, ran.values())) == 24
    assert sorted(names[0] for names in ran.values()) == ["long0", "long1"]  # one long test each, first
