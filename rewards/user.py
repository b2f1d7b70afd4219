"""Rewards from the user's own code: a `rewards:` entry `path/to/file.py:function` or `package.module:function`.

The profile loader checks such an entry without running the user's code (the file is parsed, not imported,
so `plan` stays instant and a module with side effects does nothing at planning time); the attempt
imports it. The function takes TRL's reward signature (prompts, completions, and the dataset's columns as
keyword arguments) and returns one float (or None) per completion. An exception inside it is re-raised as
UserRewardError naming the reward and the last frame of the traceback, so the attempt ends `error` with both.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import json
import math
import re
import sys
import time
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path

_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_REWARD_FILE_BYTES = 5 * 1024 * 1024


class UserRewardError(RuntimeError):
    """A user's reward function failed during training: its name, where in the user's code, and what it did
    (raised, returned something that is not a score, ended the process); `trace` is the user's own frames."""

    def __init__(
        self, name: str, where: str, exc: BaseException | None = None, what: str | None = None, trace: str = ""
    ):
        self.reward = name
        self.where = where
        self.trace = trace
        if what is None:
            what = f"raised {type(exc).__name__}: {exc}"
        super().__init__(f"reward '{name}' {what} (at {where})")


@dataclass(frozen=True)
class RewardSpec:
    text: str  # as written in the profile
    function: str
    path: Path | None = None  # a .py file
    module: str | None = None  # a dotted module name

    @property
    def name(self) -> str:
        """How TRL logs it (rewards/<name>/mean): the function's own name."""
        return self.function


def is_user_reward(text: str) -> bool:
    return isinstance(text, str) and ":" in text


def parse_spec(text: str, base_dir: Path | None = None) -> RewardSpec:
    """Split `file.py:function` or `package.module:function`; ValueError with the fix when malformed.
    A relative file is taken from `base_dir` (the profile's folder) first, then the current directory."""
    target, _, function = text.rpartition(":")
    if not target or not _IDENT.match(function):
        raise ValueError(
            f"'{text}' is not FILE.py:FUNCTION or package.module:FUNCTION (the function after "
            "the last ':' must be a Python name)"
        )
    if target.endswith(".py") or "/" in target or "\\" in target:
        path = Path(target).expanduser()
        if not path.is_absolute():
            candidates = [base_dir / path] if base_dir is not None else []
            candidates.append(Path.cwd() / path)
            path = next((c for c in candidates if c.is_file()), candidates[0])
        return RewardSpec(text=text, function=function, path=path)
    if not _DOTTED.match(target):
        raise ValueError(f"'{target}' is neither a .py file nor a dotted module name")
    return RewardSpec(text=text, function=function, module=target)


def check_spec(spec: RewardSpec, kind: str = "reward") -> None:
    """Without running the user's code: the file exists and defines the function (parsed with `ast`), or
    the module can be found. ValueError saying what is missing and how to fix it. `kind` names what the entry
    is in the messages ("reward", "tool", "environment")."""
    if spec.path is not None:
        _check_file(spec, kind=kind)
        return
    found = _find_module(spec.module)
    origin = getattr(found, "origin", None)
    if origin and origin.endswith(".py") and Path(origin).is_file():
        _check_file(spec, Path(origin), what=f"module '{spec.module}' ({origin})", kind=kind)


def _find_module(dotted: str):
    """The module's spec, found part by part in the folders of its packages without importing any of them
    (importlib.util.find_spec would run each parent package's __init__); ValueError naming the first part
    that is not there."""
    from importlib.machinery import PathFinder

    parts = dotted.split(".")
    try:
        found = importlib.util.find_spec(parts[0])
    except (ImportError, ValueError):
        found = None
    if found is None:
        raise ValueError(
            f"module '{dotted}': '{parts[0]}' is not importable from here (fix: install it, or put "
            "its folder on PYTHONPATH)"
        )
    for depth in range(1, len(parts)):
        name = ".".join(parts[: depth + 1])
        folders = found.submodule_search_locations
        if folders is None:
            raise ValueError(
                f"module '{dotted}': '{'.'.join(parts[:depth])}' is a module, not a package, so it "
                f"holds no '{parts[depth]}'"
            )
        found = PathFinder.find_spec(name, list(folders))
        if found is None:
            there = (
                sorted(
                    {p.stem for folder in folders for p in Path(folder).glob("*.py") if p.stem != "__init__"}
                    | {
                        p.name
                        for folder in folders
                        for p in Path(folder).iterdir()
                        if p.is_dir() and (p / "__init__.py").is_file()
                    }
                )
                if folders
                else []
            )
            hint = _close(parts[depth], there)
            raise ValueError(
                f"module '{dotted}': package '{'.'.join(parts[:depth])}' has no module '{parts[depth]}' "
                f"(modules there: {', '.join(there[:20]) or 'none'}){hint}"
            )
    return found


def _close(word: str, known) -> str:
    import difflib

    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    return f" (fix: did you mean '{close[0]}'?)" if close else ""


