"""HOW the kit runs within its time: each probe in a child process of its own with its own timeout
(measure.processes), the random weights of an architecture removed once its probes are done, the table rewritten
after every probe, a signal or the budget ending it with the table written, and (on the CPU) an injected
out-of-memory read and fallen back from through the supervisor (measure.oom_check).

Nothing is downloaded: every architecture is built with random weights from the catalogue's facts
(tiny_model/random_weights.py); memory does not depend on the weights' values.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from contract.attempt import PROFILE_FILE, attempt_environment
from contract.environment import (
    ENV_CACHE,
    ENV_ESTIMATE_GIB,
    ENV_NO_UNSLOTH,
    ENV_PROBE_ONLY,
    ENV_RANDOM_WEIGHTS,
)
from measure import report as tables
from measure.cases import CPU_TIMED_LENGTHS, GPU_TIMED_LENGTHS, PLAIN, UNSLOTH, plan_cases
from measure.child import KIT_FILE
from measure.oom_check import OFFLINE, oom_fallback_on_cpu
from measure.processes import STOP_WORST_S, Stopper, import_check, log_tail, run_bounded, versions

# One call of a GPU machine is 600 s; the install before the kit takes some of it (scripts/gpu-kit.sh).
BUDGET_S = 540.0
PROBE_TIMEOUT_S = 240.0
# stopping a child that ran past its time at worst, then removing its random weights and writing the last report
# (an H100 call with 15 s kept for this ended 5 s past its budget: the 14B's stop and removal took 20 s)
FINISH_RESERVE_S = STOP_WORST_S + 10.0
MAX_FAILURE_LOGS = 2  # a failed probe's whole log beside the table (one call returns at most 8 files)
MIN_PROBE_S = 45.0  # less than this left: a probe could not even import its libraries
# Before the first probe: whether Unsloth and bitsandbytes import (the H100's took 27 s), then the card read, the
# cases planned and the first table written. The import check gets what the budget leaves beyond these, one probe
# and the finish, so that however long the imports take, one probe still starts.
IMPORT_CHECK_S = 30.0
SETUP_S = 5.0
# the shortest budget in which one probe can run at all: a smaller one would end with every row "not run"
MIN_BUDGET_S = IMPORT_CHECK_S + SETUP_S + MIN_PROBE_S + FINISH_RESERVE_S
GPU_OOM_LEFT_OUT = (
    "on a GPU the check needs a rung the planner accepts that still runs out of memory, which only an estimate "
    "too low makes; the probes above hold every estimate against the card instead, and the fallback itself is "
    "rehearsed on the CPU (an injected torch.OutOfMemoryError read and fallen back from, tests/rehearsal)"
)


@dataclass
class KitOptions:
    out_dir: Path
    budget_s: float = BUDGET_S
    probe_timeout_s: float = PROBE_TIMEOUT_S
    models: list[str] | None = None
    work_dir: Path | None = None
    fresh: bool = False
    probe_command: list[str] = field(default_factory=list)  # argv that runs one probe child: + [attempt dir]
    say: Callable[[str], None] | None = None  # one line of progress; None: to stderr
    # what the kit's own schedule is read from and acts through (tests put their own here)
    clock: Callable[[], float] = time.monotonic
    probe: Callable[..., dict] | None = None  # run_probe's signature; None: run_probe
    imports: dict | None = None  # {module: {imports, ...}} instead of import_check


def remove_random_models(cache: Path) -> list[str]:
    """Remove the random-weight models built in the kit's cache (tens of GB for the large architectures); the
    names removed."""
    removed = []
    for folder in sorted(cache.glob("random-*")) if cache.is_dir() else []:
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder.name)
    return removed


# ------------------------------------------------------------------------------------------------ probing


def run_probe(
    case: dict, work: Path, cache: Path, timeout_s: float, stopper: Stopper, probe_command: list[str], lengths
) -> dict:
    """The probe of one case in a process of its own, stopped after `timeout_s`; what it measured (or why not)."""
    from contract.failure import classify_failure

    profile = case["profile"]
    attempt_dir = work / case["name"]
    shutil.rmtree(attempt_dir, ignore_errors=True)
    attempt_dir.mkdir(parents=True)
    (attempt_dir / PROFILE_FILE).write_text(profile.to_yaml(), encoding="utf-8")
    asked = {"lengths": list(lengths), "planned": case.get("planned"), "deadline": time.time() + timeout_s}
    (attempt_dir / KIT_FILE).write_text(json.dumps(asked) + "\n", encoding="utf-8")
    env = attempt_environment(profile)
    env.update(
        {
            ENV_PROBE_ONLY: "1",
            ENV_RANDOM_WEIGHTS: "1",
            ENV_CACHE: str(cache),
            ENV_ESTIMATE_GIB: repr(float(case["estimate"].total_gib)),
            "PYTHONUNBUFFERED": "1",
            **OFFLINE,
        }
    )
    if case["path"] == PLAIN:
        env[ENV_NO_UNSLOTH] = "1"
    else:
        env.pop(ENV_NO_UNSLOTH, None)
    started = time.monotonic()
    log = attempt_dir / "train.log"
    code, stopped = run_bounded([*probe_command, str(attempt_dir)], env, timeout_s, log, stopper)
    outcome = {}
    try:
        outcome = json.loads((attempt_dir / "outcome.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        pass
    tail = log_tail(log)
    status = outcome.get("status") if code == 0 else None
    if status is None:
        status = "timed out" if stopped else (outcome.get("status") or classify_failure(tail, code))
    error = outcome.get("error") or (None if status == "ok" else (tail.strip().splitlines() or [""])[-1])
    backend = re.search(r"attempt '[^']+': (\S+) on ", tail)
    ran_through = backend.group(1) if backend else None
    if case["path"] == UNSLOTH and case["precision"] != "float32" and ran_through not in (None, "unsloth"):
        # Unsloth failed to import in the child after importing in the kit's check: not Unsloth's figures
        status, error = "error", f"Unsloth's path ran through {ran_through}: " + (error or "unsloth did not load")
    return {
        "status": status,
        "error": (error or "")[:300] or None,
        "probe": outcome.get("probe") or {},
        "backend": backend.group(1) if backend else None,
        "seconds": round(time.monotonic() - started, 1),
        "timeout_s": round(timeout_s, 1),
        "log_tail": None if status == "ok" else tail[-2000:],
    }


def keep_failure_log(log: Path, out_dir: Path, card: str, case: dict) -> Path | None:
    """A failed probe's whole log beside the table (the table keeps only its tail), for the first
    MAX_FAILURE_LOGS failures of a run; None when none was kept."""
    stem = tables.card_slug(card)
    if not log.is_file() or len(list(out_dir.glob(f"{stem}-probe-*.log"))) >= MAX_FAILURE_LOGS:
        return None
    target = out_dir / f"{stem}-probe-{case['name']}.log"
    try:
        shutil.copyfile(log, target)
    except OSError:
        return None
    return target


# ------------------------------------------------------------------------------------------------ the run


def run_kit(options: KitOptions) -> tuple[int, dict]:
    """Measure this card within options.budget_s; (exit status, the report). 0: every probe run measured and
    the OOM check passed or was left out for its stated reason; 1: a probe or the check failed, or nothing was
    measured; 130: stopped by a signal. The kit's signal handlers are in place while it runs, and only then."""
    stopper = Stopper().install()
    try:
        return _measure(options, stopper)
    finally:
        stopper.restore()


