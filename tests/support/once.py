"""Work that several tests share, done once per test run even when pytest-xdist spreads those tests over its
workers (a module-scoped fixture runs once per worker that gets one of the module's tests: twice or more)."""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any


def once_per_run(tmp_path_factory, name: str, compute: Callable[[Path], Any]) -> tuple[Path, Any]:
    """(folder, result): compute(folder) run by the first worker to ask, its folder and JSON result shared with
    the others; without xdist, simply run."""
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if not run_id:
        folder = tmp_path_factory.mktemp(name)
        return folder, compute(folder)
    shared = tmp_path_factory.getbasetemp().parent / f"once-{run_id}"
    shared.mkdir(exist_ok=True)
    folder, result_file = shared / name, shared / f"{name}.json"
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not result_file.is_file():
            folder.mkdir(exist_ok=True)
            result = compute(folder)
            result_file.write_text(json.dumps(result), encoding="utf-8")
    return folder, json.loads(result_file.read_text(encoding="utf-8"))
