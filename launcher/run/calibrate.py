"""HOW MUCH each rung really needs on this machine: `python train.py calibrate` runs the worst-case probe
alone (model loaded, one step at the longest prompts and full-length completions, no training), each rung
in its own process, records every figure in the ledger, and prints estimate against measurement.

Measured: every single-device rung the plan says fits, and the first rung above them (the nearest more
ambitious one), whose probe either fits after all or proves by its OOM how much more it needs. The next
`train` or `plan` plans from these figures.
"""

from __future__ import annotations

import os
import time
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

from contract.attempt import OK, OOM, PROFILE_FILE, attempt_environment, parse_inject
from contract.environment import ENV_ESTIMATE_GIB, ENV_INJECT_OOM, ENV_LEDGER, ENV_PROBE_ONLY, ENV_RANDOM_WEIGHTS
from contract.errors import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK, UsageError
from contract.failure import write_failure_text, write_problem
from launcher.memory.ledger import record as ledger_record
from launcher.memory.ledger import store as ledger_store
from launcher.run.attempts import read_result
from launcher.run.child import ChildRunner, attempt_command, signals_forwarded


def rungs_to_measure(plan) -> list:
    """The candidates to probe, in ladder order: those that fit, and the nearest more ambitious one."""
    single = [c for c in plan.candidates if not c.profile.distributed and c.estimate is not None]
    fitting = [i for i, c in enumerate(single) if c.fits]
    if not fitting:
        return single[-1:]  # nothing fits: the least ambitious rung shows by how much
    first = fitting[0]
    chosen = [single[i] for i in fitting]
    return ([single[first - 1]] if first > 0 else []) + chosen


def _calibration_dir(output_dir: Path) -> Path:
    folder = Path(output_dir) / f"calibrate-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    try:
        folder.mkdir(parents=True, exist_ok=False)
    except FileExistsError:
        folder = folder.with_name(folder.name + f"-{time.time_ns() % 10**6}")
        folder.mkdir(parents=True)
    except OSError as exc:
        raise UsageError(f"{output_dir}: cannot create the calibration folder ({exc.strerror or exc})") from None
    return folder


def measure_rung(candidate, plan, folder: Path, number: int, runner: ChildRunner, say, random_weights: bool = False):
    """One probe in its own process; the ledger entry it made (None when it measured nothing). With
    random_weights, the child builds the rung's architecture from the catalogue's facts with random weights
    instead of loading the model (its probe figures, and so the ledger entry, say so)."""
    profile = candidate.profile
    from profiles.rules import remote_code_notice

    notice = remote_code_notice(profile)
    if notice and profile.model not in runner.remote_code_said:  # once per model, before it loads
        runner.remote_code_said.add(profile.model)
        say(f"note: {notice}")
    attempt_dir = folder / f"probe-{number:02d}-{profile.name}"
    attempt_dir.mkdir()
    (attempt_dir / PROFILE_FILE).write_text(profile.to_yaml(), encoding="utf-8")
    env = attempt_environment(profile)
    env[ENV_PROBE_ONLY] = "1"
    if random_weights:
        env[ENV_RANDOM_WEIGHTS] = "1"
    env[ENV_ESTIMATE_GIB] = repr(float(candidate.estimate.total_gib))
    say(f"probe {number}: {profile.name} (estimated {candidate.estimate.total_gib:.2f} GiB)")
    started = time.time()
    argv = attempt_command(profile, attempt_dir, None, runner.override, env=env)
    returncode, tail = runner.run_argv(argv, attempt_dir, env)
    result = read_result(attempt_dir, returncode, tail, time.time() - started, bool(runner.signals))
    record = SimpleNamespace(status=result.status, report=result.report, peak_gib=None)
    entry = ledger_record.entry_of_attempt(profile, plan, record, attempt_dir, warn=say)
    recorded = False
    if entry is not None:
        entry.status = "probe-oom" if result.status == OOM else "probe-ok" if result.status == OK else entry.status
        try:
            ledger_store.append(entry)
            recorded = True
        except OSError as exc:  # a full disk: the figure is shown, and said to be lost
            say(
                f"warning: cannot add to the ledger {ledger_store.ledger_path()}: {exc.strerror or exc}; this "
                "probe's figure is not kept"
            )
    return result, entry, recorded


