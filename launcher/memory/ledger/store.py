"""HOW the ledger is kept: its file, the record's schema (Entry) and its checks, the lock every writer takes,
appending one whole line, reading back every sound line, and forgetting records.

Nothing here weighs a record (launcher.memory.ledger.weigh) or decides what an attempt adds (`record`)."""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import math
import os
import sys
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from contract.environment import ENV_LEDGER, cache_root
from contract.errors import UsageError
from contract.safe_write import dangling_link
from profiles.schema import MEMORY_KEYS  # the keys that change how much memory a step needs

LEDGER_FILE = "ledger.jsonl"
VERSIONED_PACKAGES = ("torch", "transformers", "trl", "peft", "unsloth", "vllm", "bitsandbytes")


def ledger_path() -> Path:
    """$GRPO_TRAIN_LEDGER, else the cache's ledger.jsonl. UsageError when the variable names something that is
    there and no regular file (/dev/zero would be read forever, a FIFO never opened)."""
    override = os.environ.get(ENV_LEDGER, "").strip()
    if not override:
        return cache_root() / LEDGER_FILE
    path = Path(override).expanduser()
    if path.exists() and not path.is_file():  # a link that leads nowhere is named where the ledger is used
        raise UsageError(
            f"cannot write the ledger {ENV_LEDGER}={override}: not a regular file (fix: a file the ledger is kept in, e.g. "
            "~/ledger.jsonl, or unset it for the default)"
        )
    return path


def memory_settings(profile) -> dict:
    settings = {key: getattr(profile, key) for key in MEMORY_KEYS}
    settings["target_modules"] = sorted(settings["target_modules"])
    if getattr(profile, "tools", None) or getattr(profile, "environment", ""):
        # turns lengthen a step (launcher.plan.turns): a measured step of a run with tools is not a step without
        # them; profiles without tools keep the fingerprints they always had
        settings["tool_turns"] = profile.max_tool_calls
    return settings


