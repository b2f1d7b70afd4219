"""HOW the ledger's records are weighed: what each says of its shape on this machine today (the newest
measurement counts, an OOM until a later success, old and injected records not at all), the figures a
candidate is judged by, and the report `ledger` shows, as data."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from contract.environment import ENV_LEDGER
from launcher.memory.ledger.store import Entry, fingerprint, ledger_path, machine_identity, read_lines, same_machine

# A record older than this no longer counts: drivers, libraries and what else runs on the machine change.
MAX_AGE_DAYS = 30


def _day(entry: Entry) -> str:
    return entry.date[:10]


def injected_record(entry: Entry) -> bool:
    """A CUDA OOM's bound on a CPU attempt: no CPU run raises one, so an older version wrote an injected OOM
    (GRPO_INJECT_OOM) here as if it were measured."""
    return (
        entry.machine.get("device") == "cpu"
        and entry.oom_lower_bound_gib is not None
        and entry.oom_kind in (None, "cuda", "cublas", "vllm")
    )


def _lengths_only_text(entry: Entry) -> str:
    from contract.length_rule import MeasuredLengths

    measured = MeasuredLengths.from_json(entry.lengths)
    if measured is not None and measured.censored:
        return (
            f"no memory figure: the answers' lengths only, cut at the cap of {measured.cap} (a lower bound: plans "
            "of its model and task plan longer answers than that)"
        )
    return "no memory figure: the answers' lengths only (plans of its model and task read them)"


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
            effects[id(e)] = Effect(
                False, "not a measurement: a CUDA OOM on a CPU attempt was injected (GRPO_INJECT_OOM)"
            )
        elif e.when < oldest:
            effects[id(e)] = Effect(False, f"aged out: older than {MAX_AGE_DAYS} days")
        elif e.when > now + timedelta(days=1):  # it would stay the newest, and never age
            effects[id(e)] = Effect(False, "dated in the future (a clock set wrong?): no effect")
        elif not e.succeeded and e.oom_lower_bound_gib is None:
            effects[id(e)] = Effect(
                False, _lengths_only_text(e) if e.lengths else "no figure: the attempt measured nothing"
            )
        else:
            live.append(e)
    live.sort(key=lambda e: e.when)  # stable: records of the same second keep the file's order
    successes = [i for i, e in enumerate(live) if e.succeeded]
    latest = live[successes[-1]] if successes else None
    latest_day = _day(latest) if latest is not None else ""
    ooms = []
    for i, e in enumerate(live):
        if e.succeeded:
            effects[id(e)] = (
                Effect(True, f"counts: measured {e.peak_gib:.2f} GiB")
                if e is latest
                else Effect(False, f"superseded by the newer measurement of {latest_day}")
            )
        elif successes and i < successes[-1]:
            effects[id(e)] = Effect(False, f"outweighed by the later success of {latest_day}")
        else:
            ooms.append(e)
    # every live record that did not succeed has a bound (those without one were set aside above)
    worst = max(ooms, key=lambda e: e.oom_lower_bound_gib or 0.0, default=None)
    worst_day = _day(worst) if worst is not None else ""
    for e in ooms:
        held = f"; others held {e.others_gib:.2f} GiB then" if e.others_gib else ""
        effects[id(e)] = (
            Effect(True, f"counts: an OOM needs at least {e.oom_lower_bound_gib:.2f} GiB{held}")
            if e is worst
            else Effect(False, f"a smaller bound than the OOM of {worst_day}")
        )
    return effects, latest, [worst] if worst is not None else []


@dataclass
class Measured:
    """What the ledger knows of one shape on this machine, weighed."""

    peak_gib: float | None  # the newest peak measured by a run or probe that got through
    runs: int  # entries of this shape on this machine
    last: str  # date of the latest
    oom_lower_bound_gib: float | None  # the bound of an OOM later than that success, if any
    peak_date: str = ""
    oom_date: str = ""
    others_gib: float | None = None  # what others held of the device at that OOM
    not_counted: int = 0  # records outweighed, superseded, aged out or injected
    step_s: float | None = None  # the newest measured seconds per step of the shape here
    predicted_step_s: float | None = None

    @property
    def need_gib(self) -> float | None:
        """The figure to judge the shape by: its measured peak, raised to an OOM's lower bound if larger."""
        figures = [f for f in (self.peak_gib, self.oom_lower_bound_gib) if f is not None]
        return max(figures) if figures else None

    def to_json(self) -> dict:
        return {
            "peak_gib": self.peak_gib,
            "runs": self.runs,
            "last": self.last,
            "oom_lower_bound_gib": self.oom_lower_bound_gib,
            "need_gib": self.need_gib,
            "peak_date": self.peak_date or None,
            "oom_date": self.oom_date or None,
            "others_gib": self.others_gib,
            "not_counted": self.not_counted,
            "step_s": self.step_s,
            "predicted_step_s": self.predicted_step_s,
        }

    def text(self) -> str:
        held = f", others then holding {self.others_gib:.2f} GiB" if self.others_gib else ""
        if self.peak_gib is not None:
            text = f"measured {self.peak_gib:.2f} GiB on this machine, {self.peak_date[:10]}"
            if self.oom_lower_bound_gib is not None and self.oom_lower_bound_gib > self.peak_gib:
                text += (
                    f"; an OOM on {self.oom_date[:10]} showed it needs at least {self.oom_lower_bound_gib:.2f}{held}"
                )
            return text
        return f"ran out of memory here needing at least {self.oom_lower_bound_gib:.2f} GiB, {self.oom_date[:10]}{held}"


