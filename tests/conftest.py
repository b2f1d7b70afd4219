"""Shared fixtures."""

from __future__ import annotations

import gc
import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support import tiny_models

REPO = Path(__file__).resolve().parents[1]
# GSM8K lies next to the repository (../shared/data/gsm8k); it is never copied into it.
GSM8K_DIR = REPO.parent / "shared" / "data" / "gsm8k"


@pytest.fixture(scope="session")
def gsm8k_dir() -> Path:
    """The folder holding GSM8K's train.jsonl and test.jsonl; the test is skipped when it is absent."""
    if not all((GSM8K_DIR / f"{split}.jsonl").is_file() for split in ("train", "test")):
        pytest.skip("GSM8K data not found at ../shared/data/gsm8k (train.jsonl, test.jsonl) next to the repository")
    return GSM8K_DIR


@pytest.fixture
def small_disk(tmp_path):
    """A folder on its own 1 MiB tmpfs, to fill up (needs the right to mount: skipped where it is refused)."""
    import shutil
    import subprocess

    folder = tmp_path / "disk"
    folder.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no `mount` command: cannot make a small disk")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({done.stderr.strip() or done.returncode})")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


# What starts the project's command line in a child process: train.py itself, the console script, and the
# stand-ins for a machine of several (tests/support/fake_machine.py)
_STARTS_TRAIN_PY = ("train.py", "grpo-train", "fake_machine.py")


_RUNNER = Path(__file__).resolve().parent / "support" / "cli.py"


def _starts(argv: list[str], names: tuple[str, ...]) -> bool:
    """Whether `argv` starts one of `names` (not a `python -c CODE ... train.py` stand-in that only bears the name)."""
    for part in argv:
        if part == "-c":
            return False
        if Path(part).name in names:
            return True
    return False


def _from_the_runner() -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename == str(_RUNNER):
            return True
        frame = frame.f_back
    return False


_running: list = []  # the test being run (its module fixtures set up inside it): what the guard below names


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _running.append(item)
    try:
        yield
    finally:
        _running.pop()


def _guard_train_py() -> None:
    """train.py starts through tests/support/cli.py, the one runner, so that what every such test runs is set in
    one place and the collection can see which tests start it (one not yet timed counts as slow: slow_tests). A
    test that starts it unseen, or by itself, fails at once, naming the fix. Set for the whole session, not per
    test, so that what a module- or session-scoped fixture starts is checked too, against the test it runs in."""
    original = subprocess.Popen.__init__

    def checked(self, args, *rest, **kwargs):
        argv = [str(part) for part in (args if isinstance(args, (list, tuple)) else [args])]
        node = _running[-1] if _running else None
        if node is not None and _starts(argv, _STARTS_TRAIN_PY):
            seen = node.nodeid in _TIMED or any(node.get_closest_marker(name) for name in ("slow", "heavy"))
            if not seen:
                raise AssertionError(
                    f"{node.nodeid} starts {' '.join(argv[:3])} where the collection did not see it, and "
                    "tests/durations.json has no time for it: call tests/support/cli.py's train_py or "
                    "start_train_py from the test, a fixture of it or a helper under tests/ (it then counts as "
                    "slow until `make durations` times it)"
                )
            if _starts(argv, ("train.py",)) and not _from_the_runner():
                raise AssertionError(
                    f"{node.nodeid} starts train.py by itself: start it through tests/support/cli.py "
                    "(train_py, or start_train_py for a process the test stops)"
                )
        original(self, args, *rest, **kwargs)

    subprocess.Popen.__init__ = checked  # type: ignore[method-assign]


@pytest.fixture(autouse=True)
def own_ledger(tmp_path, monkeypatch):
    """Each test measures into a ledger of its own: an injected OOM in one test never reaches the plan of
    another, nor the ledger of the machine the tests run on."""
    monkeypatch.setenv("GRPO_TRAIN_LEDGER", str(tmp_path / "ledger.jsonl"))


@pytest.fixture(scope="session")
def tiny_seed() -> int:
    """The seed of the CPU profiles, which is also the seed their tiny model is built with."""
    return tiny_models.cpu_seed()


