"""`explain-oom` as a user runs it: a file or stdin, exit statuses."""

from __future__ import annotations

from pathlib import Path

from contract import oom as oom
from contract import oom_site as oom_site
from support.cli import train_py

DATA = Path(__file__).resolve().parents[2] / "tests" / "data" / "oom"


def text(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


def test_train_py_explain_oom_from_stdin():
    done = train_py("--explain-oom", "-", input=text("torch_logits_gib.txt"))
    assert done.returncode == 0, done.stderr
    assert "shortfall 3.29 GiB (asked - free)" in done.stdout
    missing = train_py("--explain-oom", "no-such-file.txt")
    assert missing.returncode == 2
    assert "no-such-file.txt: file not found" in missing.stderr
