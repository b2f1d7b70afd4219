"""Records which of the project's modules a run imported before its first GRPO step (tests/unit/test_maps.py).

Put on PYTHONPATH with FIRST_STEP_MAP_DIR set, it loads at start-up in every Python process of the run (the
supervisor and each attempt). The process that reaches the first training step (transformers' callbacks are
told a step begins) writes its project modules and the mark `step`; every other process writes its own when the
mark appears (a thread watching for it) or at its exit, whichever comes first: so the union of the files is
what the run had imported when the first step began. No product code knows of it.
"""

from __future__ import annotations

import atexit
import importlib.abc
import json
import os
import sys
import threading
import time
from pathlib import Path

FOLDER = Path(os.environ.get("FIRST_STEP_MAP_DIR", ""))
MARK = FOLDER / "step"
REPO = Path(__file__).resolve().parents[3]
# where the repository holds code that is not the project's own
NOT_PROJECT = {"tests", "tests_vllm", "wheels"}
WATCHED = "transformers.trainer_callback"  # where the training loop tells its callbacks a step begins

_written = threading.Event()


def project_modules() -> dict[str, str]:
    """{module name: its file, relative to the repository} of the project's modules this process has imported,
    named by their file (train.py run as a script is `__main__`, and `__mp_main__` in a process multiprocessing
    starts: both are `train`)."""
    found = {}
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if not file or not file.endswith(".py") or not os.path.isabs(file):
            continue
        try:
            relative = Path(file).resolve().relative_to(REPO)
        except ValueError:
            continue
        if relative.parts[0] in NOT_PROJECT or relative.parts[0].startswith("."):
            continue
        parts = relative.with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = relative.as_posix()
    return found


def write(why: str) -> None:
    if _written.is_set():
        return
    _written.set()
    text = json.dumps({"pid": os.getpid(), "why": why, "argv": sys.argv, "modules": project_modules()})
    # whole or not at all: the test reads the file as soon as its name appears
    partial = FOLDER / f".{os.getpid()}.partial"
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, FOLDER / f"{os.getpid()}.json")


def first_step_reached() -> None:
    write("step")
    MARK.touch()


def watch_for_the_mark() -> None:
    while not _written.is_set():
        if MARK.exists():
            write("another process reached the step")
            return
        time.sleep(0.05)


class _WrapWhenLoaded(importlib.abc.MetaPathFinder):
    """Wraps CallbackHandler.on_step_begin once transformers.trainer_callback is loaded (before that, importing
    it here would load transformers in every process)."""

    def find_spec(self, fullname, path, target=None):
        if fullname != WATCHED:
            return None
        sys.meta_path.remove(self)
        from importlib.util import find_spec

        spec = find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            handler = module.CallbackHandler
            begin = handler.on_step_begin

            def on_step_begin(self, *args, **kwargs):
                first_step_reached()
                return begin(self, *args, **kwargs)

            handler.on_step_begin = on_step_begin

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if os.environ.get("FIRST_STEP_MAP_DIR"):
    sys.meta_path.insert(0, _WrapWhenLoaded())
    atexit.register(write, "exit")
    threading.Thread(target=watch_for_the_mark, name="first-step-map", daemon=True).start()