@pytest.fixture(scope="session")
def tiny_cache(tiny_seed) -> Path:
    """A model cache (GRPO_TRAIN_CACHE) shared by the CPU runs, holding the CPU profiles' tiny model, warm start
    included, built here (or found: `make test` builds it before the suite, and an earlier test run leaves it) so
    that no run pays for the build inside its own time limit. `READY_MARK` is touched when it is ready: a folder
    newer than the mark was built by a run."""
    root = tiny_models.TEST_MODEL_CACHE
    assert tiny_models.build_base(tiny_seed).parent == root
    return root


@pytest.fixture(scope="session")
def tiny_tools_model(tiny_cache, tiny_seed) -> Path:
    """The CPU profiles' tiny model with the tool-call markup and its tool-using warm start
    (tiny_model.tool_variant), built in the same cache, as tiny_cache builds its model."""
    return tiny_models.build_under_lock(tiny_models.TOOLS, tiny_seed, tiny_cache, tiny_models.TOOLS_LOCK)


# `make durations` sets this: the suite's run writes tests/durations.json, which orders the next runs
ENV_WRITE_DURATIONS = "GRPO_TEST_WRITE_DURATIONS"


def pytest_configure(config):
    config.pluginmanager.register(_Dealer(), "grpo-train-dealer")
    _guard_train_py()
    # Collection imports torch, PEFT and every test module; the collector, run as they grow, walked them again and
    # again (a fifth of a worker's collection). Off while they import, then frozen (pytest_collection_finish), in a
    # process that collects: an xdist worker, or pytest alone (xdist's controller collects nothing)
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        gc.disable()


def pytest_collection_finish(session):
    gc.freeze()  # what collection imported lives to the end of the session: later collections skip it
    gc.enable()


# Which tests are slow (`make test-fast` leaves them out): those that cost SLOW_S or more as tests/durations.json
# last timed them. 3 s lies between what a test that starts train.py for a command costs (0.1-3 s on the suite's
# 2 busy cores: the planner, a refusal) and what one costs whose child imports the training libraries (3.5 s and
# up; the quickest that trains, three GRPO steps, 4 s).
SLOW_S = 3.0
# tests/support/cli.py's functions that start train.py: a test that reaches one (itself, through a fixture or a
# helper under tests/) starts it
RUNNER_FUNCTIONS = frozenset({"train_py", "start_train_py", "train_py_argv"})
# The session's tiny models: a test that needs one loads, and may train, a model
MODEL_FIXTURES = frozenset({"tiny_cache", "tiny_tools_model"})
# A fixture whose first use in a clone trains a model (the tool-calling variant's warm start, minutes): a cost
# tests/durations.json never holds (it was timed with the model built), so its tests are slow whatever they took
TRAINS_ON_FIRST_USE = frozenset({"tiny_tools_model"})
# tests/support/once.py's function: work several tests share, done by the first of them to ask in a run
SHARED_ONCE = "once_per_run"
TESTS = Path(__file__).resolve().parent
_TIMED: set[str] = set()  # the collected tests tests/durations.json has a time for (read by the guard above)


def _code_objects(code):
    yield code
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            yield from _code_objects(const)


def _names_train_py(value) -> bool:
    """Whether `value` is (or is an argv holding) the path of what starts train.py, as a fake machine's driver."""
    if isinstance(value, (list, tuple)):
        return any(_names_train_py(part) for part in value)
    return isinstance(value, (str, os.PathLike)) and Path(value).name in _STARTS_TRAIN_PY


def reaches(function, hit, seen: set | None = None) -> bool:
    """Whether `function`, or a function under tests/ that it names (followed through the globals it reads), reads
    a name for which hit(name, the global's value) holds: what a test or fixture that calls that function does."""
    function = getattr(inspect.unwrap(function), "__func__", function)
    code = getattr(function, "__code__", None)
    seen = set() if seen is None else seen
    # this file names train.py only to watch for it
    if code is None or code in seen or not code.co_filename.startswith(str(TESTS)) or code.co_filename == __file__:
        return False
    seen.add(code)
    namespace = getattr(function, "__globals__", {})
    for part in _code_objects(code):
        for name in part.co_names:
            value = namespace.get(name)
            if hit(name, value) or (inspect.isfunction(value) and reaches(value, hit, seen)):
                return True
    return False


def _starts_train_py(name: str, value) -> bool:
    """A name of RUNNER_FUNCTIONS, or a global holding the path of what starts train.py (a fake machine's argv)."""
    return name in RUNNER_FUNCTIONS or _names_train_py(value)


