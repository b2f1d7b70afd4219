"""WHAT one finished attempt adds to the ledger: a run or probe that got through is a measurement of its
shape's peak (in the estimate's terms), a genuine OOM a lower bound; an injected OOM, or a test run with no
ledger named, adds nothing."""

from __future__ import annotations

import json
import math
import os
from datetime import datetime
from pathlib import Path

from contract.attempt import MEASURE_GPU_CARD, MEASURE_GPU_PROCESS, MEASURE_TORCH, parse_inject
from contract.environment import ENV_INJECT_OOM, ENV_LEDGER
from launcher.memory.ledger.store import (
    Entry,
    append,
    fingerprint,
    ledger_path,
    library_versions,
    machine_identity,
    memory_settings,
    warn_or_print,
)
from launcher.memory.parts import CUDA_CONTEXT_GIB


def oom_lower_bound(report) -> float | None:
    """What an OOM proves the shape needed at least: the memory it held plus the allocation that failed."""
    if report is None:
        return None
    in_use = getattr(report, "in_use_gib", None)
    asked = getattr(report, "asked_gib", None)
    if in_use is not None and asked is not None:
        return round(float(in_use) + float(asked), 4)
    return None


def others_at_oom(report) -> float | None:
    """What other processes held of the device when the OOM happened: listed by the message, or its total less
    what was free and what this process held. Kept beside the bound, which counts only this shape's own."""
    if report is None:
        return None
    listed = getattr(report, "other_processes_gib", None)
    if listed is not None:
        return round(float(listed), 4)
    total, free, in_use = (getattr(report, k, None) for k in ("total_gib", "free_gib", "in_use_gib"))
    if total is None or free is None or in_use is None:
        return None
    return round(max(float(total) - float(free) - float(in_use), 0.0), 4)


def _seconds(value) -> float | None:
    return (
        round(float(value), 4)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
        else None
    )


def make_entry(
    profile,
    machine,
    *,
    status: str,
    estimate=None,
    peak_gib: float | None = None,
    probe: dict | None = None,
    oom_report=None,
    vllm: dict | None = None,
    measure: str | None = None,
    timing: dict | None = None,
    lengths: dict | None = None,
) -> Entry:
    bound = oom_lower_bound(oom_report)
    timing = timing if isinstance(timing, dict) else {}
    return Entry(
        measure=measure,
        step_s=_seconds(timing.get("step_s")),
        predicted_step_s=_seconds(timing.get("predicted_step_s")),
        completion_mean=_seconds(timing.get("completion_mean")),
        profile=profile.name,
        fingerprint=fingerprint(profile),
        machine=machine_identity(machine, profile.device),
        status=status,
        estimate_gib=round(float(estimate.total_gib), 4) if estimate is not None else None,
        components={k: round(float(v), 4) for k, v in (estimate.components.items() if estimate else ())},
        peak_gib=round(float(peak_gib), 4) if peak_gib is not None else None,
        probe=probe,
        oom_lower_bound_gib=bound,
        oom_kind=getattr(oom_report, "kind", None),
        others_gib=others_at_oom(oom_report) if bound is not None else None,
        vllm=vllm,
        lengths=lengths,
        settings=memory_settings(profile),
        versions=library_versions(),
        date=datetime.now().isoformat(timespec="seconds"),
    )


# Told once a process: the run injects OOMs and no ledger was named for it.
_told_test_run = False


def test_run_without_ledger(environ=None) -> bool:
    """A run with GRPO_INJECT_OOM set is a test: it writes no ledger unless GRPO_TRAIN_LEDGER names one."""
    environ = os.environ if environ is None else environ
    return bool(environ.get(ENV_INJECT_OOM, "").strip()) and not environ.get(ENV_LEDGER, "").strip()


def _injected_here(profile_name: str, environ) -> bool:
    try:
        return profile_name in parse_inject(environ.get(ENV_INJECT_OOM))
    except ValueError:
        return True  # a malformed value: nothing of this attempt is trusted


def record_attempt(profile, plan, record, attempt_dir: Path, warn=None, environ=None) -> Entry | None:
    """Add what one finished attempt measured (entry_of_attempt) to the ledger; the entry added, or None when
    there was nothing to add or it could not be written (a full disk): that costs a warning, never the run."""
    entry = entry_of_attempt(profile, plan, record, attempt_dir, warn, environ)
    if entry is None:
        return None
    try:
        append(entry)
    except OSError as exc:
        warn_or_print(warn, f"warning: cannot add to the ledger {ledger_path()}: {exc.strerror or exc}")
        return None
    return entry


