"""HOW the kit runs within its time: each probe in a child process of its own with its own timeout, the
random weights of an architecture removed once its probes are done, the table rewritten after every probe, a
signal or the budget ending it with the table written, and (on the CPU) an injected out-of-memory read and
fallen back from through the supervisor.

Nothing is downloaded: every architecture is built with random weights from the catalogue's facts
(tiny_model/random_weights.py); memory does not depend on the weights' values.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
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
    ENV_INJECT_OOM,
    ENV_NO_UNSLOTH,
    ENV_PROBE_ONLY,
    ENV_RANDOM_WEIGHTS,
)
from measure import report as tables
from measure.cases import CPU_BASE, CPU_SHAPE, CPU_TIMED_LENGTHS, GPU_TIMED_LENGTHS, PLAIN, REPO, UNSLOTH, plan_cases
from measure.child import KIT_FILE

# One call of a GPU machine is 600 s; the install before the kit takes some of it (scripts/gpu-kit.sh).
BUDGET_S = 540.0
PROBE_TIMEOUT_S = 240.0
FINISH_RESERVE_S = 15.0  # stopping a child that ran past its time, and the last report
MAX_FAILURE_LOGS = 2  # a failed probe's whole log beside the table (one call returns at most 8 files)
MIN_PROBE_S = 45.0  # less than this left: a probe could not even import its libraries
STOP_GRACE_S = 10.0  # a child told to stop (SIGINT) gets this long before SIGKILL
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
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


class Stopper:
    """SIGINT / SIGTERM to the kit: stop the running child (its own process group), write the report, exit."""

    def __init__(self):
        self.signal: int | None = None
        self.child: subprocess.Popen | None = None

    def install(self) -> Stopper:
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        self.signal = signum
        if self.child is not None and self.child.poll() is None:
            try:
                os.killpg(self.child.pid, signal.SIGINT)
            except OSError:
                pass


def run_bounded(argv: list[str], env: dict, timeout_s: float, log: Path, stopper: Stopper) -> tuple[int | None, bool]:
    """Run `argv` in a process group of its own, its output in `log`, for at most `timeout_s` seconds: then
    SIGINT (the supervisor and the trainer stop as on a Ctrl-C), and SIGKILL after STOP_GRACE_S. (exit status or
    None, whether it was stopped for time)."""
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            argv,
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        stopper.child = proc
        try:
            try:
                return proc.wait(timeout=max(timeout_s, 1.0)), False
            except subprocess.TimeoutExpired:
                pass
            for signum in (signal.SIGINT, signal.SIGKILL):
                try:
                    os.killpg(proc.pid, signum)
                except OSError:
                    pass
                try:
                    proc.wait(timeout=STOP_GRACE_S)
                    break
                except subprocess.TimeoutExpired:
                    continue
            return proc.poll(), True
        finally:
            stopper.child = None


def log_tail(log: Path, lines: int = 40) -> str:
    try:
        return "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


# ------------------------------------------------------------------------------------------------ libraries

_IMPORT = (
    "import json, sys, time\n"
    "started = time.monotonic()\n"
    "module = __import__(sys.argv[1])\n"
    "print(json.dumps({'seconds': round(time.monotonic() - started, 2), "
    "'version': str(getattr(module, '__version__', ''))}))\n"
)


def import_check(modules: tuple[str, ...], env: dict, timeout_s: float, stopper: Stopper) -> dict:
    """{module: {imports, version, seconds, error}}: whether each imports in a fresh interpreter (Unsloth and
    bitsandbytes fail in many ways, some of them by killing the process). A module that is not installed is
    said so at once, without importing; one that is installed imports in a child of its own, all at once,
    bounded only by what is left of the kit's time."""
    found: dict[str, dict] = {}
    running = {}
    for module in modules:
        if importlib.util.find_spec(module) is None:
            found[module] = {"imports": False, "error": "not installed"}
            continue
        running[module] = subprocess.Popen(
            [sys.executable, "-c", _IMPORT, module],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
    deadline = time.monotonic() + timeout_s
    for module, proc in running.items():
        try:
            out, err = proc.communicate(timeout=max(deadline - time.monotonic(), 1.0))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            found[module] = {"imports": False, "error": "its import outlasted the kit's time"}
            continue
        if proc.returncode == 0:
            try:
                found[module] = {"imports": True, **json.loads(out.strip().splitlines()[-1])}
                continue
            except (ValueError, IndexError):
                pass
        last = [line for line in err.strip().splitlines() if line.strip()]
        found[module] = {"imports": False, "error": (last[-1] if last else f"exit {proc.returncode}")[:300]}
    if stopper.signal is not None:
        for proc in running.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    return {module: found[module] for module in modules}


def versions() -> dict:
    from importlib import metadata

    found = {}
    for name in ("torch", "transformers", "trl", "peft", "accelerate", "unsloth", "unsloth_zoo", "bitsandbytes"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return found


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
    (attempt_dir / KIT_FILE).write_text(json.dumps({"lengths": list(lengths)}) + "\n", encoding="utf-8")
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


# ------------------------------------------------------------------------------------------------ OOM check


def oom_fallback_on_cpu(folder: Path, cache: Path, timeout_s: float, stopper: Stopper) -> dict:
    """A two-rung ladder through the supervisor (`train.py train --profiles-dir`): the first rung's probe
    raises a genuine torch.OutOfMemoryError (injected: the host has no CUDA allocator to exhaust); it must be
    read and fallen back from to the second, smaller rung, which finishes."""
    from profiles.load import load_profile

    env = dict(os.environ, **{ENV_RANDOM_WEIGHTS: "1", ENV_CACHE: str(cache), **OFFLINE})
    run_dir = folder / "oom-fallback"
    ladder = folder / "oom-ladder"
    for path in (run_dir, ladder):
        shutil.rmtree(path, ignore_errors=True)
    ladder.mkdir(parents=True)
    # the fallback takes only a rung estimated below the one that ran out of memory (even once shrunk)
    smaller = ["num_generations=2", "per_device_train_batch_size=2", "max_completion_length=16"]
    for name, rank, extra in (("check-oom-big", 1, []), ("check-oom-small", 2, smaller)):
        profile = load_profile(CPU_BASE, [f"name={name}", f"ladder={rank}", *CPU_SHAPE, *extra])
        (ladder / f"{name}.yaml").write_text(profile.to_yaml(), encoding="utf-8")
    env[ENV_INJECT_OOM] = "check-oom-big@probe"
    argv = [
        sys.executable,
        str(REPO / "train.py"),
        "train",
        "--profiles-dir",
        str(ladder),
        "--output-dir",
        str(run_dir),
        "--ignore-ledger",
    ]
    started = time.monotonic()
    run_dir.mkdir(parents=True, exist_ok=True)
    log = folder / "oom-fallback.log"
    code, stopped = run_bounded(argv, env, timeout_s, log, stopper)
    output = log_tail(log, 400)
    attempts = []
    for found in sorted(run_dir.glob("run-*/attempts.jsonl")):
        attempts += [json.loads(line) for line in found.read_text(encoding="utf-8").splitlines() if line.strip()]
    first_oom = next((a for a in attempts if a.get("status") == "oom"), None)
    recovered = bool(first_oom) and any(a.get("status") == "ok" for a in attempts[attempts.index(first_oom) + 1 :])
    # the supervisor's decision lines: "attempt N: NAME OOM in ... (asked ..): halving ..." and "falling back to"
    decisions = [
        line.strip()
        for line in output.splitlines()
        if (re.match(r"\s*attempt \d+: .* OOM ", line) and not re.search(r"after \d+ steps\s*$", line))
        or re.search(r"\bfalling back to\b", line)
    ][:6]
    status = "ok" if recovered and code == 0 else ("timed out" if stopped else "failed")
    return {
        "injected": True,
        "exit": code,
        "seconds": round(time.monotonic() - started, 1),
        "timeout_s": round(timeout_s, 1),
        "attempts": [_attempt_row(a) for a in attempts],
        "oom_read": first_oom is not None,
        "fell_back_and_finished": recovered,
        "decisions": decisions,
        "status": status,
        "log_tail": None if status == "ok" else output[-2000:],
    }


def _attempt_row(attempt: dict) -> dict:
    """What the report keeps of one supervised attempt: its shape and, for an OOM, what the supervisor read."""
    settings, oom = attempt.get("settings") or {}, attempt.get("oom") or {}
    row = {
        "profile": attempt.get("profile"),
        "status": attempt.get("status"),
        "batch": settings.get("per_device_train_batch_size"),
        "accumulation": settings.get("gradient_accumulation_steps"),
    }
    if oom:
        row.update({key: oom.get(key) for key in ("site", "asked_gib", "free_gib", "total_gib", "in_probe")})
    return row


# ------------------------------------------------------------------------------------------------ the run


def run_kit(options: KitOptions) -> tuple[int, dict]:
    """Measure this card within options.budget_s; (exit status, the report). 0: every probe run measured and
    the OOM check passed or was left out for its stated reason; 1: a probe or the check failed, or nothing was
    measured; 130: stopped by a signal."""
    from launcher.card.detect import detect_machine

    say: Callable[[str], None] = options.say or (lambda line: print(line, file=sys.stderr, flush=True))
    clock, probe = options.clock, options.probe or run_probe
    started = clock()
    deadline = started + options.budget_s
    stopper = Stopper().install()
    machine = detect_machine()
    gpu = machine.primary
    card = gpu.name if gpu else "cpu"
    say(f"gpu-check: {gpu.name + f', {gpu.total_gib:.1f} GiB' if gpu else 'no GPU: the tiny architecture on the CPU'}")
    plain_env = dict(os.environ, **{ENV_NO_UNSLOTH: "1"}, **OFFLINE)
    imports = options.imports or import_check(
        ("bitsandbytes", "unsloth"), plain_env, max(deadline - clock(), 1.0), stopper
    )
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
