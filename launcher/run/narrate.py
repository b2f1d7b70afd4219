"""WHAT the supervisor tells the person at the terminal: the plan's choice, each attempt's start and end, and
the table of attempts at the close of a run."""

from __future__ import annotations

import sys

from rich.markup import escape

from contract.attempt import ERROR, INTERRUPTED, OK, OOM, REPLANNED, UNSUPPORTED, checkpoint_step
from launcher.oom import explain as oom_explain
from launcher.run.attempts import AttemptRecord, AttemptResult
from launcher.run.fallback import estimate_of
from profiles.schema import Profile

_STYLES = {OK: "green", OOM: "yellow", UNSUPPORTED: "yellow", INTERRUPTED: "magenta", REPLANNED: "cyan"}


def make_console():
    from rich.console import Console

    # Not a terminal (a log, a test): wide enough that the table does not wrap into a column of letters.
    return Console(highlight=False, soft_wrap=False, width=None if sys.stdout.isatty() else 160)


def settings_text(profile: Profile) -> str:
    text = (
        f"batch {profile.per_device_train_batch_size} x {profile.gradient_accumulation_steps}, "
        f"{profile.num_generations} generations"
    )
    if profile.fast_inference:
        text += f", vLLM {profile.gpu_memory_utilization:g}"
    return text


def print_plan_choice(console, plan) -> None:
    message = getattr(plan.machine, "message", "")
    if message:
        console.print(f"plan: {message}", markup=False)
    for cand in plan.candidates:  # where the ledger turned a verdict, and the way out
        if getattr(cand, "ledger_note", ""):
            console.print(f"plan: {cand.ledger_note}", markup=False, soft_wrap=True)
    chosen = plan.chosen
    if chosen is None:
        return
    cand = next((c for c in plan.candidates if c.profile.name == chosen.name), None)
    est = estimate_of(cand) if cand else None
    more = [f"{c.profile.name} ({c.reason})" if c.reason else c.profile.name for c in plan.candidates if not c.fits]
    line = f"plan: chose {chosen.name}"
    if est is not None:
        line += f", estimated {est:.2f} GiB"
    if cand is not None and cand.reason:
        line += f" ({cand.reason})"
    console.print(line, markup=False, soft_wrap=True)
    if cand is not None and cand.run is not None:
        from datetime import datetime

        console.print(f"plan: run: {cand.run.text(datetime.now())}", markup=False, soft_wrap=True)
    if more:
        console.print(f"plan: more ambitious or not fitting: {'; '.join(more)}", markup=False, soft_wrap=True)


def print_start(console, number: int, profile: Profile, estimate_gib: float | None, resume_from: str | None) -> None:
    text = f"attempt {number}: {profile.name} ({settings_text(profile)}"
    if estimate_gib is not None:
        text += f", estimated {estimate_gib:.2f} GiB"
    text += ")"
    if resume_from:
        text += f", resuming from {resume_from} (step {checkpoint_step(resume_from)})"
    console.print(f"[bold]{escape(text)}[/bold]")


def print_result(console, number: int, profile: Profile, result: AttemptResult) -> None:
    style = _STYLES.get(result.status, "red")
    what = result.report.summary() if result.report is not None else result.status
    text = f"attempt {number}: {profile.name} [{style}]{escape(what)}[/{style}] after {result.steps} steps"
    if result.report is None and result.error and result.status != OK:
        text += f": {escape(result.error)}"
    elif result.status == REPLANNED and isinstance(result.lengths, dict) and result.lengths.get("overruled"):
        text += f": {escape(str(result.lengths['overruled']))}"
    console.print(text, highlight=False)
    if result.report is not None:
        for line in oom_explain.describe(result.report).splitlines():
            console.print(f"    {line}", highlight=False, markup=False)


def _memory_cell(record: AttemptRecord) -> str:
    memory = ""
    report = record.report
    if report is not None:
        memory = report.summary()
    elif record.peak_gib is not None:
        memory = f"peak {record.peak_gib:.2f} GiB"
    if record.estimate_gib is not None:
        memory = (memory + f"; est. {record.estimate_gib:.2f} GiB").lstrip("; ")
    return memory


def _change_cell(record: AttemptRecord) -> str:
    note = ""
    if record.shrink:
        note = ", ".join(f"{k} {v[0]}->{v[1]}" for k, v in record.shrink.items())
    if record.replanned:
        note = (
            (note + "; " if note else "")
            + "re-planned: "
            + ", ".join(f"{k} {v[0]}->{v[1]}" for k, v in record.replanned.items())
        )
    if record.resumed_from:
        note = (note + "; " if note else "") + f"from step {checkpoint_step(record.resumed_from)}"
    return note


def attempts_table(records: list[AttemptRecord]):
    from rich.table import Table

    table = Table(title="attempts", show_lines=False)
    for col in ("#", "profile", "status", "steps", "batch", "vLLM", "memory", "time", "resumed from / change"):
        table.add_column(col, overflow="fold")
    for r in records:
        s = r.settings if isinstance(r.settings, dict) else {}
        batch = _cell(lambda s=s: f"{s.get('per_device_train_batch_size')} x {s.get('gradient_accumulation_steps')}")
        vllm = _cell(lambda s=s: f"{s.get('gpu_memory_utilization'):g}" if s.get("fast_inference") else "-")
        status = str(r.status)
        style = {OK: "green", INTERRUPTED: "magenta", ERROR: "red"}.get(status, "yellow")
        table.add_row(
            escape(str(r.attempt)),
            escape(str(r.profile)),
            f"[{style}]{escape(status)}[/{style}]",
            escape(str(r.steps)),
            escape(batch),
            escape(vllm),
            escape(_cell(lambda r=r: _memory_cell(r))),
            escape(_cell(lambda r=r: f"{r.duration_s or 0:.0f}s")),
            escape(_cell(lambda r=r: _change_cell(r))),
        )
    return table


def _cell(make) -> str:
    """A table cell from a record read back from attempts.jsonl (a resumed run's, perhaps edited by hand): a
    field of the wrong type shows as '?' instead of ending the run's report in a traceback."""
    try:
        return str(make())
    except (TypeError, ValueError, KeyError, IndexError, AttributeError):
        return "?"
