"""`ledger`: what this machine measured per shape against the estimate, and each record's effect on its
plans (`--json` for machines); `ledger --forget PROFILE|FINGERPRINT|all` removes records."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from commands import options
from launcher.memory.ledger import store as ledger_store
from launcher.memory.ledger import weigh as ledger_weigh

SUMMARY = "what this machine measured per shape, and each record's effect on its plans"
EXAMPLES = ("python train.py ledger", "python train.py ledger --json", "python train.py ledger --forget all")


def add_arguments(parser) -> None:
    parser.add_argument(
        "--forget",
        metavar="PROFILE|FINGERPRINT|all",
        help="remove these records (a profile name, a fingerprint shown by --json, or all)",
    )
    options.add_json(parser, "the ledger")


def run(args) -> int:
    from contract.errors import UsageError
    from launcher.card.detect import detect_machine

    if args.forget is not None:
        if args.json:
            raise UsageError("ledger --forget removes records and says how many; --json goes with the listing")
        return forget_main(args.forget)
    return print_ledger(detect_machine(), as_json=args.json)


# The listing shows the newest shapes and records; `--json` holds every one (a ledger of 100,000 records
# is a minute of terminal output nobody reads).
MAX_SHOWN = 100


def print_ledger(machine, path: Path | None = None, console=None, as_json: bool = False) -> int:
    """`python train.py ledger`: per shape, the estimate against the measurement that counts here; then
    every record with its effect on this machine's plans. `as_json`: one JSON object on stdout."""
    if as_json:
        print(json.dumps(ledger_weigh.ledger_report(machine, path), indent=2))  # warnings go to stderr
        return 0
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = console or Console(highlight=False, width=None if sys.stdout.isatty() else 160)
    report = ledger_weigh.ledger_report(machine, path, warn=lambda text: console.print(text, markup=False))
    if not report["records"]:
        console.print(
            f"the ledger {report['path']} holds no measurement yet: every run and every "
            "`python train.py calibrate` adds to it",
            markup=False,
        )
        return 0

    def fmt(value, digits=2):
        return "-" if value is None else f"{value:.{digits}f}"

    def show(title: str, columns: tuple, entries: list, cells, older: str) -> None:
        """The newest MAX_SHOWN entries as a table, each cell plain text (a record's names are data, never
        markup), and how many older ones it leaves out."""
        table = Table(title=title)
        for column in columns:
            table.add_column(column)
        for entry in entries[-MAX_SHOWN:]:
            table.add_row(*[Text(str(cell)) for cell in cells(entry)])
        console.print(table)
        if len(entries) > MAX_SHOWN:
            console.print(
                f"({len(entries) - MAX_SHOWN} {older} not shown; `python train.py ledger --json` lists every one)",
                markup=False,
                soft_wrap=True,
            )

    show(
        f"ledger: {report['path']} (figures that count on this machine)",
        (
            "machine",
            "profile",
            "batch / gens / completion",
            "records",
            "estimate GiB",
            "measured peak GiB",
            "measured as",
            "measured / estimate",
            "OOM lower bound GiB",
            "last",
        ),
        sorted(report["shapes"], key=lambda r: r["last"]),
        lambda r: (
            r["machine"],
            r["profile"],
            r["shape"],
            f"{r['counted']} of {r['runs']} count",
            fmt(r["estimate_gib"]),
            fmt(r["peak_gib"]),
            r["measure"] or "-",
            fmt(r["ratio"], 3),
            fmt(r["oom_lower_bound_gib"]),
            r["last"][:16].replace("T", " "),
        ),
        "shapes measured longer ago",
    )
    show(
        "records, oldest first, and their effect on this machine's plans",
        ("date", "profile", "shape", "status", "peak GiB", "OOM bound GiB", "effect"),
        report["records"],
        lambda r: (
            r["date"][:16].replace("T", " "),
            r["profile"],
            r["shape"],
            r["status"],
            fmt(r["peak_gib"]),
            fmt(r["oom_lower_bound_gib"]),
            r["effect"],
        ),
        "older records",
    )
    console.print(
        f"rules: the newest measurement of a shape counts; an OOM counts until a later success of "
        f"that shape; records older than {ledger_weigh.MAX_AGE_DAYS} days no longer count; `python train.py "
        "--forget PROFILE|FINGERPRINT|all` removes records",
        markup=False,
        soft_wrap=True,
    )
    return 0


def forget_main(target: str, path: Path | None = None) -> int:
    """`python train.py ledger --forget TARGET`: remove, and say what went and how to see what is left."""
    path = Path(path) if path is not None else ledger_store.ledger_path()
    removed = ledger_store.forget(target, path)
    if not removed:
        print(f"the ledger {path} does not exist: nothing to forget")
    else:
        print(f"forgot {removed} record(s) of {target!r} from {path}; `python train.py ledger` shows what is left")
    return 0
