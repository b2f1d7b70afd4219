"""WHAT this machine has measured: one line per attempt in `$GRPO_TRAIN_CACHE/ledger.jsonl`, read back by the
planner so that a shape measured here is judged by its measured peak instead of the estimate alone.

A successful attempt (or probe) is a measurement of its shape's peak. An out-of-memory failure is a lower
bound: the shape needed at least what it held plus what it asked for. Entries match a candidate when the
machine (device, card name, memory to the nearest GiB) and the fingerprint of every profile key that
changes memory are the same. Nothing here imports torch.

The ledger is evidence, weighed (`weigh`), never a verdict stacked up for good:
- an injected OOM (GRPO_INJECT_OOM) is never written; a run with injection writes nothing unless
  GRPO_TRAIN_LEDGER names a ledger for it; a CPU record holding a CUDA OOM's bound (older versions wrote
  injected ones so) is not a measurement;
- the newest measurement of a shape counts; an OOM counts only until a later success of the same shape;
- a record older than MAX_AGE_DAYS no longer counts;
- a line that is not a sound record (cut short, a wrong type, a negative or infinite figure) is skipped with
  one warning.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import sys
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from importlib import metadata
from pathlib import Path
from typing import Any

from contract.attempt import ENV_INJECT_OOM, MEASURE_GPU_PROCESS, MEASURE_TORCH, cache_root, parse_inject
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


# A record older than this no longer counts: drivers, libraries and what else runs on the machine change.
MAX_AGE_DAYS = 30
# Figures above this are not a machine's memory (a hand edit, a unit mix-up): the line is skipped.
MAX_FIGURE_GIB = 65536.0
# What `--forget` takes besides a profile name or a fingerprint: every record.
FORGET_ALL = "all"
FIGURE_FIELDS = ("estimate_gib", "peak_gib", "oom_lower_bound_gib", "others_gib")


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
    oom_lower_bound_gib: float | None = None      # held + asked, from an OOM's figures
    oom_kind: str | None = None                   # what ran out (launcher.oom.read KIND_*), for an OOM
    others_gib: float | None = None               # what other processes held of the device at the OOM
    vllm: dict | None = None                      # vLLM's own start-up breakdown, when it printed one
    settings: dict = field(default_factory=dict)
    versions: dict = field(default_factory=dict)
    date: str = ""

    @property
    def succeeded(self) -> bool:
        return self.status in ("ok", "probe-ok", "interrupted") and self.peak_gib is not None

    @property
    def when(self) -> datetime:
        return _parse_date(self.date)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True) + "\n"

    @classmethod
    def from_dict(cls, data: Any) -> "Entry":
        """An entry from one parsed line; ValueError saying which field is wrong when it is not a sound one."""
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        known = set(cls.__dataclass_fields__)
        try:
            entry = cls(**{k: v for k, v in data.items() if k in known})
        except TypeError:
            missing = [k for k in ("profile", "fingerprint", "machine", "status") if k not in data]
            raise ValueError(f"no {', '.join(missing) or 'required field'}") from None
        entry._check()
        return entry

    def _check(self) -> None:
        for name in ("profile", "fingerprint", "status"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ValueError(f"{name} is {value!r}, not a name")
        if not isinstance(self.machine, dict) or not isinstance(self.machine.get("device"), str):
            raise ValueError(f"machine is {self.machine!r}, not a machine")
        for name in FIGURE_FIELDS:
            value = getattr(self, name)
            if value is None:
                continue
            lowest_ok = 0.0 if name == "others_gib" else None
            if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
                    or value > MAX_FIGURE_GIB or (value < 0 if lowest_ok is not None else value <= 0)):
                raise ValueError(f"{name} is {value!r}, not a positive number of GiB")
        for name in ("components", "settings", "versions"):
            if not isinstance(getattr(self, name), dict):
                raise ValueError(f"{name} is {getattr(self, name)!r}, not an object")
        for name in ("probe", "vllm"):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), dict):
                raise ValueError(f"{name} is {getattr(self, name)!r}, not an object")
        if not isinstance(self.date, str):
            raise ValueError(f"date is {self.date!r}, not a date")
        try:
            _parse_date(self.date)
        except ValueError:
            raise ValueError(f"date is {self.date!r}, not a date (YYYY-MM-DDTHH:MM:SS)") from None


def _parse_date(text: str) -> datetime:
    """A record's date as local time without a zone (records are written so; a zoned one is converted)."""
    when = datetime.fromisoformat(text)
    return when.astimezone().replace(tzinfo=None) if when.tzinfo is not None else when


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
    if None in (total, free, in_use):
        return None
    return round(max(float(total) - float(free) - float(in_use), 0.0), 4)


