"""WHAT this machine has measured: one line per attempt in `$GRPO_TRAIN_CACHE/ledger.jsonl`, read back by the
planner so that a shape measured here is judged by its measured peak instead of the estimate alone.

A successful attempt (or probe) is a measurement of its shape's peak. An out-of-memory failure is a lower
bound: the shape needed at least what was in use plus what it asked for. Entries match a candidate when the
machine (device, card name, memory to the nearest GiB) and the fingerprint of every profile key that
changes memory are the same. Nothing here imports torch.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import sys
from dataclasses import asdict, dataclass, field
from datetime import datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from contract.attempt import MEASURE_GPU_PROCESS, MEASURE_TORCH, cache_root
from launcher.memory.parts import CUDA_CONTEXT_GIB

LEDGER_FILE = "ledger.jsonl"
# Profile keys that change how much memory a step needs; anything else (learning rate, seed, steps, rewards,
# the dataset as long as lengths are capped) leaves the peak where it was.
MEMORY_KEYS = (
    "model", "device", "load_in_4bit", "max_seq_length", "max_prompt_length", "max_completion_length",
    "lora_rank", "target_modules", "fast_inference", "gpu_memory_utilization", "vllm_standby",
    "num_generations", "per_device_train_batch_size", "optim", "gradient_checkpointing", "beta",
    "num_gpus", "zero_stage", "vllm_mode", "vllm_server_gpus", "vllm_tensor_parallel",
)
VERSIONED_PACKAGES = ("torch", "transformers", "trl", "peft", "unsloth", "vllm", "bitsandbytes")


# A ledger file elsewhere than the cache folder (tests give each test its own).
ENV_LEDGER = "GRPO_TRAIN_LEDGER"


def ledger_path() -> Path:
    override = os.environ.get(ENV_LEDGER, "").strip()
    return Path(override).expanduser() if override else cache_root() / LEDGER_FILE


def memory_settings(profile) -> dict:
    settings = {key: getattr(profile, key) for key in MEMORY_KEYS}
    settings["target_modules"] = sorted(settings["target_modules"])
    return settings


def fingerprint(profile) -> str:
    """A short hash of the keys that change memory: two profiles with the same one need the same memory."""
    text = json.dumps(memory_settings(profile), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def machine_identity(machine, device: str) -> dict:
    """What makes two runs comparable: the card (name, memory to the GiB) or the CPU with its RAM."""
    gpu = getattr(machine, "primary", None)
    if device == "cuda" and gpu is not None:
        return {"device": "cuda", "name": gpu.name, "total_gib": round(float(gpu.total_gib)),
                "driver": gpu.driver}
    return {"device": "cpu", "name": "cpu", "total_gib": round(float(getattr(machine, "host_ram_gib", 0.0)))}


def _same_machine(a: dict, b: dict) -> bool:
    return all(a.get(k) == b.get(k) for k in ("device", "name", "total_gib"))


def library_versions() -> dict:
    found = {}
    for name in VERSIONED_PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


@dataclass
class Entry:
    profile: str
    fingerprint: str
    machine: dict
    status: str                                   # the attempt's status, or "probe-ok" / "probe-oom"
    estimate_gib: float | None = None
    components: dict = field(default_factory=dict)
    peak_gib: float | None = None                 # measured peak of the attempt (or of its probe), as planned with
    measure: str | None = None                    # what was measured (see planning_peak); None: before it was said
    probe: dict | None = None
    oom_lower_bound_gib: float | None = None      # in use + asked, from an OOM's figures
    vllm: dict | None = None                      # vLLM's own start-up breakdown, when it printed one
    settings: dict = field(default_factory=dict)
    versions: dict = field(default_factory=dict)
    date: str = ""

    @property
    def succeeded(self) -> bool:
        return self.status in ("ok", "probe-ok", "interrupted") and self.peak_gib is not None

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True) + "\n"

    @classmethod
    def from_dict(cls, data: Any) -> "Entry":
        if not isinstance(data, dict):
            raise ValueError("not an object")
        known = set(cls.__dataclass_fields__)
        entry = cls(**{k: v for k, v in data.items() if k in known})
        if not isinstance(entry.fingerprint, str) or not isinstance(entry.machine, dict):
            raise ValueError("no fingerprint or machine")
        return entry


def oom_lower_bound(report) -> float | None:
    """What an OOM proves the shape needed at least: the memory in use plus the allocation that failed."""
    if report is None:
        return None
    in_use = getattr(report, "in_use_gib", None)
    asked = getattr(report, "asked_gib", None)
    if in_use is not None and asked is not None:
        return round(float(in_use) + float(asked), 4)
    return None


def make_entry(profile, machine, *, status: str, estimate=None, peak_gib: float | None = None,
               probe: dict | None = None, oom_report=None, vllm: dict | None = None,
               measure: str | None = None) -> Entry:
    return Entry(measure=measure,
        profile=profile.name, fingerprint=fingerprint(profile),
        machine=machine_identity(machine, profile.device), status=status,
        estimate_gib=round(float(estimate.total_gib), 4) if estimate is not None else None,
        components={k: round(float(v), 4) for k, v in (estimate.components.items() if estimate else ())},
        peak_gib=round(float(peak_gib), 4) if peak_gib is not None else None, probe=probe,
        oom_lower_bound_gib=oom_lower_bound(oom_report), vllm=vllm, settings=memory_settings(profile),
        versions=library_versions(), date=datetime.now().isoformat(timespec="seconds"))


def append(entry: Entry, path: Path | None = None) -> Path:
    """Add one line. One write of the whole line under an exclusive lock: runs appending at once lose nothing
    and never interleave."""
    path = Path(path) if path is not None else ledger_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    data = entry.to_json().encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        written = 0
        while written < len(data):
            written += os.write(fd, data[written:])
        os.fsync(fd)
    finally:
        os.close(fd)  # closing releases the lock
    return path


def read(path: Path | None = None, warn=None) -> list[Entry]:
    """Every readable entry; a damaged line (a crash mid-write, a hand edit) is skipped with one warning."""
    path = Path(path) if path is not None else ledger_path()
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return []
    except OSError as exc:
        _warn(warn, f"warning: cannot read the ledger {path}: {exc.strerror or exc}; planning from estimates")
        return []
    entries, bad = [], []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entries.append(Entry.from_dict(json.loads(line)))
        except (ValueError, TypeError):
            bad.append(number)
    if bad:
        _warn(warn, f"warning: {path}: skipped {len(bad)} damaged line(s) (line {', '.join(map(str, bad[:5]))}"
                    f"{', ...' if len(bad) > 5 else ''})")
    return entries


def _warn(warn, text: str) -> None:
    if warn is not None:
        warn(text)
    else:
        print(text, file=sys.stderr)


@dataclass
class Measured:
    """What the ledger knows of one shape on this machine."""

    peak_gib: float | None        # the largest peak measured by a run or probe that got through
    runs: int                     # entries of this shape on this machine
    last: str                     # date of the latest
    oom_lower_bound_gib: float | None  # the largest lower bound an OOM proved

    @property
    def need_gib(self) -> float | None:
        """The figure to judge the shape by: its measured peak, raised to an OOM's lower bound if larger."""
        figures = [f for f in (self.peak_gib, self.oom_lower_bound_gib) if f is not None]
        return max(figures) if figures else None

    def to_json(self) -> dict:
        return {"peak_gib": self.peak_gib, "runs": self.runs, "last": self.last,
                "oom_lower_bound_gib": self.oom_lower_bound_gib}

    def text(self) -> str:
        day = self.last[:10]
        if self.peak_gib is not None:
            text = f"measured {self.peak_gib:.2f} GiB on this machine, {day}"
            if self.oom_lower_bound_gib is not None and self.oom_lower_bound_gib > self.peak_gib:
                text += f"; an OOM showed it needs at least {self.oom_lower_bound_gib:.2f}"
            return text
        return f"ran out of memory here needing at least {self.oom_lower_bound_gib:.2f} GiB, {day}"


