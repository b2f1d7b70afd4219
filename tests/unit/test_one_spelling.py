"""One spelling: every message, comment, profile header, doc, Makefile target and script says the command
(`python train.py plan`, `python train.py ledger --forget NAME`), never the old flag it replaced (`--dry-run`,
`python train.py --forget NAME`). The old flags may be named only where they are translated or said to still work:
commands/legacy.py (the translation), the old-flag section of docs/interfaces.md, CHANGELOG.md, and one line
each of the README and of the top help. Tests are not read here (the translation's tests run the old flags).

A spelling is old when it is
- a flag of commands.legacy.TABLE that asks for a command and that no command takes (`--auto`, `--ledger`);
- a flag that asks for one command and that another command takes with another meaning (`--dry-run` is
  `plan`, and `calibrate --dry-run` is calibrate's own): old unless that command is named before it on its line
  or the line is in that command's module;
- a command line that starts with a flag instead of a command (`python train.py --profile F`,
  `grpo-train --set K=V`): options alone still mean `train`, but what is shown names the command."""

from __future__ import annotations

import os
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# What is read: the tree's source, profiles, docs, Makefile, scripts, job script and Dockerfile.
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".sh", ".sbatch", ".toml", ".cfg", ".ini"}
NAMES = {"Makefile", "Dockerfile", "run"}  # `run`: .ci/run, CI's script
SKIP_DIRS = {"tests", "tests_vllm", "outputs", "wheels", "build", "dist", "node_modules", "__pycache__"}
HIDDEN_DIRS_READ = {".ci", ".github"}

# Where the old spellings may stand.
WHOLE_FILES = {"commands/legacy.py", "CHANGELOG.md"}
SECTIONS = {"docs/interfaces.md": "## The old flags"}  # from this heading to the next `## `
ONE_LINE = {"README.md": "still work", "commands/__init__.py": "still work"}  # one line, saying so


def _files() -> list[Path]:
    """The files read, walking the tree without entering what it skips (.venv, .git, tests, outputs)."""
    found = []
    for folder, dirs, files in os.walk(REPO):
        dirs[:] = sorted(
            d
            for d in dirs
            if d not in SKIP_DIRS and not d.endswith(".egg-info") and (not d.startswith(".") or d in HIDDEN_DIRS_READ)
        )
        for name in sorted(files):
            path = Path(folder) / name
            if path.suffix in SUFFIXES or name in NAMES:
                found.append(path)
    return found


# a command line without its command: train.py or grpo-train, then a flag (not --help), across line breaks
# (an argument list written one item a line)
COMMAND_LINE = re.compile(r"(?<![\w/.-])(?:train\.py|grpo-train)[\"'`),]*\s+[\"'`]?(?!--help\b|-h\b)(--?[a-z][\w-]*)")


def _flags() -> list[tuple[re.Pattern, str | None, str]]:
    """The old flags: (the pattern, the command whose own option it is when named before it on its line or in
    that command's module, what to say instead)."""
    from commands import COMMANDS, parser_for
    from commands.legacy import TABLE

    taken: dict[str, set[str]] = {}  # option -> the commands that take it
    for name in COMMANDS:
        for action in parser_for(name)._actions:
            for option in action.option_strings:
                taken.setdefault(option, set()).add(name)
    flags = []
    for flag, old in TABLE.items():
        if old.command is None:
            continue
        said = re.compile(rf"(?<![\w-]){re.escape(flag)}(?![\w-])")
        others = taken.get(flag, set()) - {old.command}
        if flag not in taken:
            flags.append((said, None, f"`{old.command}`"))
        elif others:
            (other,) = sorted(others)
            flags.append((said, other, f"`{old.command}` (or `{other} {flag}`)"))
    return flags


def _named(command: str, line: str, end: int) -> bool:
    return re.search(rf"(?<![\w.-]){re.escape(command)}(?![\w.-])", line[:end]) is not None


def hits(text: str, rel: str = "", flags=None) -> list[tuple[int, str, str]]:
    """(line number, the old spelling, what to say instead) for each old spelling in a file's text."""
    flags = _flags() if flags is None else flags
    lines = text.splitlines()
    found = []
    for number, line in enumerate(lines, 1):
        for pattern, command, instead in flags:
            for match in pattern.finditer(line):
                if command and (
                    rel == f"commands/{command.replace('-', '_')}.py" or _named(command, line, match.start())
                ):
                    continue  # that command's own option: in its module, or after its name
                found.append((number, match.group(0), f"say {instead}"))
    for match in COMMAND_LINE.finditer(text):
        number = text.count("\n", 0, match.start(1)) + 1
        found.append((number, match.group(1), "say the command first: `python train.py COMMAND --flag`"))
    return sorted(found)


def _allowed_lines(rel: str, lines: list[str]) -> set[int]:
    if rel in WHOLE_FILES:
        return set(range(1, len(lines) + 1))
    if rel in SECTIONS:
        heading = SECTIONS[rel]
        start = next(i for i, line in enumerate(lines, 1) if line.startswith(heading))
        end = next((i for i, line in enumerate(lines, 1) if i > start and line.startswith("## ")), len(lines) + 1)
        return set(range(start, end))
    if rel in ONE_LINE:
        return {next((i for i, line in enumerate(lines, 1) if ONE_LINE[rel] in line), 0)}
    return set()


def old_spellings() -> list[str]:
    """`file:line: what` for each old spelling outside the places that may name one."""
    found = []
    flags = _flags()
    for path in _files():
        rel = path.relative_to(REPO).as_posix()
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        lines = text.splitlines()
        allowed = _allowed_lines(rel, lines)
        for number, said, instead in hits(text, rel, flags):
            if number not in allowed:
                found.append(f"{rel}:{number}: {said!r} ({instead}): {lines[number - 1].strip()[:100]}")
    return found


def test_the_old_flags_are_named_only_where_they_are_translated():
    found = old_spellings()
    assert not found, f"{len(found)} old spelling(s) outside commands/legacy.py and its table:\n" + "\n".join(found)


def test_the_grep_finds_each_kind_of_old_spelling():
    """The patterns themselves: what they catch and what they leave alone."""
    flags = _flags()

    def caught(text: str) -> bool:
        return bool(hits(text, flags=flags))

    for old in (
        "`python train.py --auto`",
        "see --ledger",
        "add --dry-run to plan",
        "python train.py --profile p.yaml --set seed=1",
        '[sys.executable, str(REPO / "train.py"), "--resume"]',
        '[\n    sys.executable,\n    str(REPO / "train.py"),\n    "--profile",\n    path,\n]',
        "docker run --gpus all grpo-train --set max_steps=5",
        "--fit-table: no cuda profiles",
        "--explain-oom FILE",
    ):
        assert caught(old), old
    for new in (
        "`python train.py plan --json`",
        "python train.py calibrate --dry-run",
        "python train.py --help",
        "python train.py ledger --forget all",
        "`train --resume` continues it",
        "slurm/grpo-train.sbatch --nodes 2",
        "--samples 4, --fit-tables, --dry-runs",
        "docker build -t grpo-train .",
    ):
        assert not caught(new), new
