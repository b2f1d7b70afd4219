"""WHAT makes the user's data unusable, said with its fix: a file that is empty, not UTF-8 or too wide for
`datasets` to read in reasonable time, what `datasets` could not parse (read back as the cause and its line),
and more rows than MAX_UNREADABLE_SHARE without a question or a readable answer (named as the file counts them).
"""

from __future__ import annotations

import json
from pathlib import Path

from contract.errors import UsageError
from tasks.data_spec import DataSpec

# More unreadable answers than this share and the data is refused (fewer are dropped and counted).
MAX_UNREADABLE_SHARE = 0.1
# A gold cell past this many characters or lines, without a \boxed{} or a `#### N` line, is a worked solution
# whose final answer cannot be told (tasks.user_data.final_answer): compared whole, no answer would match it.
WORKED_CHARS = 200
WORKED_LINES = 3


def first_line(error: BaseException) -> str:
    """The innermost cause of an error in one line, named by its type (`datasets` wraps the parser's error)."""
    cause = error
    while cause.__cause__ is not None or cause.__context__ is not None:  # datasets wraps the parser's error
        cause = cause.__cause__ or cause.__context__
    text = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
    return f"{type(cause).__name__}: {text}"[:300]


def _bad_json_line(path: Path) -> str | None:
    """The first line of a JSON Lines file that does not parse, for the error message."""
    try:
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if line.strip():
                    try:
                        json.loads(line)
                    except ValueError as exc:
                        return f"line {number}: {exc}"
    except (OSError, UnicodeDecodeError) as exc:
        return str(exc)
    return None


# How much of a text file is read to tell its encoding and shape before `datasets` parses it all.
SNIFF_BYTES = 1 << 20