def _check_file(spec: RewardSpec, path: Path | None = None, what: str | None = None, kind: str = "reward") -> None:
    path = path or spec.path
    if not path.is_file():
        raise ValueError(
            f"{kind} file {path} not found (fix: give the path of an existing .py file, relative "
            "to the profile's folder or the current directory)"
        )
    if path.stat().st_size > MAX_REWARD_FILE_BYTES:
        if what is not None:
            return  # an installed module that large is someone's library: importing it will tell
        raise ValueError(f"{kind} file {path} is over {MAX_REWARD_FILE_BYTES // (1024 * 1024)} MB: not a {kind}")
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except SyntaxError as exc:
        raise ValueError(f"{kind} file {path} has a syntax error at line {exc.lineno}: {exc.msg}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{kind} file {path} cannot be read: {exc}") from None
    defined = set()
    for node in _top_level(tree.body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, ast.Assign):
            defined.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            defined.add(node.target.id)
        elif isinstance(node, (ast.ImportFrom, ast.Import)):
            defined.update((a.asname or a.name).split(".")[0] for a in node.names)
    if spec.function not in defined and not _defines_dynamically(tree):
        kinds = (ast.FunctionDef, ast.ClassDef) if kind == "environment" else ast.FunctionDef
        functions = sorted(n.name for n in tree.body if isinstance(n, kinds))
        label = "classes and functions there" if kind == "environment" else "functions there"
        raise ValueError(
            f"{what or f'{kind} file {path}'} defines no '{spec.function}' ({label}: "
            f"{', '.join(functions) or 'none'}){_close(spec.function, functions)}"
        )


def _top_level(body):
    """The module's top-level statements, with those inside top-level if / try / with blocks (a name defined
    under `try: import fast / except ImportError: def f...` is defined either way)."""
    for node in body:
        yield node
        for block in ("body", "orelse", "finalbody"):
            if isinstance(node, (ast.If, ast.Try, ast.With)) and getattr(node, block, None):
                yield from _top_level(getattr(node, block))
        for handler in getattr(node, "handlers", []) if isinstance(node, ast.Try) else []:
            yield from _top_level(handler.body)


def _defines_dynamically(tree) -> bool:
    """A module that may define names the parse cannot see (`from x import *`, a module __getattr__)."""
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
            return True
        if isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
            return True
    return False


def load(spec: RewardSpec):
    """Import the user's function (in the attempt, not the planner) and wrap it so that TRL logs it under
    its own name and a failure inside it names the reward and the user's line. A failure while importing
    (an error at the top of the file, a missing package, sys.exit) is a UserRewardError naming the file."""
    source = str(spec.path) if spec.path is not None else spec.module
    with _running(spec.function, spec.text):
        try:
            module = import_spec(spec)
        except (Exception, SystemExit) as exc:
            where = _import_frame(exc, spec) or source
            raise UserRewardError(
                spec.function,
                where,
                exc,
                what=f"could not be imported from {source}: {_what_it_raised(exc)}",
                trace=_user_trace(exc, where),
            ) from exc
    function = getattr(module, spec.function, None)
    if not callable(function):
        raise ValueError(f"reward '{spec.text}': '{spec.function}' is not a function")
    return _guarded(function, spec.function, spec.text)


def import_spec(spec: RewardSpec, prefix: str = "grpo_user_reward"):
    """The module an entry names, imported (its top-level code runs): a .py file under a name of its own,
    or the dotted module. Whatever its import raises is raised."""
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


def _what_it_raised(exc: BaseException) -> str:
    if isinstance(exc, SystemExit):
        return f"it called sys.exit({exc.code!r})"
    return f"{type(exc).__name__}: {exc}"


def _import_frame(exc: BaseException, spec: RewardSpec) -> str | None:
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


def _user_trace(exc: BaseException, own_file: str | None) -> str:
    """The traceback's frames in the user's own file and the error line: what the user can act on, without
    the library frames around them."""
    own = (own_file or "").rsplit(":", 1)[0]
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if own and f.filename == own]
    lines = [f'  File "{f.filename}", line {f.lineno}, in {f.name}\n    {(f.line or "").strip()}' for f in frames]
    return "\n".join(lines + [f"{type(exc).__name__}: {exc}"])


# Set by the attempt (attach): the folder that holds the marker of a running reward
# (contract.attempt.REWARD_RUNNING_FILE), and how a warning is said. Elsewhere (tests, `sample`): no marker,
# warnings through the warnings module.
_marker_dir: Path | None = None
_say = None


def attach(folder: Path | None, say=None) -> None:
    """Leave REWARD_RUNNING_FILE in folder while the user's code runs, so that a process ended inside it
    (os._exit) is reported as the reward's doing; say warnings with `say`."""
    global _marker_dir, _say
    _marker_dir = Path(folder) if folder is not None else None
    _say = say


