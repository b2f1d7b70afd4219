"""HOW the kit checks that an out-of-memory is read and fallen back from (on the CPU, where the OOM is injected:
the host has no CUDA allocator to exhaust): a two-rung ladder through the supervisor, whose first rung's probe
raises a genuine torch.OutOfMemoryError."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

from contract.environment import ENV_CACHE, ENV_INJECT_OOM, ENV_RANDOM_WEIGHTS
from measure.cases import CPU_BASE, CPU_SHAPE, REPO
from measure.processes import Stopper, log_tail, run_bounded

OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


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