def measured_for(entries: list[Entry], profile, machine, now: datetime | None = None) -> Measured | None:
    """The ledger's weighed figures for this profile's shape on this machine, or None when no record of it
    counts (never measured, or every record outweighed, aged out or injected)."""
    key, here = fingerprint(profile), machine_identity(machine, profile.device)
    mine = [e for e in entries if e.fingerprint == key and same_machine(e.machine, here)]
    if not mine:
        return None
    effects, latest, ooms = _weigh_group(mine, now or datetime.now())
    if latest is None and not ooms:
        return None
    oom = ooms[0] if ooms else None
    # the newest counted record with a step time (a success: a run that trained)
    timed = [e for e in mine if e.step_s is not None and effects[id(e)].counts]
    newest_time = max(timed, key=lambda e: e.when) if timed else None
    return Measured(
        step_s=newest_time.step_s if newest_time else None,
        predicted_step_s=newest_time.predicted_step_s if newest_time else None,
        peak_gib=latest.peak_gib if latest else None,
        runs=len(mine),
        last=max(e.date for e in mine),
        oom_lower_bound_gib=oom.oom_lower_bound_gib if oom else None,
        peak_date=latest.date if latest else "",
        oom_date=oom.date if oom else "",
        others_gib=oom.others_gib if oom else None,
        not_counted=sum(1 for e in mine if not effects[id(e)].counts),
    )


def record_effects(entries: list[Entry], machine, now: datetime | None = None) -> list[Effect]:
    """Each entry's effect on this machine's plans, in the ledger's order (`python train.py ledger`)."""
    now = now or datetime.now()
    here = [machine_identity(machine, "cuda")] if getattr(machine, "primary", None) is not None else []
    here.append(machine_identity(machine, "cpu"))
    groups: dict[tuple, list[Entry]] = {}
    for e in entries:
        groups.setdefault(
            (e.machine.get("device"), e.machine.get("name"), e.machine.get("total_gib"), e.fingerprint), []
        ).append(e)
    effects: dict[int, Effect] = {}
    for group in groups.values():
        if any(same_machine(group[0].machine, ident) for ident in here):
            effects.update(_weigh_group(group, now)[0])
        else:
            for e in group:
                effects[id(e)] = Effect(False, "another machine: no effect here")
    return [effects[id(e)] for e in entries]


def shape_text(settings: dict) -> str:
    """The keys that tell two shapes of one profile apart at a glance: per-device batch / generations /
    completion tokens, and the LoRA rank."""

    def get(key):  # a whole number, or '?' for anything a damaged line holds there
        value = settings.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else "?"

    text = f"{get('per_device_train_batch_size')} / {get('num_generations')} / {get('max_completion_length')}"
    return text + (f" r{get('lora_rank')}" if settings.get("lora_rank") else " full")


