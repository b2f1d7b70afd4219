"""`cards`: which profile the ladder gives common cards, and the next rung if it fails (`--json`)."""

from __future__ import annotations

import json
from typing import Literal

from commands import options
from commands.console import make_console as _console
from contract.errors import EXIT_OK
from launcher.plan.cards import COMMON_CARDS, fit_table
from launcher.plan.margins import GPU_MARGIN_TEXT

SUMMARY = "which profile the ladder gives common cards, and the next rung if it fails"
EXAMPLES = ("python train.py cards", "python train.py cards --json")


def add_arguments(parser) -> None:
    options.add_profiles(parser, one_profile=False)
    options.add_json(parser, "the table")


def run(args) -> int:
    from profiles.load import load_profiles

    return print_fit_table(load_profiles(args.profiles_dir, args.overrides), as_json=args.json)


def _next_rung(fallbacks: list[str]) -> str:
    if not fallbacks:
        return "-"
    more = len(fallbacks) - 1
    return fallbacks[0] + (f" (+{more} more)" if more else "")


def print_fit_table(profiles, as_json: bool = False, cards=COMMON_CARDS) -> int:
    rows = fit_table(profiles, cards)
    if as_json:
        print(json.dumps({"margin": GPU_MARGIN_TEXT, "cards": rows}, indent=2))
        return EXIT_OK
    from rich.table import Table

    table = Table(title="Which profile fits my card (python train.py train picks the first rung that fits)")
    columns: tuple[tuple[str, Literal["left", "right"]], ...] = (
        ("card", "left"),
        ("GiB", "right"),
        ("precision", "left"),
        ("profile", "left"),
        ("estimate GiB", "right"),
        ("next rung if it fails", "left"),
    )
    for column, justify in columns:
        table.add_column(column, justify=justify, overflow="fold")
    for row in rows:
        table.add_row(
            row["card"],
            f"{row['total_gib']:g}",
            row["precision"],
            row["chosen"] or "nothing fits",
            f"{row['estimate_gib']:.2f}" if row["estimate_gib"] is not None else "-",
            _next_rung(row["fallbacks"]),
        )
    console = _console()
    console.print(table)
    console.print(GPU_MARGIN_TEXT, markup=False, highlight=False)
    return EXIT_OK