def calibrate(
    plan,
    output_dir: Path,
    say,
    child_command: list[str] | None = None,
    random_weights: bool = False,
    runner: ChildRunner | None = None,
) -> tuple[int, list[dict]]:
    """Probe the rungs (see the module docstring), telling progress through `say(text)`; (exit status, one
    row per probe: profile, estimate_gib, peak_gib, status, recorded, verdict). 0 when every probe ran (an OOM
    is a measurement too); 130 when a signal stopped it (forwarded to the probe running, which stops; what was
    measured is kept); 1 when a probe failed otherwise or the disk filled up. `runner`: the caller's, when its
    signal handlers should outlast the probes (launcher.run.child.signals_forwarded)."""
    rungs = rungs_to_measure(plan)
    if not rungs:
        raise UsageError("calibrate: no single-device rung of the ladder can run on this machine")
    from launcher.run.inputs import check_inject

    check_inject([c.profile for c in plan.candidates])
    if ledger_record.test_run_without_ledger():
        raise UsageError(
            f"calibrate with {ENV_INJECT_OOM} set measures nothing for this machine (an injected "
            f"OOM is no measurement) (fix: unset {ENV_INJECT_OOM}, or set {ENV_LEDGER}=FILE "
            "to calibrate into a ledger of its own)"
        )
    ledger_store.check_writable()
    folder = _calibration_dir(output_dir)
    say(
        f"calibrating {len(rungs)} rung(s): {', '.join(c.profile.name for c in rungs)} (folder: {folder})"
        + ("; random weights from the catalogue's facts, nothing downloaded" if random_weights else "")
    )
    runner = runner or ChildRunner(child_command)
    rows: list[dict] = []
    code = EXIT_OK
    with signals_forwarded(runner):
        for number, cand in enumerate(rungs, 1):
            if runner.signals:
                break
            try:
                result, entry, recorded = measure_rung(cand, plan, folder, number, runner, say, random_weights)
            except OSError as exc:
                if not write_problem(exc):
                    raise
                say(f"error: {write_failure_text(exc, folder)}; calibration stopped before probe {number}")
                code = EXIT_FAILURE
                break
            rows.append(_row(cand, result, entry, recorded))
            if (result.status not in (OK, OOM) and not runner.signals) or (entry is not None and not recorded):
                code = EXIT_FAILURE  # a probe that failed, or a figure the ledger could not keep
            _write_summary(folder, rows, random_weights, None)
    if runner.signals:
        code = EXIT_INTERRUPTED
        say(f"interrupted: {len(rows)} of {len(rungs)} probe(s) ran; what they measured is kept")
    _write_summary(folder, rows, random_weights, code)
    return code, rows


SUMMARY_FILE = "calibration.json"


def _write_summary(folder: Path, rows: list[dict], random_weights: bool, code: int | None) -> None:
    """FOLDER/calibration.json: every probe's row so far, and the exit status once it has one (null while it
    runs), for scripts; a disk too full for it loses only this file."""
    import json

    from contract.safe_write import write_atomic

    data = {
        "random_weights": random_weights,
        "exit_code": code,
        "ledger": str(ledger_store.ledger_path()),
        "probes": rows,
        "recorded": sum(1 for row in rows if row["recorded"]),
    }
    try:
        write_atomic(folder / SUMMARY_FILE, json.dumps(data, indent=2) + "\n")
    except OSError:
        pass


def _row(cand, result, entry, recorded: bool) -> dict:
    peak = entry.peak_gib if entry is not None else None
    bound = entry.oom_lower_bound_gib if entry is not None else None
    injected = (
        result.status == OOM and bound is None and cand.profile.name in parse_inject(os.environ.get(ENV_INJECT_OOM))
    )
    verdict = {
        OK: "probe ran",
        OOM: f"OOM: needs at least {bound:.2f} GiB" if bound else "OOM (injected: not recorded)" if injected else "OOM",
    }.get(result.status, f"{result.status}: {result.error or ''}"[:120])
    if entry is not None and not recorded:
        verdict += " (not recorded: the ledger could not be written)"
    return {
        "profile": cand.profile.name,
        "estimate_gib": cand.estimate.total_gib,
        "peak_gib": peak,
        "status": result.status,
        "recorded": recorded,
        "verdict": verdict,
    }
