#!/usr/bin/env python3
"""grpo-train: GRPO fine-tuning that fits itself to your GPU.

    python train.py plan                 what would run on this machine (instant: no torch)
    python train.py train                plan, then train, surviving out-of-memory
    python train.py --help               every command

Each command is a module of commands/; the flags of the single-command interface are translated to one
command each (commands/legacy.py). Training runs in a child process per attempt.
"""

from __future__ import annotations

import signal
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


def cli() -> int:
    """The program: `python train.py ...` and the `grpo-train` script."""
    # A shell starts a background job with SIGINT ignored, and the interpreter keeps it so; the run's own handlers
    # take SIGINT as "save and stop" once they are in, so it ends the run from the first instant as well
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return main()
    except KeyboardInterrupt:  # during the first imports, before main's own handling
        return 130


if __name__ == "__main__":
    sys.exit(cli())
