"""WHAT an attempt ended as: its outcome read from the files it wrote (or, without them, from its exit
status and output), and its line in the run's attempts.jsonl."""

from __future__ import annotations

import json
import signal
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from contract import failure
from contract import oom as oomlib
from contract.attempt import (
    ATTEMPTS_FILE,
    ERROR,
    INTERRUPTED,
    NODE,
    OK,
    OOM,
    OUTCOME_FILE,
    REWARD_RUNNING_FILE,
    UNSUPPORTED,
    Outcome,
    checkpoint_step,
    latest_checkpoint,
    merge_outcomes,
    resolve_path,
)
from contract.errors import EXIT_INTERRUPTED
from contract.safe_write import append_line


@dataclass
class AttemptResult:
    status: str
    steps: int
    checkpoint: str | None
    exit_code: int | None
    error: str | None
    report: oomlib.OomReport | None
    duration_s: float
    peak_gib: float | None = None
    probe: dict | None = None  # the worst-case probe's figures (trainer.probe), when it ran
    timing: dict | None = None  # measured seconds per step beside the prediction (contract.attempt.Outcome)
    lengths: dict | None = None  # the answers' measured lengths (contract.attempt.Outcome)
    stopped_by: str | None = None  # contract.attempt.STOPPED_BY_BUDGET: an ok attempt stopped at the run's budget


def _read_outcome(outcome: Outcome) -> tuple[str, str | None, oomlib.OomReport | None]:
    """(status, error, OOM report) from the attempt's own outcome. Only its texts count: a log may mention an
    OOM that was caught and survived."""
    text = "\n".join(str(part or "") for part in (outcome.traceback, outcome.error_text, outcome.error)).strip()
    report = oomlib.read_oom(text)
    status = outcome.status
    # The child may call a vLLM start-up refusal an error: the text says what it was.
    if status == ERROR and report is not None:
        status = OOM
    elif status == ERROR and failure.read_unsupported(text):
        status = UNSUPPORTED
    elif status == ERROR and failure.read_node_failure(text):
        status = NODE
    return status, outcome.error, report


def _read_exit(
    returncode: int | None, text: str, kernel_oom: bool | None = None
) -> tuple[str, str | None, oomlib.OomReport | None]:
    """(status, error, OOM report) of a child that died without an outcome: its exit status and output.
    A SIGKILL without an OOM text is the kernel's OOM killer only when `kernel_oom` (the kernel said so)."""
    killed = returncode in oomlib.SIGKILL_CODES
    report = oomlib.read_oom(text, returncode if kernel_oom else None)
    if killed and report is None:
        cause = "the kernel reports no out-of-memory kill" if kernel_oom is False else "cause unknown"
        return ERROR, f"killed by SIGKILL ({cause}; exit {returncode})", None
    if returncode == 0:
        return ERROR, f"the attempt exited 0 without writing {OUTCOME_FILE}", None
    if returncode in (EXIT_INTERRUPTED, -signal.SIGINT, -signal.SIGTERM):
        return INTERRUPTED, f"stopped by a signal (exit {returncode})", None
    if report is not None:
        return OOM, report.message, report
    unsupported = failure.read_unsupported(text)
    if unsupported:
        return UNSUPPORTED, unsupported, None
    lost = failure.read_node_failure(text)
    if lost:
        return NODE, lost, None
    last = [line for line in text.strip().splitlines() if line.strip()]
    return ERROR, f"exit {returncode} without {OUTCOME_FILE}" + (f": {last[-1][:300]}" if last else ""), None


