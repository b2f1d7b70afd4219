"""Which tests are slow (tests/conftest.py): by what tests/durations.json says they cost, their shared fixtures'
cost counted for each test that shares it, and, for a test not yet timed, by whether it starts train.py or needs a
tiny model, read from its code."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest

from conftest import SLOW_S, TRAINS_ON_FIRST_USE, reaches, slow_tests
from support.cli import REPO, train_py

FAKE_DRIVER = [sys.executable, str(REPO / "tests" / "support" / "fake_machine.py")]


def item(nodeid: str, *fixtures: str):
    return types.SimpleNamespace(nodeid=nodeid, fixturenames=list(fixtures))


def by_module(test) -> str:
    return test.nodeid.split("::")[0]


def test_a_shared_cost_makes_every_test_that_shares_it_slow():
    tests = [item("m.py::first"), item("m.py::second"), item("n.py::alone"), item("o.py::quick")]
    durations = {"m.py::first": SLOW_S, "m.py::second": 0.0, "n.py::alone": SLOW_S - 0.1, "o.py::quick": 0.1}
    assert slow_tests(tests, durations, by_module, lambda test: False) == {"m.py::first", "m.py::second"}


def test_a_heavy_test_is_slow_until_timed_then_by_its_time():
    tests = [item("a.py::new"), item("b.py::timed_quick"), item("c.py::light_new")]
    heavy = {"a.py::new", "b.py::timed_quick"}
    slow = slow_tests(tests, {"b.py::timed_quick": 0.4}, by_module, lambda test: test.nodeid in heavy)
    assert slow == {"a.py::new"}  # a light test not yet timed is taken as quick


def test_a_fixture_that_trains_on_its_first_use_makes_its_tests_slow_however_quick():
    (name,) = TRAINS_ON_FIRST_USE
    tests = [item("t.py::uses_it", name), item("t.py::does_not")]
    durations = {"t.py::uses_it": 0.1, "t.py::does_not": 0.1}
    assert slow_tests(tests, durations, lambda test: test.nodeid, lambda test: True) == {"t.py::uses_it"}


def _helper_that_runs_the_cli():
    return train_py("--help")


def _test_through_a_helper():
    _helper_that_runs_the_cli()


def _test_of_a_fake_machine():
    return [*FAKE_DRIVER, "--help"]  # the argv it would start: reading the global is what counts


def _test_that_only_reads():
    return REPO.name


def starts(name: str, value) -> bool:
    from conftest import _starts_train_py

    return _starts_train_py(name, value)


def test_starting_train_py_is_read_from_the_code_through_helpers_and_argv_globals():
    # taken by name, so that this test does not itself read as one that starts train.py
    sample = globals()
    assert reaches(sample["_test_through_a_helper"], starts)
    assert reaches(sample["_test_of_a_fake_machine"], starts)
    assert not reaches(sample["_test_that_only_reads"], starts)


def test_a_test_the_collection_did_not_see_start_train_py_is_stopped_before_it_starts():
    # this test names no runner and has no time in tests/durations.json: the collection took it as light
    argv = [sys.executable, str(REPO / "train.py"), "--help"]
    with pytest.raises(AssertionError, match="where the collection did not see it"):
        subprocess.Popen(argv)
