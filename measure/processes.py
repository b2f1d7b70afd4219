"""HOW the kit's children run: each in a process group of its own, its output in a log, stopped when its time
is up (SIGINT, then SIGKILL) or when the kit is signalled; and whether a library imports, checked in a fresh
interpreter of its own."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from measure.cases import REPO

STOP_GRACE_S = 10.0  # a child told to stop (SIGINT) gets this long before SIGKILL
SETTLE_S = 10.0  # SIGKILL is delivered at once, but a loaded machine may take a moment to run the deaths
# the longest a child told to stop can keep run_bounded: SIGINT's grace, SIGKILL's wait, the group's deaths
STOP_WORST_S = 2 * STOP_GRACE_S + SETTLE_S


def process_stats() -> dict[int, list[str]]:
    """{pid: the fields of /proc/PID/stat after the command} for every process (empty where there is no /proc):
    [0] state, [1] ppid, [2] pgrp, ... [11] utime, [12] stime, [13] cutime, [14] cstime, in clock ticks."""
    stats = {}
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses, so read after its last ")"
            stats[int(entry.name)] = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
    return stats


def group_members(pgid: int) -> dict[int, str]:
    """{pid: state letter} of the live processes in process group `pgid` (empty where there is none)."""
    return {
        pid: fields[0]
        for pid, fields in process_stats().items()
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X")
    }


def end_group(pgid: int) -> dict[int, str]:
    """SIGKILL every process left in group `pgid` (a grandchild that ignored the stop, or outlived its parent) and
    wait until none runs, at most SETTLE_S; what still runs then (normally nothing)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        return {}
    deadline = time.monotonic() + SETTLE_S
    while (left := group_members(pgid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


class Stopper:
    """SIGINT / SIGTERM to the kit: stop the running child (its own process group), write the report, exit."""

    def __init__(self):
        self.signal: int | None = None
        self.child: subprocess.Popen | None = None
        self._previous: dict[int, Any] = {}

    def install(self) -> Stopper:
        for signum in (signal.SIGINT, signal.SIGTERM):
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def restore(self) -> None:
        """The handlers from before install(): the kit also runs inside other programs (the suite's tests)."""
        for signum, handler in self._previous.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)
        self._previous.clear()

    def _handle(self, signum, frame) -> None:
        self.signal = signum
        if self.child is not None and self.child.poll() is None:
            try:
                os.killpg(self.child.pid, signal.SIGINT)
            except OSError:
                pass


def run_bounded(argv: list[str], env: dict, timeout_s: float, log: Path, stopper: Stopper) -> tuple[int | None, bool]:
    """Run `argv` in a process group of its own, its output in `log`, for at most `timeout_s` seconds: then
    SIGINT (the supervisor and the trainer stop as on a Ctrl-C), and SIGKILL after STOP_GRACE_S. (exit status or
    None, whether it was stopped for time)."""
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            argv,
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        stopper.child = proc
        try:
            try:
                return proc.wait(timeout=max(timeout_s, 1.0)), False
            except subprocess.TimeoutExpired:
                pass
            for signum in (signal.SIGINT, signal.SIGKILL):
                try:
                    os.killpg(proc.pid, signum)
                except OSError:
                    pass
                try:
                    proc.wait(timeout=STOP_GRACE_S)
                    break
                except subprocess.TimeoutExpired:
                    continue
            return proc.poll(), True
        finally:
            stopper.child = None
            end_group(proc.pid)


def log_tail(log: Path, lines: int = 40) -> str:
    try:
        return "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


# ------------------------------------------------------------------------------------------------ libraries

# the collector paused, as an attempt imports the libraries (trainer.backends.collector_paused): the seconds
# reported are an attempt's
_IMPORT = (
    "import gc, json, sys, time\n"
    "gc.disable()\n"
    "started = time.monotonic()\n"
    "module = __import__(sys.argv[1])\n"
    "print(json.dumps({'seconds': round(time.monotonic() - started, 2), "
    "'version': str(getattr(module, '__version__', ''))}))\n"
)


def import_check(modules: tuple[str, ...], env: dict, timeout_s: float, stopper: Stopper) -> dict:
    """{module: {imports, version, seconds, error}}: whether each imports in a fresh interpreter (Unsloth and
    bitsandbytes fail in many ways, some of them by killing the process). A module that is not installed is
    said so at once, without importing; one that is installed imports in a child of its own, all at once,
    bounded only by what is left of the kit's time."""
    found: dict[str, dict] = {}
    running = {}
    for module in modules:
        if importlib.util.find_spec(module) is None:
            found[module] = {"imports": False, "error": "not installed"}
            continue
        running[module] = subprocess.Popen(
            [sys.executable, "-c", _IMPORT, module],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
    deadline = time.monotonic() + timeout_s
    for module, proc in running.items():
        try:
            out, err = proc.communicate(timeout=max(deadline - time.monotonic(), 1.0))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            found[module] = {"imports": False, "error": "its import outlasted the kit's time"}
            continue
        if proc.returncode == 0:
            try:
                found[module] = {"imports": True, **json.loads(out.strip().splitlines()[-1])}
                continue
            except (ValueError, IndexError):
                pass
        last = [line for line in err.strip().splitlines() if line.strip()]
        found[module] = {"imports": False, "error": (last[-1] if last else f"exit {proc.returncode}")[:300]}
    if stopper.signal is not None:
        for proc in running.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    return {module: found[module] for module in modules}


def versions() -> dict:
    from importlib import metadata

    found = {}
    for name in ("torch", "transformers", "trl", "peft", "accelerate", "unsloth", "unsloth_zoo", "bitsandbytes"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return found
