"""WHERE an entry's code is, and whether it defines what it names, found without running any of it: the
profile loader checks `path/to/file.py:name` or `package.module:name` at planning time (the file is parsed, not
imported, so `plan` stays instant and a module with side effects does nothing then); the attempt imports it
(usercode.load)."""

from __future__ import annotations

import ast
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_FILE_BYTES = 5 * 1024 * 1024


@dataclass(frozen=True)
class UserCodeSpec:
    """An entry split into what it names: the function (or class) and the file or module that defines it."""

    text: str  # as written in the profile
    function: str
    path: Path | None = None  # a .py file
    module: str | None = None  # a dotted module name


def is_user_code(text: str) -> bool:
    """Whether an entry names the user's code (`file.py:name`, `package.module:name`, or TRL's spelling
    `package.module.name`) rather than a shipped name (shipped names have no dots)."""
    return isinstance(text, str) and (":" in text or _dotted_entry(text))


def _dotted_entry(text: str) -> bool:
    # `rewards.py` alone names a file without its function: parse_spec asks for the `:function`
    return "." in text and not text.endswith(".py") and bool(_DOTTED.match(text))


def colon_spelling(text: str) -> str:
    """TRL's import spelling `package.module.name` as the project's `package.module:name`; anything else as is."""
    if isinstance(text, str) and ":" not in text and _dotted_entry(text):
        module, _, name = text.rpartition(".")
        return f"{module}:{name}"
    return text


def parse_spec(text: str, base_dir: Path | None = None) -> UserCodeSpec:
    """Split `file.py:function`, `package.module:function` or `package.module.function` (TRL's spelling);
    ValueError with the fix when malformed.
    A relative file is taken from `base_dir` (the profile's folder) first, then the current directory."""
    target, _, function = colon_spelling(text).rpartition(":")
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
        return UserCodeSpec(text=text, function=function, path=path)
    if not _DOTTED.match(target):
        raise ValueError(f"'{target}' is neither a .py file nor a dotted module name")
    return UserCodeSpec(text=text, function=function, module=target)


def check_spec(spec: UserCodeSpec, kind: str = "reward") -> None:
    """Without running the user's code: the file exists and defines the function (parsed with `ast`), or
    the module can be found. ValueError saying what is missing and how to fix it. `kind` names what the entry
    is in the messages ("reward", "tool", "environment")."""
    if spec.path is not None:
        _check_file(spec, kind=kind)
        return
    found = find_module(spec.module)
    origin = getattr(found, "origin", None)
    if origin and origin.endswith(".py") and Path(origin).is_file():
        _check_file(spec, Path(origin), what=f"module '{spec.module}' ({origin})", kind=kind)


def find_module(dotted: str):
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


def _check_file(spec: UserCodeSpec, path: Path | None = None, what: str | None = None, kind: str = "reward") -> None:
    path = path or spec.path
    if not path.is_file():
        raise ValueError(
            f"{kind} file {path} not found (fix: give the path of an existing .py file, relative "
            "to the profile's folder or the current directory)"
        )
    if path.stat().st_size > MAX_FILE_BYTES:
        if what is not None:
            return  # an installed module that large is someone's library: importing it will tell
        raise ValueError(f"{kind} file {path} is over {MAX_FILE_BYTES // (1024 * 1024)} MB: not a {kind}")
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
