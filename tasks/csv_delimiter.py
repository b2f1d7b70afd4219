"""WHICH character separates the columns of the user's CSV file: a comma, or what a spreadsheet saved in another
locale writes (`;`), a tab, or `|`, told from the file's first lines (csv.Sniffer, limited to those four).
Every reader of a user's .csv (the rows, the column count, the planner's sample of answers) asks here, so that
they all see the same columns."""

from __future__ import annotations

import csv
from pathlib import Path

DELIMITERS = ",;\t|"
SNIFF_CHARS = 16 * 1024  # the first lines are enough: a header and some rows


def delimiter_of(text: str) -> str:
    """The delimiter of CSV text (its first lines are enough); a comma when the sniff cannot tell (one column,
    or lines that agree on no delimiter), as `datasets` reads a .csv by default."""
    head = text[:SNIFF_CHARS]
    if len(text) > SNIFF_CHARS and "\n" in head:
        head = head[: head.rindex("\n")]  # the last line may be cut: it would not agree with the others
    if not head.strip():
        return ","
    try:
        found = csv.Sniffer().sniff(head, delimiters=DELIMITERS).delimiter
    except csv.Error:
        return ","
    if found != "," and _columns(head, ",") > 1 and _columns(head, ",") >= _columns(head, found):
        return ","  # commas split the header at least as well: the other character is inside the values
    return found


def delimiter(path: Path) -> str:
    """The delimiter of a .csv file, from its first SNIFF_CHARS characters (a comma when it cannot be read)."""
    try:
        with open(path, encoding="utf-8", errors="replace", newline="") as handle:
            return delimiter_of(handle.read(SNIFF_CHARS + 1))
    except OSError:
        return ","


def _columns(text: str, delimiter: str) -> int:
    """How many columns the header line splits into with `delimiter`."""
    try:
        return len(next(csv.reader(text.splitlines()[:1], delimiter=delimiter), []))
    except csv.Error:
        return 0
