"""Several fresh interpreters started together, each running the same code with arguments of its own: what two
runs or two users are, processes of their own. A test forking its own process instead can hang: the
pytest-xdist worker has threads, and a lock one of them holds at the fork stays held in the child for good
(a `multiprocessing` fork pool once hung the whole suite that way)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence

from support.cli import REPO
from support.waiting import finish_all


def start_at_once(code: str, arguments: Sequence[Sequence[object]]) -> list[subprocess.Popen]:
    """Start `python -c code ARGS` for each ARGS in `arguments`, the repository and tests/ importable, without
    waiting on any."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "tests")]))
    return [
        subprocess.Popen(
            [sys.executable, "-c", code, *map(str, args)],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for args in arguments
    ]


def finish(processes: Sequence[subprocess.Popen]) -> list[str]:
    """Wait for every process, for as long as one of them makes progress (they may wait on each other); their
    standard outputs, in order. An exit other than 0 fails with its errors."""
    outputs = []
    for process, (out, err) in zip(processes, finish_all(processes)):
        assert process.returncode == 0, err[-3000:]
        outputs.append(out)
    return outputs


def run_at_once(code: str, arguments: Sequence[Sequence[object]]) -> list[str]:
    """start_at_once, then finish: the standard outputs, in order."""
    return finish(start_at_once(code, arguments))
