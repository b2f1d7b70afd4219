"""`explain-oom FILE`: read a CUDA out-of-memory error (a file, or - for stdin) and say what ran out, where,
and what to change, with each lever's cost."""

from __future__ import annotations

import sys
from pathlib import Path

from contract.errors import EXIT_BAD_INPUT, EXIT_OK
from launcher.oom.explain import explain

SUMMARY = "read a CUDA out-of-memory error and say what ran out, where, and what to change"
EXAMPLES = ("python train.py explain-oom error.txt", "pbpaste | python train.py explain-oom -")


def add_arguments(parser) -> None:
    parser.add_argument("file", metavar="FILE", help="the saved error (a traceback or log), or - for stdin")


def run(args) -> int:
    return explain_file(args.file)


def explain_file(path_or_dash: str) -> int:
    """Print the diagnosis for a file (or '-' for stdin).

    Exit 0 when the text was read, whether or not it held an OOM (the output says which: a pasted log
    that is not an OOM is an answer, not a failure); 2 when the file is missing or unreadable.
    """
    try:
        if path_or_dash == "-":
            text = sys.stdin.read()
        else:
            text = Path(path_or_dash).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        print(
            f"error: {path_or_dash}: file not found (fix: give the path of a saved error, or - for stdin)",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    except OSError as exc:
        print(f"error: {path_or_dash}: cannot read: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(explain(text))
    return EXIT_OK