def text_problem(path: Path) -> str | None:
    """What makes a .csv / .json / .jsonl file unreadable as UTF-8 rows, from its first SNIFF_BYTES: empty,
    UTF-16, NUL bytes, or another encoding (Latin-1, Windows-1252), with the line; None when it looks right."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(SNIFF_BYTES)
    except OSError as exc:
        return f"cannot be opened ({exc.strerror or exc})"
    if not head.strip():
        return (
            "the file is empty: no rows (fix: add a header line and rows)"
            if path.suffix.lower() == ".csv"
            else "the file is empty: no rows (fix: add rows, one JSON object per line)"
        )
    if head.startswith((b"\xff\xfe", b"\xfe\xff")) or b"\x00" in head[:4096]:
        return (
            "the file is UTF-16 text (or holds NUL bytes), not UTF-8 (fix: save it as UTF-8, e.g. `iconv -f "
            f"utf-16 -t utf-8 {path.name} > utf8-{path.name}`, or 'CSV UTF-8' in a spreadsheet's Save As)"
        )
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 4:  # not a character cut in two by the sniff's end
            line = head[: exc.start].count(b"\n") + 1
            return (
                f"the file is not UTF-8 text (byte 0x{head[exc.start]:02x} on line {line}: Latin-1 or "
                f"Windows-1252?) (fix: save it as UTF-8, e.g. `iconv -f latin1 -t utf-8 {path.name} > "
                f"utf8-{path.name}`)"
            )
    return None


# `datasets` handles a table's column list in time that grows with its square (its Features are rebuilt
# column by column): a hundred-row file of 2,000 columns took minutes. Past this, the file is refused at once.
MAX_COLUMNS = 256


def column_count(path: Path) -> int | None:
    """How many columns a local file has, from its header (CSV), its first object (JSON Lines) or its schema
    (Parquet); None when that cannot be told cheaply (a .json list, an unreadable head)."""
    import csv
    import io

    suffix = path.suffix.lower()
    try:
        if suffix == ".parquet":
            import pyarrow.parquet as pq

            return len(pq.read_schema(path).names)
        with open(path, "rb") as handle:
            head = handle.read(SNIFF_BYTES).decode("utf-8", errors="replace")
        first = head.split("\n", 1)[0]
        if suffix == ".csv":
            from tasks.csv_delimiter import delimiter_of

            return len(next(csv.reader(io.StringIO(first), delimiter=delimiter_of(head)), []))
        if suffix == ".jsonl" and "\n" in head:
            row = json.loads(first)
            return len(row) if isinstance(row, dict) else None
    except Exception:  # noqa: BLE001 - the reader proper says what is wrong with the file
        return None
    return None


def read_error(path: Path, kind: str, error: BaseException) -> str:
    """Why `datasets` could not read a local file, with the fix that fits the cause."""
    text = first_line(error)
    suffix = path.suffix.lower() if kind == "file" else ""
    if "corresponds to no data" in text or "StopIteration" in text:
        return (
            "it holds no rows (fix: add rows below the header line)"
            if suffix == ".csv"
            else "it holds no rows (fix: add rows)"
        )
    if "Invalid UTF8" in text or "UnicodeDecodeError" in text:
        return (
            f"cannot be read ({text}): the file is not UTF-8 text past its first megabyte (fix: save it as "
            "UTF-8, e.g. `iconv -f latin1 -t utf-8`)"
        )
    if suffix == ".jsonl":
        return f"cannot be read ({_bad_json_line(path) or text}) (fix: one JSON object per line)"
    if suffix == ".json":
        return (
            f"cannot be read ({text}) (fix: a list of objects [{{...}}, ...], one object per line, or "
            '{"data": [{...}, ...]})'
        )
    if suffix == ".csv":
        return f"cannot be read ({text}) (fix: a header line naming the columns, then one row per line)"
    return f"cannot be read ({text})"


def shown_rows(numbers: list[int]) -> str:
    """File positions as people count rows: from 1, the first data row after any header being row 1."""
    shown = ", ".join(str(n + 1) for n in numbers[:5])
    return f"{shown}{', ...' if len(numbers) > 5 else ''}"


def check_unreadable(
    spec: DataSpec,
    where: str,
    unreadable: list[int],
    total: int,
    question: str | None,
    answer: str,
    default_pattern: str | None = None,
    no_question: list[int] = (),
) -> None:
    """Refuse data of which more than MAX_UNREADABLE_SHARE of the rows have no readable answer or an empty
    question, saying which of the two it is; the rows named are the file's."""
    share = len(unreadable) / total if total else 0.0
    if share <= MAX_UNREADABLE_SHARE:
        return
    empty = set(no_question)
    no_answer = sorted(n for n in unreadable if n not in empty)
    both = bool(empty) and bool(no_answer)  # each part then names its own rows
    pattern = spec.answer_pattern or default_pattern
    parts, fixes = [], []
    if empty:
        parts.append(
            f"{len(empty)} have an empty '{question}' cell" + (f" (rows {shown_rows(sorted(empty))})" if both else "")
        )
        fixes.append(f"fill the '{question}' cells, or set question_field to the column holding the questions")
    if no_answer:
        read_from = f"column '{answer}'" + (f" with answer_pattern {pattern!r}" if pattern else "")
        parts.append(
            f"the answer of {len(no_answer)} cannot be read from {read_from}"
            + (f" (rows {shown_rows(no_answer)})" if both else "")
        )
        worked = (
            ""
            if pattern
            else " (a worked solution is read by its last \\boxed{} or its `#### N` line; one with neither, or any "
            f"answer over {WORKED_CHARS} characters or of {WORKED_LINES} lines or more, is not taken whole as the gold)"
        )
        fixes.append(
            "fill those answer cells, or set answer_pattern (a regex whose first group is the gold "
            f"answer) or answer_field{worked}"
        )
    raise UsageError(
        f"dataset {spec.dataset}{where}: {len(unreadable)} of {total} rows ({share:.0%}; rows "
        f"{shown_rows(sorted(unreadable))} of the file, counted from 1 after any header) cannot be "
        f"used: {'; '.join(parts)} (more than {MAX_UNREADABLE_SHARE:.0%} is refused) (fix: "
        f"{'; '.join(fixes)})"
    )