def measured_for(entries: list[Entry], profile, machine) -> Measured | None:
    """The ledger's figures for this profile's shape on this machine, or None when it was never measured."""
    key, here = fingerprint(profile), machine_identity(machine, profile.device)
    mine = [e for e in entries if e.fingerprint == key and _same_machine(e.machine, here)]
    peaks = [e.peak_gib for e in mine if e.succeeded]
    bounds = [e.oom_lower_bound_gib for e in mine if e.oom_lower_bound_gib is not None]
    if not peaks and not bounds:
        return None
    return Measured(peak_gib=max(peaks) if peaks else None, runs=len(mine),
                    last=max(e.date for e in mine), oom_lower_bound_gib=max(bounds) if bounds else None)


def record_attempt(profile, plan, record, attempt_dir: Path, warn=None) -> Entry | None:
    """Add what one finished attempt measured: a run or probe that got through is a measurement of its
    shape's peak, an OOM a lower bound. Attempts that measured nothing (an error, an interruption before
    any figure) add nothing. A ledger that cannot be written costs a warning, never the run."""
    oom = record.report if record.status == "oom" else None
    outcome = _read_json(Path(attempt_dir) / "outcome.json") or {}
    probe = outcome.get("probe") if isinstance(outcome.get("probe"), dict) else None
    measured = [planning_peak(profile.device, peak, measure) for peak, measure in (
        (record.peak_gib if record.status == "ok" else None, outcome.get("peak_measure")),
        (probe.get("peak_gib") if probe else None, probe.get("measure") if probe else None))
        if isinstance(peak, (int, float))]
    if oom is None and not measured:
        return None
    peak, measure = max(measured) if measured else (None, None)
    entry = make_entry(profile, plan.machine, status=record.status, estimate=_plan_estimate(plan, profile),
                       peak_gib=peak, probe=probe, oom_report=oom, vllm=_vllm_figures(Path(attempt_dir)),
                       measure=measure)
    if entry.peak_gib is not None and record.status not in ("ok", "oom"):
        entry.status = "probe-ok"  # the probe got through even though the run did not finish
    try:
        append(entry)
    except OSError as exc:
        _warn(warn, f"warning: cannot add to the ledger {ledger_path()}: {exc.strerror or exc}")
    return entry


