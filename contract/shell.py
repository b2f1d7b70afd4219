"""HOW a command the tool suggests is printed: every word quoted for a POSIX shell, so that a path holding
spaces, quotes or `$(...)` is pasted back as that path and never runs anything."""

from __future__ import annotations

import shlex
from pathlib import Path


def quoted(word: str | Path) -> str:
    """One word as the shell must read it: unchanged when it is plain, else in single quotes."""
    return shlex.quote(str(word))


def command_line(*words: str | Path) -> str:
    """Words joined into a line to paste: `python train.py sample 'my runs/run-1'`."""
    return " ".join(quoted(word) for word in words)