def fingerprint(profile) -> str:
    """A short hash of the keys that change memory: two profiles with the same one need the same memory."""
    text = json.dumps(memory_settings(profile), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def machine_identity(machine, device: str) -> dict:
    """What makes two runs comparable: the card (name, memory to the GiB) or the CPU with its RAM."""
    gpu = getattr(machine, "primary", None)
    if device == "cuda" and gpu is not None:
        return {"device": "cuda", "name": gpu.name, "total_gib": round(float(gpu.total_gib)), "driver": gpu.driver}
    return {"device": "cpu", "name": "cpu", "total_gib": round(float(getattr(machine, "host_ram_gib", 0.0)))}


def same_machine(a: dict, b: dict) -> bool:
    return all(a.get(k) == b.get(k) for k in ("device", "name", "total_gib"))


def library_versions() -> dict:
    from importlib import metadata  # only when a record is written: planning never needs it

    found = {}
    for name in VERSIONED_PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


# Figures above this are not a machine's memory (a hand edit, a unit mix-up): the line is skipped.
MAX_FIGURE_GIB = 65536.0
# Names (profile, card, status) are short; a longer one is a damaged or hand-made line.
MAX_NAME_CHARS = 256


def _short(value: Any) -> str:
    text = repr(value) if isinstance(value, (str, int, float, bool, type(None))) else type(value).__name__
    return text if len(text) <= 60 else text[:57] + "..."


# What `--forget` takes besides a profile name or a fingerprint: every record.
FORGET_ALL = "all"
FIGURE_FIELDS = ("estimate_gib", "peak_gib", "oom_lower_bound_gib", "others_gib")
# Seconds and tokens a record may carry: positive and finite, or the line is skipped
TIME_FIELDS = ("step_s", "predicted_step_s", "completion_mean")
MAX_STEP_S = 7 * 24 * 3600.0


@dataclass
class Entry:
    profile: str
    fingerprint: str
    machine: dict
    status: str  # the attempt's status, or "probe-ok" / "probe-oom"
    estimate_gib: float | None = None
    components: dict = field(default_factory=dict)
    peak_gib: float | None = None  # measured peak of the attempt (or of its probe), as planned with
    measure: str | None = None  # what was measured (see planning_peak); None: before it was said
    probe: dict | None = None
    oom_lower_bound_gib: float | None = None  # held + asked, from an OOM's figures
    oom_kind: str | None = None  # what ran out (contract.oom KIND_*), for an OOM
    others_gib: float | None = None  # what other processes held of the device at the OOM
    vllm: dict | None = None  # vLLM's own start-up breakdown, when it printed one
    step_s: float | None = None  # measured seconds per optimizer step (steady state)
    predicted_step_s: float | None = None  # what the plan predicted for it
    completion_mean: float | None = None  # the mean completion length the measured steps generated
    # the answers' measured lengths (contract.length_rule.MeasuredLengths) and what they were measured with:
    # {"model", "task", "prompt", "switches", "samples", "mean", "p95", "longest", "cut_share", "cap", "source"}
    lengths: dict | None = None
    settings: dict = field(default_factory=dict)
    versions: dict = field(default_factory=dict)
    date: str = ""

    @property
    def succeeded(self) -> bool:
        return self.status in ("ok", "probe-ok", "interrupted") and self.peak_gib is not None

    @property
    def when(self) -> datetime:
        """The date as a datetime, parsed once (weighing sorts by it again and again)."""
        when = self.__dict__.get("_when")
        if when is None:
            when = self.__dict__["_when"] = parse_date(self.date)
        return when

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True) + "\n"

    @classmethod
    def from_dict(cls, data: Any) -> Entry:
        """An entry from one parsed line; ValueError saying which field is wrong when it is not a sound one."""
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        try:
            entry = cls(**{k: data[k] for k in _ENTRY_FIELDS if k in data})
        except TypeError:
            missing = [k for k in ("profile", "fingerprint", "machine", "status") if k not in data]
            raise ValueError(f"no {', '.join(missing) or 'required field'}") from None
        entry._check()
        return entry

    def _check(self) -> None:
        for name in ("profile", "fingerprint", "status"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value or len(value) > MAX_NAME_CHARS:
                raise ValueError(f"{name} is {_short(value)}, not a name")
        if self.measure is not None and (not isinstance(self.measure, str) or len(self.measure) > MAX_NAME_CHARS):
            raise ValueError(f"measure is {_short(self.measure)}, not a description")
        if self.oom_kind is not None and not isinstance(self.oom_kind, str):
            raise ValueError(f"oom_kind is {_short(self.oom_kind)}, not a name")
        machine = self.machine
        if not isinstance(machine, dict) or not isinstance(machine.get("device"), str):
            raise ValueError(f"machine is {_short(machine)}, not a machine")
        # what the listing shows and groups by: a name (text) and a size (a number)
        card, total = machine.get("name"), machine.get("total_gib")
        if card is not None and (not isinstance(card, str) or len(card) > MAX_NAME_CHARS):
            raise ValueError(f"machine name is {_short(card)}, not a name")
        if total is not None and (
            isinstance(total, bool)
            or not isinstance(total, (int, float))
            or not math.isfinite(total)
            or not 0 <= total <= MAX_FIGURE_GIB
        ):
            raise ValueError(f"machine total_gib is {_short(total)}, not a number of GiB")
        for name in FIGURE_FIELDS:
            value = getattr(self, name)
            if value is None:
                continue
            lowest_ok = 0.0 if name == "others_gib" else None
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
                or value > MAX_FIGURE_GIB
                or (value < 0 if lowest_ok is not None else value <= 0)
            ):
                raise ValueError(f"{name} is {value!r}, not a positive number of GiB")
        for name in TIME_FIELDS:
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
                or value <= 0
                or value > MAX_STEP_S
            ):
                raise ValueError(f"{name} is {value!r}, not a positive number")
        for name in ("components", "settings", "versions"):
            if not isinstance(getattr(self, name), dict):
                raise ValueError(f"{name} is {getattr(self, name)!r}, not an object")
        for name in ("probe", "vllm", "lengths"):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), dict):
                raise ValueError(f"{name} is {getattr(self, name)!r}, not an object")
        if not isinstance(self.date, str):
            raise ValueError(f"date is {self.date!r}, not a date")
        try:
            self.__dict__["_when"] = parse_date(self.date)
        except ValueError:
            raise ValueError(f"date is {self.date!r}, not a date (YYYY-MM-DDTHH:MM:SS)") from None


_ENTRY_FIELDS = tuple(Entry.__dataclass_fields__)