class _running:
    def __init__(self, name: str, text: str):
        self.name, self.text = name, text

    def __enter__(self):
        if _marker_dir is not None:
            from contract.attempt import REWARD_RUNNING_FILE

            try:
                (_marker_dir / REWARD_RUNNING_FILE).write_text(json.dumps({"reward": self.name, "entry": self.text}))
            except OSError:
                pass  # only a better message is lost
        return self

    def __exit__(self, *exc_info):
        if _marker_dir is not None:
            from contract.attempt import REWARD_RUNNING_FILE

            try:
                (_marker_dir / REWARD_RUNNING_FILE).unlink(missing_ok=True)
            except OSError:
                pass
        return False


def _users_last_frame(exc: BaseException, code) -> str:
    """Where the user's code failed: the last frame in the reward's own file (a library it called may have
    raised deeper down); when none is there the call itself failed (its arguments), so the function's line."""
    own_file = getattr(code, "co_filename", None)
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if own_file and f.filename == own_file]
    if frames:
        return f"{frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name}"
    if code is not None:
        return f"{own_file}:{code.co_firstlineno}, calling {code.co_name}"
    return "unknown"


# A reward slower than this per call is worth a line: every step waits for it.
SLOW_CALL_S = 60.0


def _guarded(function, name: str, entry: str = ""):
    code = getattr(function, "__code__", None)
    slow_said = False

    @functools.wraps(function)
    def reward(*args, **kwargs):
        nonlocal slow_said
        started = time.monotonic()
        with _running(name, entry or name):
            try:
                scores = function(*args, **kwargs)
            except KeyboardInterrupt as exc:  # a signal's (it passes on), or the reward's own: say whose
                exc.grpo_reward = name
                raise
            except (Exception, SystemExit) as exc:
                where = _users_last_frame(exc, code)
                what = f"called sys.exit({exc.code!r})" if isinstance(exc, SystemExit) else None
                raise UserRewardError(
                    name, where, exc, what=what, trace=_user_trace(exc, where.split(" ")[0].split(",")[0])
                ) from exc
        seconds = time.monotonic() - started
        completions = kwargs.get("completions", args[1] if len(args) > 1 else None)
        checked = checked_scores(name, scores, completions, kwargs.get("prompts", args[0] if args else None))
        if seconds > SLOW_CALL_S and not slow_said:
            slow_said = True
            _warn(
                f"reward '{name}' took {seconds:.0f} s to score {len(checked)} completions; every training step "
                "waits for it"
            )
        return checked

    reward.__name__ = name
    return reward


def _warn(text: str) -> None:
    if _say is not None:
        _say(f"warning: {text}")
    else:
        warnings.warn(text, UserRewardWarning, stacklevel=3)


class UserRewardWarning(UserWarning):
    """Something a user's reward did that trains poorly, without being an error (slow, nothing scored)."""


def _row_text(index: int, prompts) -> str:
    """`completion 3 (prompt 'What is 2 + ...')`: which row a score belongs to, briefly."""
    text = ""
    try:
        prompt = prompts[index]
        if isinstance(prompt, list) and prompt and isinstance(prompt[-1], dict):
            prompt = prompt[-1].get("content")
        if isinstance(prompt, str):
            text = prompt.strip().replace("\n", " ")
            text = f" (prompt {text[:60] + '...' if len(text) > 60 else text!r})"
    except (IndexError, KeyError, TypeError):
        pass
    return f"completion {index}{text}"


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def checked_scores(name: str, scores, completions, prompts=None) -> list:
    """The reward's return value as TRL needs it, one float or None per completion; UserRewardError naming
    the reward, the completion and the value for anything else. inf and NaN are refused: one of them makes
    the group's advantages NaN, and the step then trains nothing without failing."""

    def refuse(what: str) -> UserRewardError:
        return UserRewardError(name, "its return value", what=what)

    if scores is None or isinstance(scores, (str, bytes, dict)) or not hasattr(scores, "__iter__"):
        raise refuse(
            f"returned {type(scores).__name__} {_shown(scores)}, expected a list with one float (or "
            "None) per completion"
        )
    scores = list(scores)
    if completions is not None and len(scores) != len(completions):
        raise refuse(f"returned {len(scores)} scores for {len(completions)} completions (expected one per completion)")
    out = []
    for index, score in enumerate(scores):
        if score is None:
            out.append(None)
            continue
        if isinstance(score, (str, bytes)):
            raise refuse(
                f"returned the text {_shown(score)} for {_row_text(index, prompts)}; a score is a "
                "number (float(...) it), or None where the reward does not apply"
            )
        try:
            value = float(score)
        except (TypeError, ValueError, OverflowError):
            raise refuse(
                f"returned {type(score).__name__} {_shown(score)} for {_row_text(index, prompts)}; a "
                "score is a number, or None where the reward does not apply"
            ) from None
        if not math.isfinite(value):
            raise refuse(
                f"returned {value} for {_row_text(index, prompts)}; a score must be finite (inf or NaN "
                "makes the group's advantages NaN and the step trains nothing); return None where the "
                "reward does not apply"
            )
        out.append(value)
    if out and all(v is None for v in out) and (name, "none") not in _warned:
        _warned.add((name, "none"))
        _warn(
            f"reward '{name}' returned None for all {len(out)} completions of a batch: it scores nothing there "
            "(said once)"
        )
    return out


_warned: set = set()