def make_entry(profile, machine, *, status: str, estimate=None, peak_gib: float | None = None,
               probe: dict | None = None, oom_report=None, vllm: dict | None = None,
               measure: str | None = None) -> Entry:
    bound = oom_lower_bound(oom_report)
    return Entry(measure=measure,
        profile=profile.name, fingerprint=fingerprint(profile),
        machine=machine_identity(machine, profile.device), status=status,
        estimate_gib=round(float(estimate.total_gib), 4) if estimate is not None else None,
        components={k: round(float(v), 4) for k, v in (estimate.components.items() if estimate else ())},
        peak_gib=round(float(peak_gib), 4) if peak_gib is not None else None, probe=probe,
        oom_lower_bound_gib=bound, oom_kind=getattr(oom_report, "kind", None),
        others_gib=others_at_oom(oom_report) if bound is not None else None, vllm=vllm,
        settings=memory_settings(profile), versions=library_versions(),
        date=datetime.now().isoformat(timespec="seconds"))


@contextmanager
def _locked(path: Path, flags: int):
    """The ledger file open and exclusively locked. `forget` replaces the file by a new one: a writer that
    waited on the old one opens the new one and locks again, so that no line lands in a removed file."""
    while True:
        fd = os.open(path, flags, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                current = os.fstat(fd).st_ino == os.stat(path).st_ino
            except FileNotFoundError:
                current = False
        except BaseException:
            os.close(fd)
            raise
        if current:
            break
        os.close(fd)
    try:
        yield fd
    finally:
        os.close(fd)  # closing releases the lock


def append(entry: Entry, path: Path | None = None) -> Path:
    """Add one line. One write of the whole line under an exclusive lock: runs appending at once lose nothing
    and never interleave."""
    path = Path(path) if path is not None else ledger_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    data = entry.to_json().encode("utf-8")
    with _locked(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT) as fd:
        written = 0
        while written < len(data):
            written += os.write(fd, data[written:])
        os.fsync(fd)
    return path


def check_writable(path: Path | None = None) -> Path:
    """The ledger, opened for appending once (created empty when missing): UsageError naming the file and the
    fix when it cannot be written. `--calibrate` checks this before its first probe: measuring into a ledger
    that keeps nothing would cost minutes for nothing."""
    from contract.errors import UsageError

    path = Path(path) if path is not None else ledger_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644))
    except OSError as exc:
        raise UsageError(f"cannot write the ledger {path}: {exc.strerror or exc} (fix: make it writable, or set "
                         f"{ENV_LEDGER}=FILE to a ledger you can write)") from None
    return path


def read(path: Path | None = None, warn=None) -> list[Entry]:
    """Every sound entry; a damaged line (a crash mid-write, a hand edit, a wrong type) is skipped, with one
    warning for all of them that names the first few and why."""
    entries, bad = _read_lines(Path(path) if path is not None else ledger_path(), warn)
    return entries


def _read_lines(path: Path, warn) -> tuple[list[Entry], list[tuple[int, str]]]:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return [], []
    except OSError as exc:
        _warn(warn, f"warning: cannot read the ledger {path}: {exc.strerror or exc}; planning from estimates")
        return [], []
    entries, bad = [], []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entries.append(Entry.from_dict(json.loads(line)))
        except ValueError as exc:  # json's errors are ValueErrors too
            why = str(exc) if not isinstance(exc, json.JSONDecodeError) else "not JSON (cut short?)"
            bad.append((number, why))
    if bad:
        shown = "; ".join(f"line {n}: {why}" for n, why in bad[:3])
        _warn(warn, f"warning: {path}: skipped {len(bad)} damaged line(s) ({shown}{'; ...' if len(bad) > 3 else ''})"
                    f" (fix: `python train.py --forget all` starts the ledger afresh)")
    return entries, bad


