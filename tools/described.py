"""WHETHER a tool can be described to the model, read from its source without running it: TRL hands each tool
to transformers (`get_json_schema`), which needs a docstring, a type hint on every argument and each argument
described under `Args:` as `name: what it is`; a tool without them would stop the attempt after the model
loaded. Also the names of an environment's tools (its public methods), so that the profile's rules can refuse
a tool and a method the model would know by one name.

The file is parsed with `ast`, as usercode.entry checks an entry; what the parse cannot see (a method inherited
from another module, a function made at run time) is left to the attempt, which checks the imported tools the
same way before the model loads (tools.load_tools)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

# What TRL never offers as an environment's tool: these two, and names starting with '_'
NOT_TOOLS = ("reset", "get_reward")
_ARGUMENT = re.compile(r"(\w+):")  # an `Args:` entry as transformers reads it: the name, then a colon at once
_SECTION_ENDS = ("Returns:", "Raises:")


def source_of(spec) -> Path | None:
    """The .py file an entry's spec (usercode.entry.UserCodeSpec) names or whose module it names; None when it has
    none to read (a compiled module, a namespace)."""
    if spec.path is not None:
        return spec.path
    from usercode.entry import find_module

    try:
        found = find_module(spec.module)  # found without importing, as check_spec found it
    except ValueError:
        return None
    origin = getattr(found, "origin", None)
    return Path(origin) if origin and origin.endswith(".py") and Path(origin).is_file() else None


def parsed(path: Path | None) -> ast.Module | None:
    """The file's syntax tree, or None when it cannot be read or parsed (usercode.entry said so already)."""
    from usercode.entry import MAX_FILE_BYTES

    if path is None:
        return None
    try:
        if path.stat().st_size > MAX_FILE_BYTES:  # someone's library, not a tool file: the attempt checks
            return None
        return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def definitions(tree: ast.Module) -> dict[str, ast.AST]:
    """The module's top-level functions and classes by name (with those under top-level if / try / with), the
    last definition of a name winning as it does when the module runs."""
    found: dict[str, ast.AST] = {}

    def walk(body) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                found[node.name] = node
            elif isinstance(node, (ast.If, ast.Try, ast.With)):
                for block in ("body", "orelse", "finalbody"):
                    walk(getattr(node, block, None) or [])
                for handler in getattr(node, "handlers", None) or []:
                    walk(handler.body)

    walk(tree.body)
    return found


def methods(cls: ast.ClassDef, defined: dict[str, ast.AST], seen: frozenset = frozenset()) -> dict[str, ast.AST]:
    """The methods of a class, its own over those of the bases defined in the same file (other bases are not
    seen here), by name."""
    found: dict[str, ast.AST] = {}
    for base in cls.bases:
        parent = defined.get(base.id) if isinstance(base, ast.Name) else None
        if isinstance(parent, ast.ClassDef) and parent.name not in seen:
            found.update(methods(parent, defined, seen | {cls.name}))
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):  # `name = something`: no longer the base's method
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    found.pop(target.id, None)
    return found


def tool_methods(cls: ast.ClassDef, defined: dict[str, ast.AST]) -> dict[str, ast.AST]:
    """The methods TRL offers the model as an environment's tools."""
    return {
        name: node
        for name, node in methods(cls, defined).items()
        if name not in NOT_TOOLS and not name.startswith("_") and not _not_a_function(node)
    }


def _not_a_function(node) -> bool:
    """A method TRL does not see as one (it lists the class's plain functions): a property, a classmethod."""
    return any(
        (isinstance(d, ast.Name) and d.id in ("property", "cached_property", "classmethod"))
        or (isinstance(d, ast.Attribute) and d.attr in ("setter", "getter", "deleter", "cached_property"))
        for d in getattr(node, "decorator_list", [])
    )


def documented_arguments(doc: str) -> set[str]:
    """The argument names described under `Args:` (a line of its own, after the first line), as transformers
    reads them: `name: what it is`, up to `Returns:` or `Raises:`."""
    names: set[str] = set()
    inside = False
    for number, line in enumerate(doc.splitlines()):
        text = line.strip()
        if not inside:
            inside = number > 0 and line.lstrip() == "Args:"  # transformers reads no `Args:` with spaces after it
            continue
        if text.startswith(_SECTION_ENDS):
            break
        match = _ARGUMENT.match(text)
        if match:
            names.add(match.group(1))
    return names


def description_problem(node) -> str | None:
    """What keeps transformers from describing a function (or an environment's method) to the model, with
    the fix; None when nothing does."""
    arguments = node.args
    listed = [*arguments.posonlyargs, *arguments.args]
    # transformers skips a first `self` or `cls` without a hint (a method's own); a static method has none
    if listed and listed[0].arg in ("self", "cls") and listed[0].annotation is None:
        listed = listed[1:]
    listed += [a for a in (arguments.vararg, *arguments.kwonlyargs, arguments.kwarg) if a is not None]
    doc = ast.get_docstring(node)
    if not doc or not doc.strip():
        return (
            "has no docstring, so the model cannot be told what it does (fix: a Google-style docstring: a "
            "line saying what it does, then a line `Args:` and a line `name: what it is` per argument)"
        )
    untyped = [a.arg for a in listed if a.annotation is None]
    if untyped:
        return (
            f"has no type hint on {', '.join(repr(n) for n in untyped)} (fix: give every argument a type hint, "
            "e.g. `x: int`, `text: str`, `values: list[float]`)"
        )
    undocumented = [a.arg for a in listed if a.arg not in documented_arguments(doc)]
    if undocumented:
        return (
            f"has no description of {', '.join(repr(n) for n in undocumented)} in its docstring (fix: a line "
            "`Args:` after the first, then a line `name: what it is` per argument)"
        )
    return None
