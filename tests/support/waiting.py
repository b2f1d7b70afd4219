"""The one way a test waits for something another process does: until it is done, for as long as that work
makes progress. A wait fails when the process it waits on has ended first, or when nothing it watches (files
and folders: their names, sizes and modification times) has changed for `stall_s` seconds, never because a
loaded machine took longer than an unloaded one."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path

# No output, checkpoint or log line for this long: the work is stuck (a training step on two busy cores takes
# tens of seconds; a model's load, a minute or two)
STALL_S = 600.0
POLL_S = 0.1


def _signature(paths: Iterable[Path]) -> tuple:
    seen = []
    for root in paths:
        root = Path(root)
        for path in [root, *(root.rglob("*") if root.is_dir() else ())]:
            try:
                stat = path.stat()
            except OSError:
                continue
            seen.append((str(path), stat.st_size, stat.st_mtime_ns))
    return tuple(sorted(seen))


def wait_until(
    done: Callable[[], bool],
    *,
    watch: Iterable[Path] = (),
    process=None,
    stall_s: float = STALL_S,
    what: str = "the condition",
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Return once done() is true. AssertionError when `process` (a Popen) has exited first, or when the
    files under `watch` have not changed for `stall_s` seconds."""
    watch = [Path(p) for p in watch]
    last, changed = _signature(watch), clock()
    while not done():
        if process is not None and process.poll() is not None:
            if done():
                return
            raise AssertionError(f"the process ended (exit {process.returncode}) before {what}")
        now = _signature(watch)
        if now != last:
            last, changed = now, clock()
        elif clock() - changed > stall_s:
            raise AssertionError(
                f"no progress in {', '.join(map(str, watch)) or 'anything watched'} for {stall_s:g} s "
                f"while waiting for {what}"
            )
        sleep(POLL_S)


def process_tree_cpu_s(pid: int) -> float:
    """CPU seconds (user and system) used so far by process `pid` and every live process below it: a clock of the
    work a run has done, which a loaded machine slows down as much as the run itself."""
    from measure.processes import process_stats

    ticks = os.sysconf("SC_CLK_TCK")
    stats = process_stats()
    parents = {member: int(fields[1]) for member, fields in stats.items()}
    used = {member: sum(int(value) for value in fields[11:15]) / ticks for member, fields in stats.items()}
    tree, frontier = {pid}, [pid]
    while frontier:
        parent = frontier.pop()
        for child, its_parent in parents.items():
            if its_parent == parent and child not in tree:
                tree.add(child)
                frontier.append(child)
    return sum(used.get(member, 0.0) for member in tree)