def parse_date(text: str) -> datetime:
    """A record's date as local time without a zone (records are written so; a zoned one is converted)."""
    when = datetime.fromisoformat(text)
    return when.astimezone().replace(tzinfo=None) if when.tzinfo is not None else when


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
        start = os.lseek(fd, 0, os.SEEK_END)
        try:
            written = 0
            while written < len(data):
                written += os.write(fd, data[written:])
            os.fsync(fd)
        except OSError:
            # a full disk took part of the line: take it back, so that no torn line is left to skip later
            try:
                os.ftruncate(fd, start)
            except OSError:
                pass
            raise
    return path


def check_writable(path: Path | None = None) -> Path:
    """The ledger, opened for appending once (created empty when missing): UsageError naming the file and the
    fix when it cannot be written. `calibrate` checks this before its first probe: measuring into a ledger
    that keeps nothing would cost minutes for nothing."""
    from contract.errors import UsageError

    path = Path(path) if path is not None else ledger_path()
    link = dangling_link(path)
    if link:
        raise UsageError(
            f"cannot write the ledger {path}: {link} (fix: remove or repair the link, or set "
            f"{ENV_LEDGER}=FILE to a ledger you can write)"
        )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644))
        # a full disk still opens a file: write a few records' worth beside the ledger, and sync it
        probe = path.with_name(f".{path.name}.write-test-{os.getpid()}")
        try:
            fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, b"\0" * WRITE_TEST_BYTES)
                os.fsync(fd)
            finally:
                os.close(fd)
        finally:
            probe.unlink(missing_ok=True)
    except OSError as exc:
        fix = "free some space on that disk" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else "make it writable"
        raise UsageError(
            f"cannot write the ledger {path}: {exc.strerror or exc} (fix: {fix}, or set "
            f"{ENV_LEDGER}=FILE to a ledger you can write)"
        ) from None
    return path


WRITE_TEST_BYTES = 16 * 1024  # a few records: what a calibration appends


def read(path: Path | None = None, warn=None) -> list[Entry]:
    """Every sound entry; a damaged line (a crash mid-write, a hand edit, a wrong type) is skipped, with one
    warning for all of them that names the first few and why."""
    entries, bad = read_lines(Path(path) if path is not None else ledger_path(), warn)
    return entries


# A ledger record is about a KiB; a ledger far past this is read from its end (its newest records).
MAX_LEDGER_BYTES = 256 << 20


def read_lines(path: Path, warn) -> tuple[list[Entry], list[tuple[int, str]]]:
    from contract.safe_read import after_first_line, read_tail

    try:
        data, size = read_tail(path, MAX_LEDGER_BYTES)
    except FileNotFoundError:
        return [], []
    except OSError as exc:
        warn_or_print(warn, f"warning: cannot read the ledger {path}: {exc.strerror or exc}; planning from estimates")
        return [], []
    if size > MAX_LEDGER_BYTES:
        data = after_first_line(data)
        warn_or_print(
            warn,
            f"warning: the ledger {path} is {size / 2**20:.0f} MiB; read its last {MAX_LEDGER_BYTES / 2**20:g} MiB "
            "(its newest records) (fix: `python train.py ledger --forget PROFILE` drops old records)",
        )
    lines = data.decode("utf-8", errors="replace").splitlines()
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
        warn_or_print(
            warn,
            f"warning: {path}: skipped {len(bad)} damaged line(s) ({shown}{'; ...' if len(bad) > 3 else ''})"
            f" (fix: `python train.py ledger --forget all` starts the ledger afresh)",
        )
    return entries, bad


def warn_or_print(warn, text: str) -> None:
    if warn is not None:
        warn(text)
    else:
        print(text, file=sys.stderr)


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

    given = Path(path) if path is not None else ledger_path()
    link = dangling_link(given)
    if link:
        raise UsageError(
            f"--forget: the ledger {given} cannot be read: {link} (fix: remove or repair the link, or "
            f"set {ENV_LEDGER}=FILE)"
        )
    path = given.resolve()  # a link's file, not the link, is rewritten
    target = target.strip()
    if not target:
        raise UsageError("--forget needs a profile name, a fingerprint or `all` (see `python train.py ledger`)")
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
                raise UsageError(
                    f"--forget {target}: no record of that profile or fingerprint in {path} (it holds: "
                    f"{', '.join(sorted(names)) or 'no record'}; `all` forgets every record)"
                )
            from contract.safe_write import write_atomic

            write_atomic(path, "".join(kept))
    except OSError as exc:
        raise UsageError(
            f"--forget {target}: cannot rewrite the ledger {path}: {exc.strerror or exc} (fix: make "
            "it and its folder writable)"
        ) from None
    return removed
