#!/usr/bin/env python3
"""grpo-train: GRPO fine-tuning that fits itself to your GPU.

    python train.py plan                 what would run on this machine (instant: no torch)
    python train.py train                plan, then train, surviving out-of-memory
    python train.py --help               every command

Each command is a module of commands/; the flags of the single-command interface are translated to one
command each (commands/legacy.py). Training runs in a child process per attempt.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    from commands import main as run_command

    return run_command(argv)


def __getattr__(name: str):
    if name == "DEFAULT_PROFILES_DIR":  # the shipped ladder (commands.options), for tools that read it here
        from commands.options import DEFAULT_PROFILES_DIR

        return DEFAULT_PROFILES_DIR
    raise AttributeError(name)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # during the first imports, before main's own handling
        sys.exit(130)