def _warn(warn, text: str) -> None:
    if warn is not None:
        warn(text)
    else:
        print(text, file=sys.stderr)


# ---------------------------------------------------------------------------------------------------
# Weighing the evidence: what each record says of its shape on this machine today

def _day(entry: Entry) -> str:
    return entry.date[:10]


def injected_record(entry: Entry) -> bool:
    """A CUDA OOM's bound on a CPU attempt: no CPU run raises one, so an older version wrote an injected OOM
    (GRPO_INJECT_OOM) here as if it were measured."""
    return entry.machine.get("device") == "cpu" and entry.oom_lower_bound_gib is not None and \
        entry.oom_kind in (None, "cuda", "cublas", "vllm")


@dataclass
class Effect:
    """What one record does to its shape's verdict on this machine."""

    counts: bool
    text: str


def _weigh_group(group: list[Entry], now: datetime) -> tuple[dict[int, Effect], Entry | None, list[Entry]]:
    """One shape on one machine: each record's effect, the measurement that counts, the OOMs that count."""
    effects: dict[int, Effect] = {}
    live = []
    oldest = now - timedelta(days=MAX_AGE_DAYS)
    for e in group:
        if injected_record(e):
            effects[id(e)] = Effect(False, "not a measurement: a CUDA OOM on a CPU attempt was injected "
                                           "(GRPO_INJECT_OOM)")
        elif e.when < oldest:
            effects[id(e)] = Effect(False, f"aged out: older than {MAX_AGE_DAYS} days")
        elif e.when > now + timedelta(days=1):  # it would stay the newest, and never age
            effects[id(e)] = Effect(False, "dated in the future (a clock set wrong?): no effect")
        elif not e.succeeded and e.oom_lower_bound_gib is None:
            effects[id(e)] = Effect(False, "no figure: the attempt measured nothing")
        else:
            live.append(e)
    live.sort(key=lambda e: e.when)  # stable: records of the same second keep the file's order
    successes = [i for i, e in enumerate(live) if e.succeeded]
    latest = live[successes[-1]] if successes else None
    ooms = []
    for i, e in enumerate(live):
        if e.succeeded:
            effects[id(e)] = Effect(True, f"counts: measured {e.peak_gib:.2f} GiB") if e is latest else \
                Effect(False, f"superseded by the newer measurement of {_day(latest)}")
        elif successes and i < successes[-1]:
            effects[id(e)] = Effect(False, f"outweighed by the later success of {_day(latest)}")
        else:
            ooms.append(e)
    worst = max(ooms, key=lambda e: e.oom_lower_bound_gib, default=None)
    for e in ooms:
        held = f"; others held {e.others_gib:.2f} GiB then" if e.others_gib else ""
        effects[id(e)] = Effect(True, f"counts: an OOM needs at least {e.oom_lower_bound_gib:.2f} GiB{held}") \
            if e is worst else Effect(False, f"a smaller bound than the OOM of {_day(worst)}")
    return effects, latest, [worst] if worst is not None else []


@dataclass
class Measured:
    """What the ledger knows of one shape on this machine, weighed."""

    peak_gib: float | None        # the newest peak measured by a run or probe that got through
    runs: int                     # entries of this shape on this machine
    last: str                     # date of the latest
    oom_lower_bound_gib: float | None  # the bound of an OOM later than that success, if any
    peak_date: str = ""
    oom_date: str = ""
    others_gib: float | None = None    # what others held of the device at that OOM
    not_counted: int = 0               # records outweighed, superseded, aged out or injected

    @property
    def need_gib(self) -> float | None:
        """The figure to judge the shape by: its measured peak, raised to an OOM's lower bound if larger."""
        figures = [f for f in (self.peak_gib, self.oom_lower_bound_gib) if f is not None]
        return max(figures) if figures else None

    def to_json(self) -> dict:
        return {"peak_gib": self.peak_gib, "runs": self.runs, "last": self.last,
                "oom_lower_bound_gib": self.oom_lower_bound_gib, "need_gib": self.need_gib,
                "peak_date": self.peak_date or None, "oom_date": self.oom_date or None,
                "others_gib": self.others_gib, "not_counted": self.not_counted}

    def text(self) -> str:
        held = f", others then holding {self.others_gib:.2f} GiB" if self.others_gib else ""
        if self.peak_gib is not None:
            text = f"measured {self.peak_gib:.2f} GiB on this machine, {self.peak_date[:10]}"
            if self.oom_lower_bound_gib is not None and self.oom_lower_bound_gib > self.peak_gib:
                text += (f"; an OOM on {self.oom_date[:10]} showed it needs at least "
                         f"{self.oom_lower_bound_gib:.2f}{held}")
            return text
        return f"ran out of memory here needing at least {self.oom_lower_bound_gib:.2f} GiB, {self.oom_date[:10]}{held}"