def _inside_reward(attempt_dir: Path, returncode: int | None) -> str | None:
    """The error of a child that ended inside the user's reward code (its marker is still there)."""
    try:
        running = json.loads((attempt_dir / REWARD_RUNNING_FILE).read_text(encoding="utf-8"))
        name, entry = str(running["reward"]), str(running["entry"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return (
        f"the attempt process ended (exit {returncode}) inside reward '{name}' ({entry}) without an outcome: "
        "a reward must return its scores, never end the process (os._exit, a signal)"
    )


def read_result(
    attempt_dir: Path,
    returncode: int | None,
    tail_text: str,
    duration: float,
    interrupted: bool,
    kernel_oom: bool | None = None,
) -> AttemptResult:
    """The attempt's outcome: the ranks' outcome files merged (worst status first) when the child wrote
    any, else its exit status and output (`kernel_oom`: whether the kernel says it killed the child for
    memory, None when it cannot be asked). The checkpoint comes back as a path on this disk."""
    outcome = merge_outcomes(attempt_dir)
    if outcome is not None:
        status, error, report = _read_outcome(outcome)
    else:
        status, error, report = _read_exit(returncode, tail_text, kernel_oom)
        if status == ERROR and returncode not in oomlib.SIGKILL_CODES:
            error = _inside_reward(attempt_dir, returncode) or error
    if interrupted and status not in (OK, INTERRUPTED):
        status = INTERRUPTED
    if status != OOM:
        report = None
    # outcome.json holds it relative to the attempt folder (older attempts: absolute)
    found = resolve_path(outcome.checkpoint, attempt_dir) if outcome is not None else None
    if found is None or not found.is_dir():
        found = latest_checkpoint(attempt_dir) or found
    checkpoint = str(found) if found else None
    steps = outcome.steps if outcome is not None else checkpoint_step(checkpoint)
    return AttemptResult(
        status=status,
        steps=steps,
        checkpoint=checkpoint,
        exit_code=returncode,
        error=error,
        report=report,
        duration_s=round(duration, 2),
        peak_gib=outcome.peak_gib if outcome is not None else None,
        probe=outcome.probe if outcome is not None else None,
        timing=outcome.timing if outcome is not None and isinstance(outcome.timing, dict) else None,
        lengths=outcome.lengths if outcome is not None and isinstance(outcome.lengths, dict) else None,
        stopped_by=outcome.stopped_by if outcome is not None and status == OK else None,
    )


def server_failure_result(text: str, resume_from: str | None, duration: float, interrupted: bool) -> AttemptResult:
    """The result of an attempt whose vLLM server did not come up (no training process ran): an OOM when the
    server's words say so (its share of the card), else an unsupported model or an error."""
    report = oomlib.read_oom(text)
    if interrupted:
        status, report = INTERRUPTED, None
    elif report is not None:
        status = OOM
    elif failure.read_unsupported(text):
        status = UNSUPPORTED
    else:
        status = ERROR
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    error = (lines[0] if lines else "the vLLM server did not start")[:500]
    return AttemptResult(
        status=status,
        steps=checkpoint_step(resume_from),
        checkpoint=None,
        exit_code=None,
        error=error,
        report=report,
        duration_s=round(duration, 2),
    )


def report_from_dict(data: dict | None) -> oomlib.OomReport | None:
    """The OomReport of an attempts.jsonl `oom` entry (its traceback frames are not kept there)."""
    if not data:
        return None
    names = {f.name for f in fields(oomlib.OomReport)} - {"frames"}
    return oomlib.OomReport(**{k: v for k, v in data.items() if k in names})


# ---------------------------------------------------------------------------------------------------
# attempts.jsonl


@dataclass
class AttemptRecord:
    """One line of attempts.jsonl. `to_dict` gives exactly the keys the file has always had."""

    attempt: int
    profile: str
    status: str
    steps: int = 0
    started: str | None = None
    duration_s: float = 0.0
    exit_code: int | None = None
    attempt_dir: str | None = None
    resumed_from: str | None = None
    checkpoint: str | None = None
    shrink: dict | None = None  # key -> [old, new] when this attempt shrank the last one
    estimate_gib: float | None = None  # the plan's estimate, also given to the attempt
    peak_gib: float | None = None
    probe: dict | None = None  # the worst-case probe's figures, when it ran
    predicted_step_s: float | None = None  # the plan's seconds per optimizer step, also given to the attempt
    step_s: float | None = None  # measured seconds per step (steady state: the first step left out)
    timing: dict | None = None  # the measurement's details (trainer.timing.measured_step)
    stopped_by: str | None = None  # "budget": ok, stopped at the run's --hours budget before max_steps
    oom: dict | None = None  # OomReport.to_dict() for an OOM
    error: str | None = None
    decided: str | None = None  # why this attempt was started
    env: dict = field(default_factory=dict)
    settings: dict = field(default_factory=dict)  # the profile as run
    replanned: dict | None = None  # key -> [old, new] when the last attempt's answers re-planned its lengths
    lengths: dict | None = None  # the answers' measured lengths: the length probe's, else the training's
    extra: dict = field(default_factory=dict)  # keys this version does not know, kept as they were

    @property
    def report(self) -> oomlib.OomReport | None:
        return report_from_dict(self.oom)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        extra = data.pop("extra")
        return {**data, **{k: v for k, v in extra.items() if k not in data}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AttemptRecord:
        known = {f.name for f in fields(cls)} - {"extra"}
        values = {k: v for k, v in data.items() if k in known}
        values.setdefault("attempt", 0)
        values.setdefault("profile", "?")
        values.setdefault("status", ERROR)
        return cls(**values, extra={k: v for k, v in data.items() if k not in known})

    def append_to(self, run_dir: Path) -> None:
        """One whole line, flushed to disk (or none on a full disk): the record survives the supervisor being
        killed right after, and the file never ends in half a record."""
        append_line(Path(run_dir) / ATTEMPTS_FILE, json.dumps(self.to_dict()))


def read_attempts(run_dir: Path) -> list[dict]:
    """The lines of a run's attempts.jsonl as written (a line cut short by a crash is left out)."""
    records: list[dict] = []
    try:
        lines = (Path(run_dir) / ATTEMPTS_FILE).read_text(encoding="utf-8").splitlines()
    except OSError:
        return records
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue  # the attempt folder still holds the rest
        if isinstance(record, dict):
            records.append(record)
    return records
