"""The terminal every command prints to: rich, wider than rich's 80 columns when the output is piped so that
tables stay readable in logs."""

from __future__ import annotations


def make_console():
    import os

    from rich.console import Console

    console = Console()
    if not console.is_terminal and not os.environ.get("COLUMNS"):
        console = Console(width=160)  # piped output: wider than rich's 80 columns so the verdicts stay readable
    return console


def escape(text: str) -> str:
    """Text shown inside rich markup as it is."""
    return text.replace("[", r"\[")
