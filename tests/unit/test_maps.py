"""The maps of the code that the docs draw, held against the code: every file CONTRIBUTING.md,
docs/architecture.md and docs/development.md point to exists; a name said to live in a module is defined there; a
new profile key is sent to the module that declares the keys; and architecture.md's walk of `train` to the first
GRPO step names modules that the CPU default run imports before that step, as many as it says it imports,
measured on the run itself (tests/unit/first_step/sitecustomize.py records them)."""

from __future__ import annotations

import ast
import json
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from support.cli import cpu_run_env, start_train_py
from support.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
ARCHITECTURE = REPO / "docs" / "architecture.md"
CONTRIBUTING = REPO / "CONTRIBUTING.md"
MAPS = [CONTRIBUTING, ARCHITECTURE, REPO / "docs" / "development.md"]
HOOK = Path(__file__).resolve().parent / "first_step"
# How far the doc's figures may lie from the measured ones before the map counts as drifted: a module or two
# moved or split passes; a layer added or removed does not
TOLERANCE = 0.10

FENCE = re.compile(r"^```.*?^```", re.S | re.M)
# a path in the repository as the prose writes it: folders, then a file with its suffix, or a folder ending in /
POINTER = re.compile(
    r"(?<![\w./<-])((?:[A-Za-z_][\w.-]*/)+(?:[\w.-]+\.(?:py|md|json|yaml|toml|txt|sh|lock))?)(?![\w/<])"
)
# "**path.py** `name`", "`path.py` `name`", "`path.py` (`name`", "`path.py`: `name`": the name lives in the module
PATH_THEN_NAME = re.compile(r"[*`]+(?P<path>[\w/]+\.py)[*`]+:? \(?`(?P<name>[A-Za-z_]\w*)")
# "`name` in `path.py`"
NAME_IN_PATH = re.compile(r"`(?P<name>[A-Za-z_]\w*)` in `(?P<path>[\w/]+\.py)`")
BOLD_MODULE = re.compile(r"\*\*([\w/]+\.py)\*\*")
MEASURED = re.compile(
    r"(\d+) of the project's modules, ([\d.]+)k lines, are imported before the first GRPO step".replace(" ", r"\s+")
)
BY_PROCESS = re.compile(r"(\d+) in the supervisor's process and (\d+) in the attempt's".replace(" ", r"\s+"))


def prose(path: Path) -> str:
    """The page without its code blocks (a tree drawn there names paths relative to its own root)."""
    return FENCE.sub("", path.read_text(encoding="utf-8"))


def section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start : end if end >= 0 else len(text)]


def pointers(text: str) -> set[str]:
    """The repository paths the text names; placeholders (`benchmarks/gpu/<card>.md`, `path/to/file.py`) left out."""
    return {found for found in POINTER.findall(text) if not found.startswith("path/to/")}


def top_level_names(path: Path) -> set[str]:
    """What a module defines or imports at its top level: the names `module.name` reaches."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(target.id for target in node.targets if isinstance(target, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return names


def module_name(path: str) -> str:
    parts = Path(path).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@pytest.mark.parametrize("page", MAPS, ids=lambda page: page.name)
def test_every_file_a_map_points_to_exists(page):
    named = pointers(prose(page))
    assert named, f"{page.name}: no path found; has the pattern stopped matching?"
    missing = sorted(path for path in named if not (REPO / path).exists())
    assert missing == [], f"{page.relative_to(REPO)} points to what the repository lacks: {missing}; fix the page"


@pytest.mark.parametrize("page", MAPS, ids=lambda page: page.name)
def test_a_name_said_to_live_in_a_module_is_defined_there(page):
    text = prose(page)
    claims = {(m["path"], m["name"]) for pattern in (PATH_THEN_NAME, NAME_IN_PATH) for m in pattern.finditer(text)}
    wrong = sorted(
        f"{name} in {path}"
        for path, name in claims
        if not (REPO / path).is_file() or name not in top_level_names(REPO / path)
    )
    assert wrong == [], f"{page.relative_to(REPO)} says these live where they do not: {wrong}; fix the page"


def declared_keys() -> tuple[str, str]:
    """(the class, its file) where the profile's keys are declared: the class in profiles/ with the most fields
    made by `_key`, found in the source."""
    best = (0, "", "")
    for path in sorted((REPO / "profiles").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                keys = sum(
                    isinstance(field, ast.AnnAssign)
                    and isinstance(field.value, ast.Call)
                    and getattr(field.value.func, "id", "") == "_key"
                    for field in node.body
                )
                best = max(best, (keys, node.name, path.relative_to(REPO).as_posix()))
    assert best[0] > 0, "no class in profiles/ declares its fields with _key: update this test with the code"
    return best[1], best[2]


def test_a_new_profile_key_is_sent_where_the_keys_are_declared():
    steps = section(CONTRIBUTING.read_text(encoding="utf-8"), "## Add a profile key")
    first = NAME_IN_PATH.search(steps)
    assert first is not None, "CONTRIBUTING.md's 'Add a profile key' names no `Class` in `module.py` to add it to"
    cls, path = declared_keys()
    assert (first["name"], first["path"]) == (cls, path), (
        f"CONTRIBUTING.md sends a new profile key to `{first['name']}` in `{first['path']}`; the keys are declared "
        f"in `{cls}` in `{path}`: fix the page"
    )
    assert "_key" in top_level_names(REPO / path) and "`_key(" in steps


def the_walk() -> tuple[str, list[str]]:
    """architecture.md's walk of `train` (its section) and the modules it sets in bold: each runs on the way."""
    walk = section(ARCHITECTURE.read_text(encoding="utf-8"), "## `train`, from the command line to the first GRPO step")
    return walk, BOLD_MODULE.findall(walk)