def measured_for(entries: list[Entry], profile, machine, now: datetime | None = None) -> Measured | None:
    """The ledger's weighed figures for this profile's shape on this machine, or None when no record of it
    counts (never measured, or every record outweighed, aged out or injected)."""
    key, here = fingerprint(profile), machine_identity(machine, profile.device)
    mine = [e for e in entries if e.fingerprint == key and _same_machine(e.machine, here)]
    if not mine:
        return None
    effects, latest, ooms = _weigh_group(mine, now or datetime.now())
    if latest is None and not ooms:
        return None
    oom = ooms[0] if ooms else None
    return Measured(peak_gib=latest.peak_gib if latest else None, runs=len(mine), last=max(e.date for e in mine),
                    oom_lower_bound_gib=oom.oom_lower_bound_gib if oom else None,
                    peak_date=latest.date if latest else "", oom_date=oom.date if oom else "",
                    others_gib=oom.others_gib if oom else None,
                    not_counted=sum(1 for e in mine if not effects[id(e)].counts))


def record_effects(entries: list[Entry], machine, now: datetime | None = None) -> list[Effect]:
    """Each entry's effect on this machine's plans, in the ledger's order (`python train.py --ledger`)."""
    now = now or datetime.now()
    here = [machine_identity(machine, "cuda")] if getattr(machine, "primary", None) is not None else []
    here.append(machine_identity(machine, "cpu"))
    groups: dict[tuple, list[Entry]] = {}
    for e in entries:
        groups.setdefault((e.machine.get("device"), e.machine.get("name"), e.machine.get("total_gib"),
                           e.fingerprint), []).append(e)
    effects: dict[int, Effect] = {}
    for group in groups.values():
        if any(_same_machine(group[0].machine, ident) for ident in here):
            effects.update(_weigh_group(group, now)[0])
        else:
            for e in group:
                effects[id(e)] = Effect(False, "another machine: no effect here")
    return [effects[id(e)] for e in entries]


# ---------------------------------------------------------------------------------------------------
# Writing: what one attempt measured

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
    """Add what one finished attempt measured: a run or probe that got through is a measurement of its
    shape's peak, a genuine OOM a lower bound. An injected OOM is no measurement (the probe's peak before it
    still is); a run with injection writes nothing unless GRPO_TRAIN_LEDGER names a ledger. Attempts that
    measured nothing add nothing. A ledger that cannot be written costs a warning, never the run."""
    global _told_test_run
    environ = os.environ if environ is None else environ
    if test_run_without_ledger(environ):
        if not _told_test_run:
            _told_test_run = True
            _warn(warn, f"{ENV_INJECT_OOM} is set: this run adds nothing to the ledger {ledger_path()} "
                        f"(set {ENV_LEDGER}=FILE to record it into a ledger of its own)")
        return None
    injected = record.status == "oom" and _injected_here(profile.name, environ)
    oom = record.report if record.status == "oom" and not injected else None
    outcome = _read_json(Path(attempt_dir) / "outcome.json") or {}
    probe = outcome.get("probe") if isinstance(outcome.get("probe"), dict) else None
    measured = [planning_peak(profile.device, peak, measure) for peak, measure in (
        (record.peak_gib if record.status == "ok" else None, outcome.get("peak_measure")),
        (probe.get("peak_gib") if probe else None, probe.get("measure") if probe else None))
        if isinstance(peak, (int, float)) and not isinstance(peak, bool) and math.isfinite(peak) and peak > 0]
    if oom_lower_bound(oom) is None and not measured:
        return None
    peak, measure = max(measured) if measured else (None, None)
    entry = make_entry(profile, plan.machine, status=record.status, estimate=_plan_estimate(plan, profile),
                       peak_gib=peak, probe=probe, oom_report=oom, vllm=_vllm_figures(Path(attempt_dir)),
                       measure=measure)
    if entry.peak_gib is not None and (record.status not in ("ok", "oom") or injected):
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


