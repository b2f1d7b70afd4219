"""Rewards from the user's own code: a `rewards:` entry `path/to/file.py:function` or `package.module:function`.

The profile loader checks such an entry without running the user's code (the file is parsed, not imported,
so `--dry-run` stays instant and a module with side effects does nothing at planning time); the attempt
imports it. The function takes TRL's reward signature (prompts, completions, and the dataset's columns as
keyword arguments) and returns one float (or None) per completion. An exception inside it is re-raised as
UserRewardError naming the reward and the last frame of the traceback, so the attempt ends `error` with both.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import re
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_REWARD_FILE_BYTES = 5 * 1024 * 1024


class UserRewardError(RuntimeError):
    """A user's reward function failed during training: its name, and where in the user's code."""

    def __init__(self, name: str, where: str, exc: BaseException):
        self.reward = name
        self.where = where
        super().__init__(f"reward '{name}' raised {type(exc).__name__}: {exc} (at {where})")


@dataclass(frozen=True)
class RewardSpec:
    text: str                 # as written in the profile
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
        raise ValueError(f"'{text}' is not FILE.py:FUNCTION or package.module:FUNCTION (the function after "
                         "the last ':' must be a Python name)")
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


def check_spec(spec: RewardSpec) -> None:
    """Without running the user's code: the file exists and defines the function (parsed with `ast`), or
    the module can be found. ValueError saying what is missing and how to fix it."""
    if spec.path is not None:
        _check_file(spec)
        return
    top = spec.module.split(".")[0]
    if importlib.util.find_spec(top) is None:
        raise ValueError(f"module '{spec.module}' is not importable from here (is it installed, or is its folder "
                         "on PYTHONPATH?)")


def _check_file(spec: RewardSpec) -> None:
    path = spec.path
    if not path.is_file():
        raise ValueError(f"reward file {path} not found (fix: give the path of an existing .py file, relative "
                         "to the profile's folder or the current directory)")
    if path.stat().st_size > MAX_REWARD_FILE_BYTES:
        raise ValueError(f"reward file {path} is over {MAX_REWARD_FILE_BYTES // (1024 * 1024)} MB: not a reward")
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except SyntaxError as exc:
        raise ValueError(f"reward file {path} has a syntax error at line {exc.lineno}: {exc.msg}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"reward file {path} cannot be read: {exc}") from None
    defined = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, ast.Assign):
            defined.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.ImportFrom, ast.Import)):
            defined.update((a.asname or a.name).split(".")[0] for a in node.names)
    if spec.function not in defined:
        functions = sorted(n.name for n in tree.body if isinstance(n, ast.FunctionDef))
        raise ValueError(f"reward file {path} defines no '{spec.function}' (functions there: "
                         f"{', '.join(functions) or 'none'})")


def load(spec: RewardSpec):
    """Import the user's function (in the attempt, not the planner) and wrap it so that TRL logs it under
    its own name and a failure inside it names the reward and the user's line."""
    if spec.path is not None:
        module_name = f"grpo_user_reward_{abs(hash(str(spec.path.resolve())))}"
        loader_spec = importlib.util.spec_from_file_location(module_name, spec.path)
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[module_name] = module
        loader_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(spec.module)
    function = getattr(module, spec.function, None)
    if not callable(function):
        raise ValueError(f"reward '{spec.text}': '{spec.function}' is not a function")
    return _guarded(function, spec.function)


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


def _guarded(function, name: str):
    code = getattr(function, "__code__", None)

    @functools.wraps(function)
    def reward(*args, **kwargs):
        try:
            scores = function(*args, **kwargs)
        except Exception as exc:
            raise UserRewardError(name, _users_last_frame(exc, code), exc) from exc
        completions = kwargs.get("completions", args[1] if len(args) > 1 else None)
        if not isinstance(scores, (list, tuple)):
            raise UserRewardError(name, "its return value", TypeError(
                f"returned {type(scores).__name__}, expected a list with one float (or None) per completion"))
        if completions is not None and len(scores) != len(completions):
            raise UserRewardError(name, "its return value", ValueError(
                f"returned {len(scores)} scores for {len(completions)} completions"))
        return [None if s is None else float(s) for s in scores]

    reward.__name__ = name
    return reward