def test_the_walk_names_its_modules_in_bold_and_they_exist():
    _, bold = the_walk()
    assert len(bold) >= 10, "architecture.md's walk of `train` sets the modules it passes through in bold"
    missing = [path for path in bold if not (REPO / path).is_file()]
    assert missing == [], f"docs/architecture.md's walk names modules that are gone: {missing}; follow them"


def measure_first_step(out: Path, tiny_cache: Path) -> dict[int, dict]:
    """The CPU default run (`python train.py train`, no GPU) stopped at its first GRPO step: each Python process's
    record of the project modules it had imported then ({pid: record}); the supervisor's pid under key 0."""
    records = out / "first-step"
    records.mkdir(parents=True)
    env = cpu_run_env(
        tiny_cache,
        CUDA_VISIBLE_DEVICES="",
        FIRST_STEP_MAP_DIR=str(records),
        PYTHONPATH=os.pathsep.join(filter(None, [str(HOOK), os.environ.get("PYTHONPATH")])),
    )
    with open(out / "log", "w") as log:
        process = start_train_py(
            "train", "--output-dir", out / "runs", env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    supervisor = records / f"{process.pid}.json"
    try:
        wait_until(
            lambda: (records / "step").exists() and supervisor.exists(),
            watch=[out],
            process=process,
            what="the first GRPO step",
        )
    finally:
        found = {int(path.stem): json.loads(path.read_text()) for path in records.glob("*.json")}
        # nothing of the run is needed past this point: the attempt (in a session of its own), then the supervisor;
        # a process that wrote its record at its exit is gone already
        live = [pid for pid, record in found.items() if record["why"] != "exit" and pid != process.pid]
        for pid in [*live, process.pid]:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        process.wait()
    found[0] = found[process.pid]
    return found


def test_the_walk_to_the_first_grpo_step_is_the_measured_one(tmp_path, tiny_cache):
    """architecture.md's figures (modules and lines imported before the first GRPO step, by process) within
    TOLERANCE of what the CPU default run imports, and each module its walk sets in bold among them."""
    records = measure_first_step(tmp_path, tiny_cache)
    supervisor = records.pop(0)
    step = [record for record in records.values() if record["why"] == "step"]
    assert len(step) == 1, [record["argv"] for record in records.values()]
    modules: dict[str, str] = {}
    for record in records.values():
        modules.update(record["modules"])
    lines = sum(len((REPO / file).read_text(encoding="utf-8").splitlines()) for file in set(modules.values()))
    measured = (len(modules), lines / 1000, len(supervisor["modules"]), len(step[0]["modules"]))

    walk, bold = the_walk()
    said, by_process = MEASURED.search(walk), BY_PROCESS.search(walk)
    assert said and by_process, "docs/architecture.md's walk states no measured figures in the words this test reads"
    doc = (int(said[1]), float(said[2]), int(by_process[1]), int(by_process[2]))
    drifted = [
        f"{what}: the doc says {claim:g}, the run measured {real:g}"
        for what, claim, real in zip(("modules", "thousand lines", "supervisor's", "attempt's"), doc, measured)
        if abs(claim - real) > TOLERANCE * real
    ]
    assert drifted == [], f"docs/architecture.md's map has drifted ({'; '.join(drifted)}): update its figures"
    not_imported = [path for path in bold if module_name(path) not in modules]
    assert not_imported == [], (
        f"docs/architecture.md's walk names modules the run does not import before the first step: {not_imported}"
    )


def test_the_slow_threshold_the_docs_state_is_the_one_applied():
    from conftest import SLOW_S

    said = f"{SLOW_S:g} s"
    pages = {
        "docs/development.md": f"`SLOW_S` ({said})",
        "CONTRIBUTING.md": f"Slow is {said} or more",
        "Makefile": f"under {said} each",
    }
    wrong = [page for page, words in pages.items() if words not in " ".join((REPO / page).read_text().split())]
    assert wrong == [], f"{wrong} state another threshold than tests/conftest.py's SLOW_S ({said}): fix them"
