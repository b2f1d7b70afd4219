"""`calibrate`: measure the ladder here with the worst-case probe alone, each rung in its own process, into
the ledger; `--dry-run` says which rungs it would probe; `--random-weights` probes each architecture with
random weights built from the catalogue's facts (nothing downloaded)."""

from __future__ import annotations

import json
from pathlib import Path

from commands import options
from commands.plan import print_plan
from contract.errors import EXIT_OK
from launcher.memory.ledger import store as ledger_store
from launcher.run.calibrate import calibrate, rungs_to_measure

SUMMARY = "measure the ladder on this machine into the ledger (the worst-case probe of each rung)"
EXAMPLES = (
    "python train.py calibrate",
    "python train.py calibrate --dry-run",
    "python train.py calibrate --random-weights",
)


def add_arguments(parser) -> None:
    parser.add_argument("--dry-run", action="store_true", help="say which rungs it would probe, and stop")
    parser.add_argument(
        "--random-weights",
        action="store_true",
        help="probe each rung's architecture with random weights built from the catalogue's "
        "facts (nothing downloaded); the ledger marks these measurements",
    )
    options.add_profiles(parser)
    options.add_output_dir(parser)
    options.add_card(parser)
    options.add_ledger_choice(parser)
    options.add_json(parser, "with --dry-run, the plan and the rungs to probe")


def run(args) -> int:
    from contract.errors import UsageError

    if args.json and not args.dry_run:
        raise UsageError("calibrate --json only applies with --dry-run")
    if not args.dry_run:
        from launcher.run.folder import check_output_dir

        check_output_dir(Path(options.output_dir_of(args)))
    plan, _profiles = options.plan_of(args)
    if args.dry_run:
        return print_calibration_plan(plan, as_json=args.json)
    return run_calibration(plan, output_dir=Path(options.output_dir_of(args)), random_weights=args.random_weights)


def print_calibration_plan(plan, as_json: bool = False) -> int:
    """`calibrate --dry-run`: the plan, and the rungs a calibration would probe (nothing runs)."""
    names = [c.profile.name for c in rungs_to_measure(plan)]
    if as_json:
        print(json.dumps({**plan.to_json(), "calibrate": names}, indent=2))
        return EXIT_OK
    print_plan(plan)
    print(
        f"calibrate would probe {len(names)} rung(s), each in its own process: {', '.join(names) or 'none'} "
        f"(drop --dry-run to measure them into {ledger_store.ledger_path()})",
        flush=True,
    )
    return EXIT_OK


def run_calibration(plan, output_dir: Path, random_weights: bool = False, child_command=None) -> int:
    import sys

    from rich.console import Console

    from launcher.run.child import ChildRunner, signals_forwarded

    console = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
    runner = ChildRunner(child_command)
    with signals_forwarded(runner):  # a second Ctrl-C after the probes stopped does not cut the report short
        code, rows = calibrate(
            plan,
            output_dir,
            lambda text: console.print(text, markup=False, soft_wrap=True),
            child_command=child_command,
            random_weights=random_weights,
            runner=runner,
        )
        print_calibration(console, code, rows)
    return code


def print_calibration(console, code: int, rows: list[dict]) -> None:
    """The table of estimate against measurement, and the verdict line."""
    from rich.table import Table

    table = Table(title="calibration: estimate against the probe's measured peak")
    for col in ("profile", "estimate GiB", "measured GiB", "measured / estimate", "result"):
        table.add_column(col)
    for row in rows:
        peak, est = row["peak_gib"], row["estimate_gib"]
        table.add_row(
            row["profile"],
            f"{est:.2f}",
            "-" if peak is None else f"{peak:.2f}",
            "-" if peak is None else f"{peak / est:.3f}",
            row["verdict"],
        )
    if rows:
        console.print(table)
    console.print(calibration_verdict(code, rows), markup=False, soft_wrap=True)


def calibration_verdict(code: int, rows: list[dict]) -> str:
    """The last line: what the ledger now holds from this calibration, as it is (not as it was hoped)."""
    from contract.errors import EXIT_INTERRUPTED

    recorded = sum(1 for row in rows if row["recorded"])
    where = ledger_store.ledger_path()
    if not recorded:
        why = (
            "it was interrupted before a probe measured anything"
            if code == EXIT_INTERRUPTED
            else "no probe ran"
            if not rows
            else "no probe measured anything (see the table)"
        )
        return f"nothing was recorded in {where}: {why}; plans still come from the estimate alone"
    text = (
        f"recorded {recorded} of {len(rows)} probe(s) in {where}; `python train.py train` now plans from "
        "these figures (`--ignore-ledger` to plan from the estimate alone)"
    )
    if code == EXIT_INTERRUPTED:
        text += "; interrupted: `python train.py calibrate` again measures the rest"
    return text
