"""HOW the user's code is imported, in the attempt only (its top-level code runs): the function or class an
entry names, or one UserCodeError naming the entry, the user's line and what the import did."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import traceback
from pathlib import Path

from usercode.entry import UserCodeSpec
from usercode.failure import UserCodeError, raised_text, user_trace


def load(spec: UserCodeSpec, label: str, kind: str):
    """The callable `spec` names, imported now. `label` names it in the report (`reward 'f'`, `tool 'x.py:f'`);
    a .py file is imported under a name of its own for `kind` ("reward", "tool", "environment")."""
    source = str(spec.path) if spec.path is not None else spec.module
    try:
        module = _imported(spec, prefix=f"grpo_user_{kind}")
    except (Exception, SystemExit) as exc:  # a KeyboardInterrupt passes on: the run's own stop
        where = _import_frame(exc, spec) or source
        what = f"could not be imported from {source}: {raised_text(exc)}"
        raise UserCodeError(label, where, what, user_trace(exc, where.rsplit(":", 1)[0])) from exc
    target = getattr(module, spec.function, None)
    if not callable(target):
        raise UserCodeError(label, source, f"has no callable '{spec.function}'")
    return target


def _imported(spec: UserCodeSpec, prefix: str):
    """The module an entry names, imported: a .py file under a name of its own, or the dotted module. Whatever
    its import raises is raised."""
    if spec.path is None:
        return importlib.import_module(spec.module)
    module_name = f"{prefix}_{abs(hash(str(spec.path.resolve())))}"
    loader_spec = importlib.util.spec_from_file_location(module_name, spec.path)
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[module_name] = module
    try:
        loader_spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


def _import_frame(exc: BaseException, spec: UserCodeSpec) -> str | None:
    """The last frame of the traceback in the user's file (or module), as file:line."""
    frames = traceback.extract_tb(exc.__traceback__)
    if spec.path is not None:
        own = [f for f in frames if Path(f.filename).resolve() == spec.path.resolve()]
    else:
        top = spec.module.split(".")[0]
        own = [f for f in frames if f"/{top}/" in f.filename.replace("\\", "/") or Path(f.filename).stem == top]
    if isinstance(exc, SyntaxError) and exc.filename and exc.lineno:
        return f"{exc.filename}:{exc.lineno}"
    return f"{own[-1].filename}:{own[-1].lineno}" if own else None
