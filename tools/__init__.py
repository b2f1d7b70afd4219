"""WHAT the model may call while it answers: the shipped tools and environments, the user's own, and the guard
that keeps any of them from taking a run down.

A profile's `tools` lists functions the model may call (TRL's `tools`), `environment` names a class whose
instances hold one rollout's state and whose public methods are its tools (TRL's `environment_factory`). Each
entry is a shipped name (SHIPPED_TOOLS, SHIPPED_ENVIRONMENTS), `path/to/file.py:name` or
`package.module:name`, found and checked as any user's code is (usercode: the file is parsed, not imported,
until the attempt). The attempt imports them here and hands TRL guarded versions (tools.guard).
"""

from __future__ import annotations

import ast
from pathlib import Path

SHIPPED_TOOLS = {"calculate": "tools.calculator:calculate"}
SHIPPED_ENVIRONMENTS = {"guess": "tools.guess:GuessTheSum"}
# Characters a shipped tool's reply takes at most, for the planner (a user's tool: tools.guard.MAX_OUTPUT_CHARS)
SHIPPED_REPLY_CHARS = {"calculate": 24, "guess": 8}


def entry_target(text: str, kind: str) -> str:
    """A shipped name as the entry it stands for; any other entry as it is."""
    shipped = SHIPPED_TOOLS if kind == "tool" else SHIPPED_ENVIRONMENTS
    return shipped.get(text, text)


def check_entry(text: str, kind: str, base_dir: Path | None = None) -> str:
    """Without importing anything of the user's: the entry as the attempt will load it (a file's absolute path,
    so that the attempt finds it from any folder); ValueError saying what is wrong and the fix. `kind`:
    "tool" or "environment"."""
    from usercode.entry import check_spec, is_user_code, parse_spec

    shipped = SHIPPED_TOOLS if kind == "tool" else SHIPPED_ENVIRONMENTS
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"expected a {kind} entry, got {text!r}")
    if text in shipped:
        return text
    if not is_user_code(text):
        known = ", ".join(shipped)
        raise ValueError(
            f"unknown {kind} '{text}' (fix: a shipped {kind} ({known}), path/to/file.py:name or package.module:name)"
        )
    spec = parse_spec(text, base_dir=base_dir)
    check_spec(spec, kind=kind)
    _check_described(spec, kind)
    return f"{spec.path.resolve()}:{spec.function}" if spec.path is not None else text


def _check_described(spec, kind: str) -> None:
    """ValueError when the tool (or one of the environment's tools) as its file defines it could not be
    described to the model (tools.described): found now, not after the model has loaded."""
    from tools import described

    tree = described.parsed(described.source_of(spec))
    node = described.definitions(tree).get(spec.function) if tree is not None else None
    if kind == "tool" and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        found = {spec.function: node}
    elif kind == "environment" and isinstance(node, ast.ClassDef):
        found = described.tool_methods(node, described.definitions(tree))
    else:  # something the parse cannot judge (a callable object, a name imported from elsewhere): the attempt will
        return
    for name, function in found.items():
        problem = described.description_problem(function)
        if problem:
            what = f"tool {name}" if kind == "tool" else f"environment {spec.function}: its method {name}"
            raise ValueError(f"{what} ({spec.text}, line {function.lineno}) {problem}")


def environment_tool_names(entry: str) -> set[str]:
    """The names of the tools an environment entry (as check_entry returned it) offers the model, as far as
    its file shows them (methods inherited from another module are not seen)."""
    from tools import described
    from usercode.entry import parse_spec

    try:
        spec = parse_spec(entry_target(entry, "environment"))
    except ValueError:
        return set()
    tree = described.parsed(described.source_of(spec))
    if tree is None:
        return set()
    defined = described.definitions(tree)
    node = defined.get(spec.function)
    return set(described.tool_methods(node, defined)) if isinstance(node, ast.ClassDef) else set()


def entry_name(text: str, kind: str = "tool") -> str:
    """The name TRL knows an entry by: the function's or class's own name."""
    return entry_target(text, kind).rpartition(":")[2]


def _import(text: str, kind: str):
    """The function or class an entry names, imported now (in the attempt)."""
    from usercode.entry import parse_spec
    from usercode.load import load

    return load(parse_spec(entry_target(text, kind)), f"{kind} '{text}'", kind)


def load_tools(entries, time_limit_s: float | None = None) -> list:
    """The profile's tools, imported and guarded, in the profile's order."""
    from tools.guard import TIME_LIMIT_S, guarded

    limit = TIME_LIMIT_S if time_limit_s is None else time_limit_s
    loaded = []
    for entry in entries or ():
        function = _import(entry, "tool")
        _check_schema(function, f"tool '{entry}'")
        loaded.append(guarded(function, entry_name(entry), limit))
    return loaded


def load_environment(entry: str, time_limit_s: float | None = None):
    """The profile's environment as a guarded factory (None when the profile names none)."""
    if not entry:
        return None
    from tools.guard import TIME_LIMIT_S, guarded_environment

    limit = TIME_LIMIT_S if time_limit_s is None else time_limit_s
    factory = _import(entry, "environment")
    if isinstance(factory, type):
        for method in tool_methods_of(factory):
            _check_schema(method, f"environment '{entry}': its method {method.__name__}")
    return guarded_environment(factory, entry_name(entry, "environment"), limit)


def _check_schema(function, what: str) -> None:
    """UserCodeError, before the model loads, when transformers cannot describe `function` to the model (what
    the file's parse could not see: a tool made at run time, a method inherited from another module)."""
    import inspect

    from usercode.failure import UserCodeError

    try:
        from transformers.utils import get_json_schema
    except ImportError:  # without transformers nothing describes tools: nothing to check
        return
    try:
        get_json_schema(function)
    except Exception as exc:
        code = getattr(inspect.unwrap(function), "__code__", None)
        where = f"{code.co_filename}:{code.co_firstlineno}" if code is not None else "unknown"
        raise UserCodeError(
            what,
            where,
            f"cannot be described to the model: {exc} (fix: a docstring saying what it does, a type hint on "
            "every argument, and a line `Args:` then `name: what it is` per argument)",
        ) from exc


def check_environment_starts(factory, rows: list[dict]) -> None:
    """Make one environment and reset it with each of `rows` (the first training rows), as TRL will: an
    environment that cannot start is found before the model loads (usercode.failure.UserCodeError)."""
    if factory is None:
        return
    instance = factory()
    for row in rows:
        instance.reset(**row)


def tool_methods(environment) -> list:
    """The public methods of an environment instance that TRL offers the model as tools (all but `reset`,
    `get_reward` and names starting with '_'), bound to it."""
    import inspect

    return [
        getattr(environment, name)
        for name, _ in inspect.getmembers(type(environment), predicate=inspect.isfunction)
        if name not in ("reset", "get_reward") and not name.startswith("_")
    ]


def tool_methods_of(cls: type) -> list:
    """The functions of an environment class that TRL offers the model as tools, unbound."""
    import inspect

    return [
        function
        for name, function in inspect.getmembers(cls, predicate=inspect.isfunction)
        if name not in ("reset", "get_reward") and not name.startswith("_")
    ]