def accuracy_rows(entries: list[Entry], effects: list[Effect] | None = None) -> list[dict]:
    """Per machine and shape: the estimate against what was measured (`python train.py --ledger`); with the
    records' effects, the figures are the ones that count (`effects[i]` belongs to `entries[i]`)."""
    groups: dict[tuple, list[tuple[Entry, Effect | None]]] = {}
    for index, e in enumerate(entries):
        ident = (e.machine.get("device"), e.machine.get("name"), e.machine.get("total_gib"), e.fingerprint)
        groups.setdefault(ident, []).append((e, effects[index] if effects is not None else None))
    rows = []
    for (device, name, total, key), group in groups.items():
        counted = [e for e, effect in group if effect is None or effect.counts]
        group_entries = [e for e, _ in group]
        peaks = [e.peak_gib for e in sorted(counted, key=lambda e: e.when) if e.succeeded]
        bounds = [e.oom_lower_bound_gib for e in counted if not e.succeeded and e.oom_lower_bound_gib is not None]
        estimates = [e.estimate_gib for e in group_entries if e.estimate_gib is not None]
        est = estimates[-1] if estimates else None
        peak = peaks[-1] if peaks else None
        rows.append({
            "machine": f"{name} ({total} GiB)" if device == "cuda" else f"CPU ({total} GiB RAM)",
            "profile": group_entries[-1].profile, "fingerprint": key,
            "shape": shape_text(group_entries[-1].settings), "runs": len(group),
            "counted": len(counted), "estimate_gib": est, "peak_gib": peak,
            "measure": next((e.measure for e in reversed(group_entries) if e.succeeded and e.measure), None),
            "ratio": round(peak / est, 3) if peak and est else None,
            "oom_lower_bound_gib": max(bounds) if bounds else None,
            "last": max(e.date for e in group_entries),
        })
    return rows


def ledger_report(machine, path: Path | None = None, warn=None, now: datetime | None = None) -> dict:
    """What `--ledger` shows, as data (`--ledger --json`): the file, this machine, the rules, each shape's
    figures that count, and every record with its effect here."""
    path = Path(path) if path is not None else ledger_path()
    entries, bad = _read_lines(path, warn)
    effects = record_effects(entries, machine, now)
    here = [machine_identity(machine, "cuda")] if getattr(machine, "primary", None) is not None else []
    here.append(machine_identity(machine, "cpu"))
    records = []
    for e, effect in zip(entries, effects):
        records.append({"date": e.date, "profile": e.profile, "fingerprint": e.fingerprint,
                        "shape": shape_text(e.settings), "machine": e.machine, "status": e.status,
                        "peak_gib": e.peak_gib, "oom_lower_bound_gib": e.oom_lower_bound_gib,
                        "others_gib": e.others_gib, "estimate_gib": e.estimate_gib,
                        "counts": effect.counts, "effect": effect.text})
    return {"path": str(path), "this_machine": here, "max_age_days": MAX_AGE_DAYS,
            "shapes": accuracy_rows(entries, effects), "records": records,
            "skipped_lines": [{"line": n, "why": why} for n, why in bad]}