def _shares_once(name: str, value) -> bool:
    return name == SHARED_ONCE


def _functions(item) -> list:
    """The test's function and those of every fixture it needs, directly or through another."""
    info = getattr(item, "_fixtureinfo", None)
    fixtures = [defs[-1].func for defs in info.name2fixturedefs.values() if defs] if info is not None else []
    return [function for function in [getattr(item, "function", None), *fixtures] if function is not None]


def heavy(item) -> bool:
    """Whether `item` starts train.py or needs a tiny model, by its code and its fixtures' (not by running it)."""
    if MODEL_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    return any(reaches(function, _starts_train_py) for function in _functions(item))


def cost_group(item, unit_of) -> str:
    """The tests whose cost falls on whichever of them runs first: those sharing a module- or class-scoped fixture
    (unit_of), and those of a module that share work through SHARED_ONCE (done once per run, by the first to ask)."""
    if any(reaches(function, _shares_once) for function in _functions(item)):
        return item.nodeid.split("::")[0] + "::" + SHARED_ONCE
    return unit_of(item)


def slow_tests(items, durations: dict[str, float], group_of, is_heavy) -> set[str]:
    """The ids of `items` that are slow: every test of a cost group (group_of: the tests whose shared cost falls on
    the first of them to run) where one took SLOW_S or more; a heavy test not yet timed (its cost unknown, it
    could train a model); and a test that needs a fixture of TRAINS_ON_FIRST_USE."""
    slow: set[str] = set()
    groups: dict = {}
    for item in items:
        groups.setdefault(group_of(item), []).append(item)
    for unit in groups.values():
        if any(durations.get(item.nodeid, 0.0) >= SLOW_S for item in unit):
            slow.update(item.nodeid for item in unit)
    for item in items:
        if TRAINS_ON_FIRST_USE & set(getattr(item, "fixturenames", ())):
            slow.add(item.nodeid)
        elif item.nodeid not in durations and is_heavy(item):
            slow.add(item.nodeid)
    return slow


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Marks the slow tests (slow_tests) before `-m "not slow"` deselects, and the heavy ones, whose times
    `make durations` keeps (a heavy test without one counts as slow)."""
    from support.schedule import read_durations, unit_of

    durations = read_durations()
    heavy_ids = {item.nodeid for item in items if heavy(item)}
    _TIMED.update(item.nodeid for item in items if item.nodeid in durations)
    slow = slow_tests(items, durations, lambda item: cost_group(item, unit_of), lambda item: item.nodeid in heavy_ids)
    for item in items:
        if item.nodeid in heavy_ids:
            item.add_marker(pytest.mark.heavy)
        if item.nodeid in slow:
            item.add_marker(pytest.mark.slow)


class _Dealer:
    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config, items):
        """The costly tests first, spread over the workers (tests/support/schedule.py): each worker of `pytest -n`
        starts on its share of the long runs while the quick tests are still there to fill the gaps, instead of
        one worker finishing a long run alone at the end (on 2 cores, minutes). Last, so that only the tests left
        after `-m` are dealt (worksteal slices what is left)."""
        from support.schedule import deal, read_durations

        deal(config, items, read_durations())


_took: dict[str, float] = {}
_kept: set[str] = set()
_skipped: set[str] = set()


def pytest_runtest_logreport(report):
    if os.environ.get(ENV_WRITE_DURATIONS):
        _took[report.nodeid] = _took.get(report.nodeid, 0.0) + report.duration
        if "slow" in report.keywords or "heavy" in report.keywords:
            _kept.add(report.nodeid)
        if report.skipped:
            _skipped.add(report.nodeid)


def pytest_sessionfinish(session, exitstatus):
    # on the controller only (a worker has workerinput), which sees every worker's reports
    if os.environ.get(ENV_WRITE_DURATIONS) and not hasattr(session.config, "workerinput") and _took:
        from support.schedule import KEPT_S, write_durations

        # a test that skipped here says nothing of what it costs where it runs: its entry stays as it was
        timed = {test: took for test, took in _took.items() if test not in _skipped}
        kept = write_durations(timed, _kept - _skipped)
        print(
            f"\ntests/durations.json: {len(timed)} tests timed (those of {KEPT_S:g} s or more, the slow and the heavy "
            f"kept; {len(_skipped)} skipped left as they were); {kept} entries in all"
        )
