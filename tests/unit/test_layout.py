"""The layout's promises, read from the source: no import cycle anywhere, and dependencies point one way.

    train.py -> commands -> measure (the card's measurement kit) -> launcher, trainer
             commands -> launcher (planning, supervising; no torch)
                         -> [child process] trainer (one attempt) -> evaluation -> tools, rewards
                         -> tiny_model (the offline models)       -> evaluation
    launcher, trainer, tiny_model -> profiles (what a profile may say) -> tasks, tools -> rewards
    rewards, tools -> usercode (the user's own code: found, checked, imported; its failures) -> contract

Neither the trainer nor the tiny model imports the other: the command that starts an attempt hands the
trainer a model to load. Function-level imports count: a cycle that only closes inside a function still ties
two modules together."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = sorted(p.parent.name for p in ROOT.glob("*/__init__.py") if p.parent.name not in ("tests",))
EVERYTHING = {
    "commands",
    "contract",
    "evaluation",
    "launcher",
    "measure",
    "profiles",
    "rewards",
    "tasks",
    "tiny_model",
    "tools",
    "trainer",
    "train",
    "usercode",
}

# package -> the project packages it may import (besides itself); anything else is against the layout
ALLOWED = {
    "contract": set(),
    "usercode": {"contract"},
    "rewards": {"contract", "usercode"},
    "tools": {"contract", "rewards", "usercode"},
    "tasks": {"contract"},
    "profiles": {"contract", "tasks", "rewards", "tools", "usercode"},
    "evaluation": {"contract", "rewards", "tools", "usercode"},
    "tiny_model": {"contract", "tasks", "rewards", "tools", "profiles", "evaluation", "usercode"},
    "trainer": {"contract", "tasks", "rewards", "tools", "profiles", "evaluation", "usercode"},
    "launcher": {"contract", "tasks", "rewards", "tools", "profiles", "usercode"},
    "measure": {"contract", "tasks", "rewards", "tools", "profiles", "evaluation", "launcher", "trainer", "usercode"},
    "commands": EVERYTHING - {"train", "commands"},
    "train": {"commands", "contract"},
}
FORBIDDEN = {package: EVERYTHING - allowed - {package} for package, allowed in ALLOWED.items()}


def modules() -> dict[str, Path]:
    found = {"train": ROOT / "train.py"}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def import_graph() -> dict[str, set[str]]:
    """module -> the project modules it imports (anywhere in its body), resolved to the deepest module."""
    found = modules()

    def resolve(name: str) -> str | None:
        while name and name not in found:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in found.items():
        targets: set[str] = set()
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                candidates = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = name.split(".") if is_package else name.split(".")[:-1]
                    parts = parts[: len(parts) - (node.level - 1)]
                    base = ".".join(parts + ([node.module] if node.module else []))
                candidates = [base] + [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            for candidate in candidates:
                target = resolve(candidate)
                if target and target != name:
                    targets.add(target)
        graph[name] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_anywhere():
    found = cycles(import_graph())
    assert not found, f"import cycles: {found}"


def test_dependencies_point_one_way():
    wrong = []
    for name, targets in import_graph().items():
        top = name.split(".")[0]
        for target in targets:
            if target.split(".")[0] in FORBIDDEN.get(top, ()):
                wrong.append(f"{name} imports {target}")
    assert not wrong, "imports against the layout: " + "; ".join(sorted(wrong))


def test_every_package_says_what_question_it_answers():
    for init in ROOT.glob("*/**/__init__.py"):
        if init.parts[len(ROOT.parts)] in ("tests",) or ".venv" in init.parts or "site-packages" in init.parts:
            continue
        if init.relative_to(ROOT).parts[0] not in PACKAGES:
            continue
        assert ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))), (
            f"{init.relative_to(ROOT)} has no docstring"
        )


def test_every_package_has_its_place_in_the_layout():
    assert set(PACKAGES) | {"train"} == set(ALLOWED), "a package without a row in ALLOWED"


def test_the_trainer_never_names_the_tiny_model():
    """The trainer loads a path it is given: the offline model is the starting command's business."""
    for path in (ROOT / "trainer").glob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert "tiny_model" not in text, f"trainer/{path.name} reaches into tiny_model"


MAX_MODULE_LINES = 500  # a module past this answers more than one question: split it by what it answers


def test_no_source_module_passes_the_line_limit():
    long = {name: n for name, path in modules().items() if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, long