def print_ledger(machine, path: Path | None = None, console=None, as_json: bool = False) -> int:
    """`python train.py --ledger`: per shape, the estimate against the measurement that counts here; then
    every record with its effect on this machine's plans. `as_json`: one JSON object on stdout."""
    if as_json:
        print(json.dumps(ledger_report(machine, path), indent=2))  # warnings go to stderr
        return 0
    from rich.console import Console
    from rich.table import Table

    console = console or Console(highlight=False, width=None if sys.stdout.isatty() else 160)
    report = ledger_report(machine, path, warn=lambda text: console.print(text, markup=False))
    if not report["records"]:
        console.print(f"the ledger {report['path']} holds no measurement yet: every run and `--calibrate` adds "
                      "to it", markup=False)
        return 0

    def fmt(value, digits=2):
        return "-" if value is None else f"{value:.{digits}f}"

    shapes = Table(title=f"ledger: {report['path']} (figures that count on this machine)")
    for col in ("machine", "profile", "batch / gens / completion", "records", "estimate GiB",
                "measured peak GiB", "measured as", "measured / estimate", "OOM lower bound GiB", "last"):
        shapes.add_column(col)
    for r in report["shapes"]:
        shapes.add_row(r["machine"], r["profile"], r["shape"], f"{r['counted']} of {r['runs']} count",
                       fmt(r["estimate_gib"]), fmt(r["peak_gib"]), r["measure"] or "-", fmt(r["ratio"], 3),
                       fmt(r["oom_lower_bound_gib"]), r["last"][:16].replace("T", " "))
    console.print(shapes)
    records = Table(title="records, oldest first, and their effect on this machine's plans")
    for col in ("date", "profile", "shape", "status", "peak GiB", "OOM bound GiB", "effect"):
        records.add_column(col)
    for r in report["records"]:
        records.add_row(r["date"][:16].replace("T", " "), r["profile"], r["shape"], r["status"],
                        fmt(r["peak_gib"]), fmt(r["oom_lower_bound_gib"]), r["effect"])
    console.print(records)
    console.print(f"rules: the newest measurement of a shape counts; an OOM counts until a later success of "
                  f"that shape; records older than {MAX_AGE_DAYS} days no longer count; `python train.py "
                  "--forget PROFILE|FINGERPRINT|all` removes records", markup=False, soft_wrap=True)
    return 0


# ---------------------------------------------------------------------------------------------------
# Forgetting

def _matches(data: Any, target: str) -> bool:
    if target == FORGET_ALL:
        return True
    if not isinstance(data, dict):
        return False
    name, key = data.get("profile"), data.get("fingerprint")
    return name == target or (isinstance(key, str) and len(target) >= 4 and key.startswith(target))


def forget(target: str, path: Path | None = None) -> int:
    """Remove the records of a profile name, a fingerprint (or its first 4+ characters), or `all`, whatever
    machine they came from; the file is replaced whole, under the lock that appends take. How many went.
    UsageError when nothing matches (naming what the ledger holds) or the file cannot be rewritten."""
    from contract.errors import UsageError

    path = (Path(path) if path is not None else ledger_path()).resolve()  # a link's file, not the link, is rewritten
    target = target.strip()
    if not target:
        raise UsageError("--forget needs a profile name, a fingerprint or `all` (see `python train.py --ledger`)")
    if not path.exists():
        return 0
    try:
        with _locked(path, os.O_RDONLY):
            lines = path.read_bytes().decode("utf-8", errors="replace").splitlines(keepends=True)
            kept, removed, names = [], 0, set()
            for line in lines:
                try:
                    data = json.loads(line) if line.strip() else None
                except ValueError:
                    data = None
                if isinstance(data, dict) and isinstance(data.get("profile"), str):
                    names.add(data["profile"])
                if (data is not None and _matches(data, target)) or (target == FORGET_ALL and line.strip()):
                    removed += 1
                else:
                    kept.append(line)
            if not removed:
                raise UsageError(f"--forget {target}: no record of that profile or fingerprint in {path} (it holds: "
                                 f"{', '.join(sorted(names)) or 'no record'}; `all` forgets every record)")
            from contract.safe_write import write_atomic

            write_atomic(path, "".join(kept))
    except OSError as exc:
        raise UsageError(f"--forget {target}: cannot rewrite the ledger {path}: {exc.strerror or exc} (fix: make "
                         "it and its folder writable)") from None
    return removed


def forget_main(target: str, path: Path | None = None) -> int:
    """`python train.py --forget TARGET`: remove, and say what went and how to see what is left."""
    path = Path(path) if path is not None else ledger_path()
    removed = forget(target, path)
    if not removed:
        print(f"the ledger {path} does not exist: nothing to forget")
    else:
        print(f"forgot {removed} record(s) of {target!r} from {path}; `python train.py --ledger` shows what is left")
    return 0