def _measure(options: KitOptions, stopper: Stopper) -> tuple[int, dict]:
    from launcher.card.detect import detect_machine

    say: Callable[[str], None] = options.say or (lambda line: print(line, file=sys.stderr, flush=True))
    clock, probe = options.clock, options.probe or run_probe
    started = clock()
    deadline = started + options.budget_s
    machine = detect_machine()
    gpu = machine.primary
    card = gpu.name if gpu else "cpu"
    say(f"gpu-check: {gpu.name + f', {gpu.total_gib:.1f} GiB' if gpu else 'no GPU: the tiny architecture on the CPU'}")
    plain_env = dict(os.environ, **{ENV_NO_UNSLOTH: "1"}, **OFFLINE)
    # what is left once one probe and the finish are kept back (a budget at the floor: IMPORT_CHECK_S)
    import_s = max(deadline - clock() - SETUP_S - MIN_PROBE_S - FINISH_RESERVE_S, 1.0)
    imports = options.imports or import_check(("bitsandbytes", "unsloth"), plain_env, import_s, stopper)
    for module, seen in imports.items():
        say(
            f"gpu-check: {module} "
            + (
                f"imports ({seen.get('version') or '?'}, {seen.get('seconds', 0):.1f} s)"
                if seen["imports"]
                else f"does not import: {seen.get('error')}"
            )
        )
    unsloth, bitsandbytes = imports["unsloth"]["imports"], imports["bitsandbytes"]["imports"]
    now_versions = versions()
    old, continuing = tables.previous_report(options.out_dir, card, now_versions, options.fresh)
    cases = plan_cases(machine, unsloth, bitsandbytes, options.models)
    kept = tables.kept_rows(old)
    rows = {}
    for case in cases:
        key = tables.case_key(case)
        pending = case["missing"] or (tables.PENDING if case["fits"] else tables.NOT_RUN_FIT)
        rows[key] = kept.get(key) or tables.case_row(case, pending)
    previous_oom = (old or {}).get("oom_fallback") or {}
    report: dict[str, Any] = {
        "report_version": tables.REPORT_VERSION,
        "card": card,
        "device": f"{gpu.name}, {gpu.total_gib:.1f} GiB" if gpu else "no GPU (tiny architecture on the CPU)",
        "total_gib": gpu.total_gib if gpu else None,
        "date": datetime.now().isoformat(timespec="seconds"),
        "versions": {**(old or {}).get("versions", {}), **now_versions},
        "imports": imports,
        "lengths_timed": list(GPU_TIMED_LENGTHS if gpu else CPU_TIMED_LENGTHS),
        "peak_measure": "the probe's measure per row (GPU: NVML process or card figure, else torch peak reserved)"
        if gpu
        else "process peak RSS",
        "probes": [rows[tables.case_key(c)] for c in cases],
        "oom_fallback": previous_oom if previous_oom.get("status") == "ok" else {"status": tables.PENDING},
        "runs": [
            *(old or {}).get("runs", []),
            {
                "started": datetime.now().isoformat(timespec="seconds"),
                "budget_s": options.budget_s,
                "seconds": 0.0,
                "unsloth": unsloth,
                "bitsandbytes": bitsandbytes,
                "versions": now_versions,
            },
        ],
    }
    if gpu is not None:
        report["oom_fallback"] = {"status": "left out", "why": GPU_OOM_LEFT_OUT}
    this_run = report["runs"][-1]

    def save():
        this_run["seconds"] = round(clock() - started, 1)
        report["date"] = datetime.now().isoformat(timespec="seconds")
        return tables.write_report(report, options.out_dir)

    json_path, md_path = save()
    say(
        f"gpu-check: {continuing}; {len(cases)} case(s); budget {options.budget_s:.0f} s, each probe at most "
        f"{options.probe_timeout_s:.0f} s; report {md_path}"
    )
    work = options.work_dir or Path(tempfile.mkdtemp(prefix="gpu-check-"))
    cache = work / "cache"
    lengths = GPU_TIMED_LENGTHS if gpu else CPU_TIMED_LENGTHS
    failed_paths: dict[str, str] = {}  # path -> the error that stopped it: not tried again in this run
    try:
        for index, case in enumerate(cases):
            key = tables.case_key(case)
            architecture = case["architecture"]
            if rows[key]["status"] == tables.PENDING and case["path"] in failed_paths:
                rows[key]["status"] = f"not run ({case['path']} failed first: {failed_paths[case['path']]})"[:300]
            if rows[key]["status"] == tables.PENDING:
                left = deadline - clock() - FINISH_RESERVE_S
                if stopper.signal is not None or left < MIN_PROBE_S:
                    rows[key]["status"] = tables.NOT_RUN_TIME if stopper.signal is None else "not run (stopped)"
                else:
                    timeout = min(options.probe_timeout_s, left)
                    say(
                        f"probe: {architecture} ({case['path']}, {case['precision']}), estimated "
                        f"{case['estimate'].total_gib:.2f} GiB, at most {timeout:.0f} s"
                    )
                    outcome = probe(case, work, cache, timeout, stopper, options.probe_command, lengths)
                    if stopper.signal is not None and outcome["status"] != "ok":
                        outcome["status"] = "interrupted"  # stopped with the kit: a later run measures it again
                    elif outcome["status"] == "timed out" and timeout < options.probe_timeout_s:
                        outcome["status"] = tables.NOT_RUN_TIME  # cut by the budget, not its own limit
                    rows[key] = tables.measured_row(case, outcome, gpu)
                    report["probes"] = [rows[tables.case_key(c)] for c in cases]
                    save()
                    say(
                        f"probe: {architecture} ({case['path']}, {case['precision']}): {outcome['status']} in "
                        f"{outcome['seconds']:.0f} s"
                    )
                    if outcome["status"] not in ("ok", tables.NOT_RUN_TIME, "interrupted"):
                        kept_log = keep_failure_log(work / case["name"] / "train.log", options.out_dir, card, case)
                        if kept_log:
                            say(f"probe: its log is {kept_log}")
                    if outcome["status"] == "error":
                        # one call is all a card may give: a path that breaks (a library that cannot run here)
                        # does not spend the rest of it breaking again
                        failed_paths[case["path"]] = (outcome.get("error") or "error")[:200]
                        say(f"probe: {outcome.get('error') or 'error'}; the {case['path']} path is not tried again")
            following = cases[index + 1]["architecture"] if index + 1 < len(cases) else None
            if following != architecture:
                removed = remove_random_models(cache)
                if removed:
                    say(f"removed the random weights of {architecture} ({', '.join(removed)})")
        if gpu is None and report["oom_fallback"].get("status") == tables.PENDING and stopper.signal is None:
            left = deadline - clock() - FINISH_RESERVE_S
            if left < MIN_PROBE_S:
                report["oom_fallback"] = {"status": "not run", "why": "the budget ran out first"}
            else:
                say(
                    f"oom check: an injected OOM read and fallen back from, through the supervisor, at most {left:.0f} s"
                )
                report["oom_fallback"] = oom_fallback_on_cpu(
                    work, cache, min(2 * options.probe_timeout_s, left), stopper
                )
                remove_random_models(cache)
                save()
    finally:
        for row in report["probes"]:
            if row["status"] == tables.PENDING:
                row["status"] = tables.NOT_RUN_TIME if stopper.signal is None else "not run (stopped)"
        if report["oom_fallback"].get("status") == tables.PENDING:
            report["oom_fallback"] = {"status": "not run", "why": "stopped first" if stopper.signal else "not reached"}
        json_path, md_path = save()
        if options.work_dir is None:
            shutil.rmtree(work, ignore_errors=True)
        else:
            remove_random_models(cache)
    ran = [r for r in report["probes"] if r["status"] in tables.MEASURED]
    failed = [r for r in ran if r["status"] != "ok"]
    oom = report["oom_fallback"]
    say(
        f"{len(ran)} probe(s) measured, {len(failed)} failed; OOM fallback: {oom['status']}; wrote {md_path} and "
        f"{json_path} in {this_run['seconds']:.0f} s (budget {options.budget_s:.0f} s)"
    )
    if stopper.signal is not None:
        return 130, report
    return (0 if ran and not failed and oom["status"] in ("ok", "left out") else 1), report
