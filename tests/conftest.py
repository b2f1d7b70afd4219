"""Shared fixtures."""

from __future__ import annotations

import gc
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


@pytest.fixture(autouse=True)
def only_slow_tests_start_train_py(request, monkeypatch):
    """A test that starts train.py (or trains a model through it) is of the slow kind and says so
    (@pytest.mark.slow): `make test-fast` leaves them out, and stays fast only if none hides there. It starts
    train.py through tests/support/cli.py, the one runner, so that what every such test runs is set in one place.
    A test that breaks either rule fails at once, naming the fix."""
    slow = request.node.get_closest_marker("slow") is not None
    original = subprocess.Popen.__init__

    def checked(self, args, *rest, **kwargs):
        argv = [str(part) for part in (args if isinstance(args, (list, tuple)) else [args])]
        if not slow and _starts(argv, _STARTS_TRAIN_PY):
            raise AssertionError(
                f"{request.node.nodeid} starts {' '.join(argv[:3])}: a test that starts train.py is marked "
                "@pytest.mark.slow (and starts it through tests/support/cli.py)"
            )
        if _starts(argv, ("train.py",)) and not _from_the_runner():
            raise AssertionError(
                f"{request.node.nodeid} starts train.py by itself: start it through tests/support/cli.py "
                "(train_py, or start_train_py for a process the test stops)"
            )
        original(self, args, *rest, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "__init__", checked)


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
    # Collection imports torch, PEFT and every test module; the collector, run as they grow, walked them again and
    # again (a fifth of a worker's collection). Off while they import, then frozen (pytest_collection_finish), in a
    # process that collects: an xdist worker, or pytest alone (xdist's controller collects nothing)
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        gc.disable()


def pytest_collection_finish(session):
    gc.freeze()  # what collection imported lives to the end of the session: later collections skip it
    gc.enable()


def pytest_collection_modifyitems(config, items):
    """The costly tests first, spread over the workers (tests/support/schedule.py): each worker of `pytest -n`
    starts on its share of the long runs while the quick tests are still there to fill the gaps, instead of one
    worker finishing a long run alone at the end (on 2 cores, minutes)."""
    from support.schedule import deal, read_durations

    deal(config, items, read_durations())


_took: dict[str, float] = {}
_slow: set[str] = set()


def pytest_runtest_logreport(report):
    if os.environ.get(ENV_WRITE_DURATIONS):
        _took[report.nodeid] = _took.get(report.nodeid, 0.0) + report.duration
        if "slow" in report.keywords:
            _slow.add(report.nodeid)


def pytest_sessionfinish(session, exitstatus):
    # on the controller only (a worker has workerinput), which sees every worker's reports
    if os.environ.get(ENV_WRITE_DURATIONS) and not hasattr(session.config, "workerinput") and _took:
        from support.schedule import KEPT_S, write_durations

        kept = write_durations(_took, _slow)
        print(
            f"\ntests/durations.json: {len(_took)} tests timed (the slow ones and those of {KEPT_S:g} s or more "
            f"kept); {kept} entries in all"
        )