# ---------------------------------------------------------------------------------------------------
# Which figure of a GPU peak is planned with: the one that counts what the estimate counts

def planning_peak(device: str, peak_gib: float, measure: str | None) -> tuple[float, str]:
    """(the peak in the estimate's terms, what it is). The GPU process's figure (NVML) already counts the CUDA
    context and memory outside torch; torch's own peak lacks the context, which the estimate counts and free
    memory (NVML) does not hold, so the context is added to it."""
    if device != "cuda" or measure == MEASURE_GPU_PROCESS:
        return float(peak_gib), measure or "process RSS"
    return float(peak_gib) + CUDA_CONTEXT_GIB, f"{MEASURE_TORCH} + CUDA context {CUDA_CONTEXT_GIB:g} GiB"


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


def shape_text(settings: dict) -> str:
    """The keys that tell two shapes of one profile apart at a glance: per-device batch / generations /
    completion tokens, and the LoRA rank."""
    get = settings.get
    text = (f"{get('per_device_train_batch_size', '?')} / {get('num_generations', '?')} / "
            f"{get('max_completion_length', '?')}")
    return text + (f" r{get('lora_rank')}" if get("lora_rank") else " full")


def accuracy_rows(entries: list[Entry]) -> list[dict]:
    """Per machine and shape: the estimate against what was measured (`python train.py --ledger`)."""
    groups: dict[tuple, list[Entry]] = {}
    for e in entries:
        ident = (e.machine.get("device"), e.machine.get("name"), e.machine.get("total_gib"), e.fingerprint)
        groups.setdefault(ident, []).append(e)
    rows = []
    for (device, name, total, _key), group in groups.items():
        peaks = [e.peak_gib for e in group if e.succeeded]
        bounds = [e.oom_lower_bound_gib for e in group if e.oom_lower_bound_gib is not None]
        estimates = [e.estimate_gib for e in group if e.estimate_gib is not None]
        est = estimates[-1] if estimates else None
        peak = max(peaks) if peaks else None
        rows.append({
            "machine": f"{name} ({total} GiB)" if device == "cuda" else f"CPU ({total} GiB RAM)",
            "profile": group[-1].profile, "shape": shape_text(group[-1].settings), "runs": len(group),
            "estimate_gib": est, "peak_gib": peak,
            "measure": next((e.measure for e in reversed(group) if e.succeeded and e.measure), None),
            "ratio": round(peak / est, 3) if peak and est else None,
            "oom_lower_bound_gib": max(bounds) if bounds else None,
            "last": max(e.date for e in group),
        })
    return rows


def print_ledger(path: Path | None = None, console=None) -> int:
    """`python train.py --ledger`: the estimator's accuracy on this machine, shape by shape."""
    from rich.console import Console
    from rich.table import Table

    path = Path(path) if path is not None else ledger_path()
    console = console or Console(highlight=False, width=None if sys.stdout.isatty() else 160)
    rows = accuracy_rows(read(path, warn=lambda text: console.print(text, markup=False)))
    if not rows:
        console.print(f"the ledger {path} holds no measurement yet: every run and `--calibrate` adds to it",
                      markup=False)
        return 0
    table = Table(title=f"ledger: {path}")
    for col in ("machine", "profile", "batch / gens / completion", "runs", "estimate GiB",
                "measured peak GiB", "measured as", "measured / estimate", "OOM lower bound GiB", "last"):
        table.add_column(col)

    def fmt(value, digits=2):
        return "-" if value is None else f"{value:.{digits}f}"

    for r in rows:
        table.add_row(r["machine"], r["profile"], r["shape"], str(r["runs"]), fmt(r["estimate_gib"]),
                      fmt(r["peak_gib"]), r["measure"] or "-", fmt(r["ratio"], 3), fmt(r["oom_lower_bound_gib"]),
                      r["last"][:16].replace("T", " "))
    console.print(table)
    return 0
