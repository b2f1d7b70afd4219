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


class EarlyInterrupts:
    """SIGINT until the run's own handlers are in: raised as KeyboardInterrupt, as the interpreter's default
    does, and kept as well. One raised while a weakref callback runs (an import's module-lock cleanup, a
    finaliser) is dropped by the interpreter and the run would go on; the supervisor's handlers take the kept
    ones over as they go in (launcher.run.child.signals_forwarded reads `signals` from the handler they replace)."""

    def __init__(self) -> None:
        self.signals: list[int] = []

    def __call__(self, signum, frame):
        self.signals.append(signum)
        raise KeyboardInterrupt


def cli() -> int:
    """The program: `python train.py ...` and the `grpo-train` script."""
    # A shell starts a background job with SIGINT ignored, and the interpreter keeps it so; the run's own handlers
    # take SIGINT as "save and stop" once they are in, so it ends the run from the first instant as well
    signal.signal(signal.SIGINT, EarlyInterrupts())
    say_unraisable = sys.unraisablehook

    def unraisable(record) -> None:
        # a KeyboardInterrupt dropped in a callback comes from one of the run's handlers, which kept the signal:
        # its traceback would report a failure that is not one
        if not isinstance(record.exc_value, KeyboardInterrupt):
            say_unraisable(record)

    sys.unraisablehook = unraisable
    try:
        return main()
    except KeyboardInterrupt:  # during the first imports, before main's own handling
        return 130
    finally:
        sys.unraisablehook = say_unraisable


if __name__ == "__main__":
    sys.exit(cli())
