"""The README is a front door and docs/ holds the rest: their size, their links, and the pages generated from
the code (profile keys, environment variables, the old flags) kept equal to it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = REPO / "docs"
PAGES = sorted(DOCS.glob("*.md"))
LINK = re.compile(r"\]\(([^)#\s]+)(#[^)\s]*)?\)")


def test_the_readme_is_a_front_door():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines: move detail to docs/"
    gpu = next(i for i, line in enumerate(lines, 1) if line.startswith("## GPU quickstart"))
    assert gpu <= 60, f"the GPU quickstart starts on line {gpu}"


@pytest.mark.parametrize("page", [README, *PAGES], ids=lambda p: p.name)
def test_every_relative_link_resolves(page):
    text = page.read_text(encoding="utf-8")
    for target, _anchor in LINK.findall(text):
        if "://" in target or target.startswith("mailto:"):
            continue
        assert (page.parent / target).exists(), f"{page.name} links to {target}, which is not there"


@pytest.mark.parametrize("page", [README, *PAGES], ids=lambda p: p.name)
def test_every_command_shown_is_one_the_tool_has(page):
    from commands import COMMANDS
    from commands.legacy import TABLE

    # a command as a user types it: in a code span or block (a line or a backtick starts it), or after `docker run`
    shown = re.compile(
        r"(?:^\s*|`|\$ |docker run [^`\n]*?)(?:python train\.py|grpo-train)\s+([a-z][\w-]*|--?[\w-]+)", re.MULTILINE
    )
    for match in shown.finditer(page.read_text(encoding="utf-8")):
        word = match.group(1)
        if word.startswith("-"):
            assert word.partition("=")[0] in TABLE, f"{page.name}: `{match.group(0)}` uses no known flag"
        else:
            assert word in COMMANDS, f"{page.name}: `{match.group(0)}` names no command"


def test_the_profile_keys_page_is_generated_from_the_schema():
    from profiles.help import keys_markdown

    assert (DOCS / "profile-keys.md").read_text(encoding="utf-8") == keys_markdown(), (
        "regenerate it: python train.py profiles keys --markdown > docs/profile-keys.md"
    )


def test_the_interfaces_page_lists_every_variable_and_old_flag():
    from commands.legacy import TABLE
    from contract.environment import markdown

    text = (DOCS / "interfaces.md").read_text(encoding="utf-8")
    assert markdown() in text, "regenerate the table of docs/interfaces.md: python -m contract.environment"
    for flag in TABLE:
        if flag != "-h" and flag != "--help":
            assert f"`{flag}" in text, f"docs/interfaces.md does not list the old flag {flag}"


def test_every_grpo_variable_in_the_code_is_in_the_table():
    from contract.environment import VARIABLES

    declared = {v.name for v in VARIABLES}
    found = set()
    for package in (
        "commands",
        "contract",
        "evaluation",
        "launcher",
        "profiles",
        "rewards",
        "tasks",
        "tiny_model",
        "trainer",
    ):
        for path in (REPO / package).rglob("*.py"):
            found |= set(re.findall(r"[\"'](GRPO_[A-Z_]+)[\"']", path.read_text(encoding="utf-8")))
    assert found <= declared, f"GRPO_ variables missing from contract/environment.py: {sorted(found - declared)}"