def entry_of_attempt(profile, plan, record, attempt_dir: Path, warn=None, environ=None) -> Entry | None:
    """What one finished attempt measured: a run or probe that got through is a measurement of its
    shape's peak, a genuine OOM a lower bound. An injected OOM is no measurement (the probe's peak before it
    still is); a run with injection writes nothing unless GRPO_TRAIN_LEDGER names a ledger. Attempts that
    measured nothing add nothing (None)."""
    global _told_test_run
    environ = os.environ if environ is None else environ
    if test_run_without_ledger(environ):
        if not _told_test_run:
            _told_test_run = True
            warn_or_print(
                warn,
                f"{ENV_INJECT_OOM} is set: this run adds nothing to the ledger {ledger_path()} "
                f"(set {ENV_LEDGER}=FILE to record it into a ledger of its own)",
            )
        return None
    injected = record.status == "oom" and _injected_here(profile.name, environ)
    oom = record.report if record.status == "oom" and not injected else None
    outcome = _read_json(Path(attempt_dir) / "outcome.json") or {}
    probe = outcome.get("probe") if isinstance(outcome.get("probe"), dict) else None
    measured = [
        planning_peak(profile.device, peak, measure)
        for peak, measure in (
            (record.peak_gib if record.status == "ok" else None, outcome.get("peak_measure")),
            (probe.get("peak_gib") if probe else None, probe.get("measure") if probe else None),
        )
        if isinstance(peak, (int, float)) and not isinstance(peak, bool) and math.isfinite(peak) and peak > 0
    ]
    lengths = lengths_record(profile, outcome.get("lengths"))
    if oom_lower_bound(oom) is None and not measured and lengths is None:
        return None
    peak, measure = max(measured) if measured else (None, None)
    # a step time counts from an attempt that trained (not a probe alone) and was not injected an OOM
    timing = getattr(record, "timing", None) if record.status in ("ok", "interrupted") and not injected else None
    entry = make_entry(
        profile,
        plan.machine,
        status=record.status,
        estimate=_plan_estimate(plan, profile),
        peak_gib=peak,
        probe=probe,
        oom_report=oom,
        vllm=_vllm_figures(Path(attempt_dir)),
        measure=measure,
        timing=timing,
        lengths=lengths,
    )
    if entry.peak_gib is not None and (record.status not in ("ok", "oom") or injected):
        entry.status = "probe-ok"  # the probe got through even though the run did not finish
    return entry


def lengths_record(profile, figures) -> dict | None:
    """The ledger's record of an attempt's measured answer lengths (the outcome's `lengths`): the figures with
    what they were measured under (model, task, chat-template switches: weigh.lengths_identity), or None when
    the outcome holds no sound measurement."""
    from contract.length_rule import MeasuredLengths
    from launcher.memory.ledger.weigh import lengths_identity

    measured = MeasuredLengths.from_json(figures)
    if measured is None:
        return None
    switches = figures.get("switches") if isinstance(figures.get("switches"), dict) else {}
    return {**lengths_identity(profile, switches), **measured.to_json()}


def planning_peak(device: str, peak_gib: float, measure: str | None) -> tuple[float, str]:
    """(the peak in the estimate's terms, what it is). The GPU process's figure (NVML) already counts the CUDA
    context and memory outside torch; torch's own peak lacks the context, which the estimate counts and free
    memory (NVML) does not hold, so the context is added to it."""
    if device != "cuda" or measure in (MEASURE_GPU_PROCESS, MEASURE_GPU_CARD):
        return float(peak_gib), measure or "process RSS"
    # torch's figure, or the card's use above a baseline read after the context: both lack the context
    return float(peak_gib) + CUDA_CONTEXT_GIB, f"{measure or MEASURE_TORCH} + CUDA context {CUDA_CONTEXT_GIB:g} GiB"


def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _plan_estimate(plan, profile):
    for cand in plan.candidates:
        if cand.profile == profile and cand.estimate is not None:
            return cand.estimate
    try:
        from launcher.memory.estimate import estimate

        gpu = plan.machine.primary if profile.device == "cuda" else None
        return estimate(profile, gpu=gpu)
    except Exception:  # a figure for the ledger, never a reason to stop
        return None


def _vllm_figures(attempt_dir: Path) -> dict | None:
    from contract.attempt import LOG_FILE
    from launcher.memory.vllm_log import parse_vllm_memory

    try:
        with open(attempt_dir / LOG_FILE, "rb") as handle:
            text = handle.read(8 * 1024 * 1024).decode("utf-8", errors="replace")  # start-up lines come first
    except OSError:
        return None
    return parse_vllm_memory(text)
