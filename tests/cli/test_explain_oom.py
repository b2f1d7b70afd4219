"""`explain-oom` as a user runs it: a file or stdin, exit statuses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from contract import oom as oom
from contract import oom_site as oom_site

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parents[2] / "tests" / "data" / "oom"


def text(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


@pytest.mark.slow
def test_train_py_explain_oom_from_stdin():
    done = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "--explain-oom", "-"],
        input=text("torch_logits_gib.txt"),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "shortfall 3.29 GiB (asked - free)" in done.stdout
    missing = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "--explain-oom", "no-such-file.txt"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert missing.returncode == 2
    assert "no-such-file.txt: file not found" in missing.stderr
