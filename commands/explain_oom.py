"""`explain-oom FILE`: read a CUDA out-of-memory error (a file, or - for stdin) and say what ran out, where,
and what to change, with each lever's cost."""

from __future__ import annotations

import sys

from contract.errors import EXIT_BAD_INPUT, EXIT_OK
from launcher.oom.explain import explain

SUMMARY = "read a CUDA out-of-memory error and say what ran out, where, and what to change"
EXAMPLES = ("python train.py explain-oom error.txt", "pbpaste | python train.py explain-oom -")


def add_arguments(parser) -> None:
    parser.add_argument("file", metavar="FILE", help="the saved error (a traceback or log), or - for stdin")


def run(args) -> int:
    return explain_file(args.file)


# An OOM error is a few KiB; a log is read from its end, where the error is, up to this much.
MAX_TEXT_BYTES = 16 << 20


def explain_file(path_or_dash: str) -> int:
    """Print the diagnosis for a file (or '-' for stdin).

    Exit 0 when the text was read, whether or not it held an OOM (the output says which: a pasted log
    that is not an OOM is an answer, not a failure); 2 when the file is missing, unreadable, or no regular
    file (a device or a FIFO would never end). A text past MAX_TEXT_BYTES is read from its end.
    """
    from contract.safe_read import after_first_line, read_tail

    try:
        if path_or_dash == "-":
            stream = getattr(sys.stdin, "buffer", None)  # a text stream stands in for stdin in tests
            data = (
                stream.read(MAX_TEXT_BYTES + 1) if stream is not None else sys.stdin.read(MAX_TEXT_BYTES + 1).encode()
            )
            size = len(data)
            data = data[:MAX_TEXT_BYTES]
        else:
            data, size = read_tail(path_or_dash, MAX_TEXT_BYTES)
    except FileNotFoundError:
        print(
            f"error: {path_or_dash}: file not found (fix: give the path of a saved error, or - for stdin)",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    except OSError as exc:
        print(
            f"error: {path_or_dash}: cannot read: {exc.strerror or exc} (fix: save the error to a file and give "
            "its path, or pipe it to - for stdin)",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    if size > MAX_TEXT_BYTES:
        data = after_first_line(data) if path_or_dash != "-" else data
        print(
            f"note: {path_or_dash} is {size / 2**20:.1f} MiB; read its last {MAX_TEXT_BYTES >> 20} MiB", file=sys.stderr
        )
    print(explain(data.decode("utf-8", errors="replace")))
    return EXIT_OK