def accuracy_rows(entries: list[Entry], effects: list[Effect] | None = None) -> list[dict]:
    """Per machine and shape: the estimate against what was measured (`python train.py ledger`); with the
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
        rows.append(
            {
                "machine": f"{name} ({total} GiB)" if device == "cuda" else f"CPU ({total} GiB RAM)",
                "profile": group_entries[-1].profile,
                "fingerprint": key,
                "shape": shape_text(group_entries[-1].settings),
                "runs": len(group),
                "counted": len(counted),
                "estimate_gib": est,
                "peak_gib": peak,
                "measure": next((e.measure for e in reversed(group_entries) if e.succeeded and e.measure), None),
                "ratio": round(peak / est, 3) if peak and est else None,
                "oom_lower_bound_gib": max(bounds) if bounds else None,
                "step_s": next(
                    (e.step_s for e in sorted(counted, key=lambda e: e.when, reverse=True) if e.step_s is not None),
                    None,
                ),
                "predicted_step_s": next(
                    (
                        e.predicted_step_s
                        for e in sorted(counted, key=lambda e: e.when, reverse=True)
                        if e.step_s is not None
                    ),
                    None,
                ),
                "last": max(e.date for e in group_entries),
            }
        )
    return rows


def ledger_report(machine, path: Path | None = None, warn=None, now: datetime | None = None) -> dict:
    """What `ledger` shows, as data (`ledger --json`): the file, this machine, the rules, each shape's
    figures that count, and every record with its effect here."""
    path = Path(path) if path is not None else ledger_path()
    from contract.errors import UsageError
    from contract.safe_write import dangling_link

    link = dangling_link(path)
    if link:
        raise UsageError(
            f"the ledger {path} cannot be read: {link} (fix: remove or repair the link, or set {ENV_LEDGER}=FILE)"
        )
    entries, bad = read_lines(path, warn)
    effects = record_effects(entries, machine, now)
    here = [machine_identity(machine, "cuda")] if getattr(machine, "primary", None) is not None else []
    here.append(machine_identity(machine, "cpu"))
    records = []
    for e, effect in zip(entries, effects):
        records.append(
            {
                "date": e.date,
                "profile": e.profile,
                "fingerprint": e.fingerprint,
                "shape": shape_text(e.settings),
                "machine": e.machine,
                "status": e.status,
                "peak_gib": e.peak_gib,
                "oom_lower_bound_gib": e.oom_lower_bound_gib,
                "others_gib": e.others_gib,
                "estimate_gib": e.estimate_gib,
                "counts": effect.counts,
                "effect": effect.text,
            }
        )
    return {
        "path": str(path),
        "this_machine": here,
        "max_age_days": MAX_AGE_DAYS,
        "shapes": accuracy_rows(entries, effects),
        "records": records,
        "skipped_lines": [{"line": n, "why": why} for n, why in bad],
    }


# ---------------------------------------------------------------------------------------------------
# The answers' lengths: per model, task (data and system prompt) and template switches, whatever the card


def lengths_identity(profile, switches: dict) -> dict:
    """What measured lengths are kept under: the model (its catalogue name: a mirror or a 4-bit checkpoint
    writes alike), the task (data and system prompt), the chat template's switches, the tools offered (a tools
    run answers in turns, and the tiny model's tool-calling build is another model under the same name) and
    the sampling settings (a hotter temperature writes other answers). A record lacking any of these was
    measured under settings no longer known: it matches nothing."""
    import hashlib
    import json

    from profiles.catalog import catalogue_key

    prompt = hashlib.sha256((profile.system_prompt or "").encode("utf-8")).hexdigest()[:12]
    tools = sorted(str(t) for t in (getattr(profile, "tools", None) or ()))
    environment = str(getattr(profile, "environment", "") or "")
    offered = (
        {"tools": tools, "environment": environment, "max_tool_calls": profile.max_tool_calls}
        if tools or environment
        else {}
    )
    sampling = {
        key: getattr(profile, key, None) for key in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")
    }
    sampling["min_p"] = float(sampling["min_p"] or 0.0)  # unset and 0 sample alike
    return {
        "model": catalogue_key(profile.model),
        "task": profile.dataset,
        "prompt": prompt,
        "switches": json.loads(json.dumps(dict(switches or {}), sort_keys=True, default=str)),
        "tools": json.loads(json.dumps(offered, sort_keys=True, default=str)),
        "sampling": json.loads(json.dumps(sampling, sort_keys=True, default=str)),
    }


@dataclass(frozen=True)
class LengthsFound:
    """The measurement of the answers' lengths a plan reads, and the ledger record it comes from (named in the
    plan's notes, so that `ledger --forget` can drop it)."""

    measured: Any  # contract.length_rule.MeasuredLengths
    day: str  # YYYY-MM-DD
    profile: str  # the profile whose attempt measured it
    fingerprint: str  # that record's fingerprint: what `ledger --forget` takes

    def record_text(self) -> str:
        return (
            f"measured by {self.profile} on {self.day} (ledger record {self.fingerprint}: "
            f"`python train.py ledger --forget {self.fingerprint}` forgets it)"
        )


def measured_lengths(entries, profile, switches: dict, now: datetime | None = None) -> LengthsFound | None:
    """The measurement of the answers' lengths for this model, task, switches, tools and sampling settings, or
    None: the newest whose answers ended within the cap, else the newest cut one (a lower bound: the plan
    reads it as one, contract.length_rule.planned_from). Records older than MAX_AGE_DAYS do not count."""
    from contract.length_rule import MeasuredLengths

    if not entries:
        return None
    now = now or datetime.now()
    wanted = lengths_identity(profile, switches)
    whole: tuple | None = None
    cut: tuple | None = None
    for entry in entries:
        data = entry.lengths
        if not isinstance(data, dict) or any(data.get(k) != v for k, v in wanted.items()):
            continue
        if entry.when < now - timedelta(days=MAX_AGE_DAYS) or entry.when > now + timedelta(days=1):
            continue
        measured = MeasuredLengths.from_json(data)
        if measured is None:
            continue
        best = cut if measured.censored else whole
        if best is None or entry.when >= best[1].when:
            if measured.censored:
                cut = (measured, entry)
            else:
                whole = (measured, entry)
    found = whole or cut
    if found is None:
        return None
    measured, entry = found
    return LengthsFound(measured, entry.when.date().isoformat(), entry.profile, entry.fingerprint)
