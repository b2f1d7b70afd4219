"""WHAT a measured table says the models' constants should be: the step-time model's fitted constants
(launcher.plan.speed.FITTED_CONSTANTS) refitted to the waves and steps a card timed, and the estimator's terms
held against the memory it read, component by component; with the errors before and after, on the table and on
the published step times (benchmarks/published_step_times.yaml). Nothing is written: the figures say what to
change, and the change is made in launcher/plan/speed.py or launcher/memory/parts.py with them as evidence.
"""

from __future__ import annotations

import importlib.util
import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeGuard

from contract.errors import UsageError
from measure.cases import PLAIN, REPO, UNSLOTH, kit_profile, predict_timed

if TYPE_CHECKING:  # profiles loads only when a table is read
    from profiles.schema import Profile

PUBLISHED = REPO / "benchmarks" / "published_step_times.py"
# Where each constant may go (physical bounds): a share of a card's peak, or seconds per layer's launches
BOUNDS = {
    "BANDWIDTH_EFFICIENCY": (0.05, 1.0),
    "TRAIN_MATMUL_EFFICIENCY": (0.02, 1.0),
    "PREFILL_MATMUL_EFFICIENCY": (0.02, 1.0),
    "KERNEL_LAUNCH_S": (1e-5, 2e-2),
    "DEQUANT_LAUNCH_FACTOR": (1.0, 5.0),
    "PLAIN_GENERATE_SLOWDOWN": (1.0, 10.0),
    "PLAIN_TRAINING_SLOWDOWN": (1.0, 10.0),
}
SWEEPS = 6
GOLDEN_STEPS = 40
# A table gpu-check writes holds a few dozen timed waves and steps in a few hundred KiB; the fit predicts every
# entry some 1,600 times (about 0.1 ms each), so these bound a table that is not one at a few minutes
MAX_TABLE_BYTES = 64 * 2**20
MAX_ENTRIES = 1000
MAX_COUNT = 10**7  # sequences or tokens of one timed wave or step
# the times a wave or step can take: NaN, zero, a negative or an infinite time says nothing of the model
SHORTEST_S, LONGEST_S = 1e-6, 1e6
FIX_TABLE = "give the <card>.json gpu-check wrote, or take that row out of it"


class TableError(ValueError):
    """A file that is not a kit table the refit can read: the message names the file and the fix."""


@dataclass
class Timed:
    """One timed wave or step of a table, with what the step-time model needs to predict it."""

    case: str
    path: str
    kind: str  # "generation" or "training"
    profile: Profile
    sequences: int
    prompt_tokens: int
    completion_tokens: int
    seconds: float

    def predicted(self, gpu, constants: dict) -> float | None:
        return predict_timed(
            self.profile,
            gpu,
            self.kind,
            self.sequences,
            self.prompt_tokens,
            self.completion_tokens,
            constants=constants,
            plain=self.path == PLAIN,
        )


def _shown(value) -> str:
    """A value of the table as an error shows it: short, whatever it is."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def read_table(path: Path) -> dict:
    """The table as gpu-check wrote it, its shape checked: TableError naming the file, the key and the fix."""
    from contract.safe_read import read_tail

    try:
        data, size = read_tail(path, MAX_TABLE_BYTES)
    except OSError as exc:
        raise TableError(
            f"{path}: cannot be read ({getattr(exc, 'strerror', None) or exc}) (fix: give a table gpu-check wrote)"
        ) from None
    if size > MAX_TABLE_BYTES:
        raise TableError(
            f"{path}: {size / 2**20:.0f} MiB, larger than any table gpu-check writes (at most "
            f"{MAX_TABLE_BYTES / 2**20:.0f} MiB) (fix: give the <card>.json gpu-check wrote)"
        )
    try:
        table = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, RecursionError, ValueError) as exc:
        raise TableError(
            f"{path}: not JSON ({str(exc)[:200]}) (fix: give the .json gpu-check wrote, not the .md)"
        ) from None
    if not isinstance(table, dict) or not isinstance(table.get("probes"), list) or "card" not in table:
        raise TableError(f"{path}: not a gpu-check table (no card and probes) (fix: give <card>.json from gpu-check)")
    if not isinstance(table["card"], str) or not table["card"].strip():
        raise TableError(f"{path}: card is {_shown(table['card'])}, not a card's name (fix: {FIX_TABLE})")
    total = table.get("total_gib")
    if total is not None and not (_is_number(total) and math.isfinite(total) and total >= 0):
        raise TableError(f"{path}: total_gib is {_shown(total)}, not the card's memory in GiB (fix: {FIX_TABLE})")
    lengths = table.get("lengths_timed")
    if lengths is not None and not (
        isinstance(lengths, list) and all(_is_number(n) and math.isfinite(n) for n in lengths)
    ):
        raise TableError(
            f"{path}: lengths_timed is {_shown(lengths)}, not a list of completion lengths (fix: {FIX_TABLE})"
        )
    for index, row in enumerate(table["probes"]):
        if not isinstance(row, dict):
            raise TableError(f"{path}: probes[{index}] is {_shown(row)}, not a probe's row (fix: {FIX_TABLE})")
    return table


def table_gpu(table: dict):
    """The card the table was measured on, as the planner's GpuInfo (None: the CPU)."""
    from launcher.card.detect import GpuInfo

    if table.get("card") == "cpu" or not table.get("total_gib"):
        return None
    total = float(table["total_gib"])
    return GpuInfo(
        name=table["card"],
        total_gib=total,
        free_gib=total,
        used_gib=0.0,
        compute_capability=None,
        driver=None,
        cuda_driver=None,
        index=0,
        source="what-if",
    )


def _count(value, low: int, where: str) -> int:
    """A whole number of sequences or tokens from the table, within [low, MAX_COUNT]; TableError otherwise."""
    if not (_is_number(value) and math.isfinite(value) and value == int(value) and low <= value <= MAX_COUNT):
        raise TableError(f"{where} is {_shown(value)}, not a whole number from {low} to {MAX_COUNT} (fix: {FIX_TABLE})")
    return int(value)


def usable_seconds(value: object) -> bool:
    """Whether a timed wave's or step's seconds can be fitted to: a finite time a wave or step can take."""
    return _is_number(value) and math.isfinite(value) and SHORTEST_S <= value <= LONGEST_S


def timed_entries(
    table: dict, paths: tuple[str, ...], source: Path | str = "the table"
) -> tuple[list[Timed], list[dict]]:
    """(what the refit fits, what it leaves out and why). Left out: a step timed at a shape it had not run
    before (the kit before it warmed each length: the first step compiles), a step on Unsloth's path taken in
    its inference mode (a table from before the probe switched to training mode: no checkpointing), and a time
    that is no time (NaN, zero, negative, infinite). A row that is not as gpu-check writes it: TableError naming
    `source`, the key and the fix."""
    cuda = table.get("card") != "cpu"
    lengths = table.get("lengths_timed") or []
    used, left_out = [], []
    profiles: dict[tuple[str, ...], Profile] = {}
    for index, row in enumerate(table["probes"]):
        where = f"{source}: probes[{index}]"
        timed = row.get("timed") or {}
        if row.get("status") != "ok" or not timed or row.get("path") not in paths or not row.get("settings"):
            continue
        if not isinstance(timed, dict):
            raise TableError(f"{where}.timed is {_shown(timed)}, not the waves and steps timed (fix: {FIX_TABLE})")
        settings = row["settings"]
        if not isinstance(settings, list) or not all(isinstance(item, str) for item in settings):
            raise TableError(f"{where}.settings is {_shown(settings)}, not a list of KEY=VALUE (fix: {FIX_TABLE})")
        if tuple(settings) not in profiles:
            try:
                profiles[tuple(settings)] = kit_profile(settings, cuda)
            except UsageError as exc:  # a ProfileError: the key and the value it cannot use
                raise TableError(f"{where}.settings: {str(exc)[:300]} (fix: {FIX_TABLE})") from None
        profile = profiles[tuple(settings)]
        in_training_mode = isinstance(row.get("components"), dict) and "checkpointing" in row["components"]
        case = f"{str(row.get('architecture')).rpartition('/')[2]} ({row['path']}, {row.get('precision')})"
        planned = timed.get("planned")
        planned = planned if isinstance(planned, dict) else {}
        lists = [(f"{where}.timed.{kind}", kind, timed.get(kind)) for kind in ("generation", "training")]
        lists += [(f"{where}.timed.planned.{kind}", kind, planned.get(kind)) for kind in ("generation", "training")]
        for named, kind, entries in lists:
            entries = entries or []
            if not isinstance(entries, list):
                raise TableError(f"{named} is {_shown(entries)}, not a list (fix: {FIX_TABLE})")
            for number, entry in enumerate(entries):
                at = f"{named}[{number}]"
                if not isinstance(entry, dict):
                    raise TableError(f"{at} is {_shown(entry)}, not a timed {kind} (fix: {FIX_TABLE})")
                sequences = _count(entry.get("sequences"), 1, f"{at}.sequences")
                prompt_tokens = _count(entry.get("prompt_tokens"), 0, f"{at}.prompt_tokens")
                completion_tokens = _count(entry.get("completion_tokens"), 1, f"{at}.completion_tokens")
                seconds = entry.get("seconds")
                if not _is_number(seconds):
                    raise TableError(f"{at}.seconds is {_shown(seconds)}, not a number of seconds (fix: {FIX_TABLE})")
                why = None
                if not usable_seconds(seconds):
                    why = f"no usable time (seconds {seconds:g}: not {SHORTEST_S:g} to {LONGEST_S:g})"
                elif kind == "training" and not entry.get("warmed_at_this_shape") and lengths:
                    if completion_tokens != max(lengths):
                        why = "the first step at this shape (it compiled)"
                if not why and kind == "training" and row["path"] == UNSLOTH and cuda and not in_training_mode:
                    why = "stepped in Unsloth's inference mode (no gradient checkpointing)"
                if why:
                    left_out.append({"case": case, "kind": kind, "tokens": completion_tokens, "why": why})
                    continue
                used.append(
                    Timed(
                        case,
                        row["path"],
                        kind,
                        profile,
                        sequences,
                        prompt_tokens,
                        completion_tokens,
                        float(seconds),
                    )
                )
    return used, left_out


def _log_errors(entries: list[Timed], gpu, constants: dict) -> list[float]:
    out = []
    for entry in entries:
        predicted = entry.predicted(gpu, constants)
        if _is_number(predicted) and math.isfinite(predicted) and predicted > 0 and usable_seconds(entry.seconds):
            error = math.log(predicted / entry.seconds)
            if math.isfinite(error):
                out.append(error)
    return out


def error_summary(log_errors: list[float]) -> dict | None:
    """Median and worst factor off (1.25: 25% either way), the median signed ratio (predicted/measured), and
    the root-mean-square factor (what the fit minimises)."""
    if not log_errors:
        return None
    factors = [math.exp(abs(e)) for e in log_errors]
    return {
        "n": len(log_errors),
        "rms_factor": round(math.exp(math.sqrt(statistics.fmean(e * e for e in log_errors))), 3),
        "median_factor": round(statistics.median(factors), 3),
        "worst_factor": round(max(factors), 3),
        "median_ratio": round(math.exp(statistics.median(log_errors)), 3),
    }


def fit(entries: list[Timed], gpu, names: tuple[str, ...]) -> dict:
    """The constants in `names` that minimise the squared log error over `entries` (coordinate descent in log
    space, each constant within BOUNDS); the others keep the model's own values."""
    from launcher.plan import speed

    current = {name: float(getattr(speed, name)) for name in names}

    def loss(values: dict) -> float:
        errors = _log_errors(entries, gpu, values)
        return sum(e * e for e in errors) if errors else math.inf

    ratio = (math.sqrt(5) - 1) / 2
    for _ in range(SWEEPS):
        for name in names:
            low, high = (math.log(b) for b in BOUNDS[name])

            def at(x: float, name: str = name) -> float:
                return loss({**current, name: math.exp(x)})

            a, b = low, high
            c, d = b - ratio * (b - a), a + ratio * (b - a)
            fc, fd = at(c), at(d)
            for _ in range(GOLDEN_STEPS):
                if fc < fd:
                    b, d, fd = d, c, fc
                    c = b - ratio * (b - a)
                    fc = at(c)
                else:
                    a, c, fc = c, d, fd
                    d = a + ratio * (b - a)
                    fd = at(d)
            best = math.exp((a + b) / 2)
            if at(math.log(best)) < loss(current):  # a constant the rows do not move stays where it is
                current[name] = best
    return current


def unconstrained(entries: list[Timed], gpu, names: tuple[str, ...]) -> list[str]:
    """The constants of `names` no entry's prediction depends on (the plain path's factors when only Unsloth's
    rows are fitted): the error is the same at either bound as at the model's own value, so the rows say nothing
    of them and the fit keeps them."""
    from launcher.plan import speed

    current = {name: float(getattr(speed, name)) for name in names}
    base = _log_errors(entries, gpu, current)
    flat = []
    for name in names:
        low, high = BOUNDS[name]
        trials = (low, high, math.sqrt(low * high))
        if all(_log_errors(entries, gpu, {**current, name: value}) == base for value in trials):
            flat.append(name)
    return flat


def _published_module():
    """benchmarks/published_step_times.py, loaded once (a script, not a package); None where it is absent
    (the image carries no benchmarks)."""
    import sys

    name = "grpo_published_step_times"
    if name in sys.modules:
        return sys.modules[name]
    if not PUBLISHED.is_file():
        return None
    spec = importlib.util.spec_from_file_location(name, PUBLISHED)
    assert spec is not None and spec.loader is not None  # a .py file's location always gives both
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


def published_errors(constants: dict) -> dict | None:
    """The published step times (benchmarks/published_step_times.yaml) predicted with `constants`: errors over
    every predicted record and over the clean ones."""
    import yaml

    from launcher.plan import speed

    module = _published_module()
    if module is None:
        return None
    records = yaml.safe_load(module.DATA.read_text(encoding="utf-8"))
    every, clean = [], []
    with speed.constants_set(constants):
        for record in records:
            if not record.get("card") or record.get("num_generations") is None:
                continue
            ratio = module.predicted(record)["predicted_s"] / record["seconds_per_step"]
            every.append(math.log(ratio))
            if module.clean(record):
                clean.append(math.log(ratio))
    return {"all": error_summary(every), "clean": error_summary(clean)}


def memory_terms(table: dict) -> list[dict]:
    """Per path and component: the median of measured over estimated GiB across the table's probes, the
    factor the estimator's matching terms would take to meet the card."""
    grouped: dict[tuple[str, str], list[float]] = {}
    labels = {}
    for row in table["probes"]:
        comps = row.get("component_rows")
        if not isinstance(row.get("path"), str) or not isinstance(comps, list):
            continue
        for comp in comps:  # what is not a component as gpu-check writes it says nothing of the estimator
            if not isinstance(comp, dict) or not isinstance(comp.get("component"), str):
                continue
            ratio = comp.get("measured_over_estimate")
            if _is_number(ratio) and math.isfinite(ratio) and ratio > 0:
                grouped.setdefault((row["path"], comp["component"]), []).append(ratio)
                terms = comp.get("estimate_terms")
                labels[comp["component"]] = (
                    [str(t) for t in terms] if isinstance(terms, list) else [] if terms is None else [str(terms)]
                )
    out = []
    for (path, component), ratios in sorted(grouped.items()):
        note = None
        if path == UNSLOTH and component == "forward" and table.get("card") != "cpu":
            if not any(
                isinstance(r.get("components"), dict) and "checkpointing" in r["components"] for r in table["probes"]
            ):
                note = "stepped in Unsloth's inference mode (no checkpointing): not the training pass's own figure"
        out.append(
            {
                "path": path,
                "component": component,
                "terms": labels[component],
                "probes": len(ratios),
                "median_measured_over_estimate": round(statistics.median(ratios), 3),
                "range": [round(min(ratios), 3), round(max(ratios), 3)],
                "note": note,
            }
        )
    return out


def refit(table_path: Path, names: tuple[str, ...] | None = None, paths: tuple[str, ...] = (UNSLOTH, PLAIN)) -> dict:
    """Everything the refit reports for one table (see the module docstring)."""
    from launcher.card.facts import card_facts
    from launcher.plan import speed

    names = tuple(dict.fromkeys(names or speed.FITTED_CONSTANTS))  # each once, however often it was given
    unknown = [n for n in names if n not in speed.FITTED_CONSTANTS]
    if unknown:
        raise TableError(
            f"--constants {' '.join(unknown)}: not fitted constants (fix: one of {', '.join(speed.FITTED_CONSTANTS)})"
        )
    table = read_table(table_path)
    gpu = table_gpu(table)
    entries, left_out = timed_entries(table, paths, table_path)
    before = {name: float(getattr(speed, name)) for name in speed.FITTED_CONSTANTS}
    predictable = []
    for entry in entries:  # an architecture outside the catalogue: the model cannot say, nothing to fit
        if _log_errors([entry], gpu, before):
            predictable.append(entry)
        else:
            left_out.append(
                {
                    "case": entry.case,
                    "kind": entry.kind,
                    "tokens": entry.completion_tokens,
                    "why": "the step-time model cannot predict it (an architecture outside the catalogue?)",
                }
            )
    entries = predictable
    on = f"on the {' and '.join(paths)} path(s)"
    if not entries:
        why = f": {len(left_out)} left out, the first for {left_out[0]['why']}" if left_out else ""
        raise TableError(
            f"{table_path}: no timed wave or step to fit {on}{why} (fix: a table whose probes ran and timed "
            "their waves and steps, or another --path)"
        )
    if len(entries) > MAX_ENTRIES:
        raise TableError(
            f"{table_path}: {len(entries)} timed waves and steps {on}, more than a gpu-check table holds (at most "
            f"{MAX_ENTRIES} are fitted) (fix: {FIX_TABLE}, or fit one --path)"
        )
    kept = unconstrained(entries, gpu, names)
    movable = tuple(name for name in names if name not in kept)
    if not movable:
        raise TableError(
            f"--constants {' '.join(names)}: no timed wave or step {on} depends on {'it' if len(names) == 1 else 'them'}"
            f" (fix: --path all, or --constants that the rows of {table_path} time)"
        )
    fitted = {**before, **fit(entries, gpu, movable)}

    def table_errors(constants: dict) -> dict:
        out = {"all": error_summary(_log_errors(entries, gpu, constants))}
        for path in paths:
            for kind in ("generation", "training"):
                subset = [e for e in entries if e.path == path and e.kind == kind]
                if subset:
                    out[f"{path} {kind}"] = error_summary(_log_errors(subset, gpu, constants))
        return out

    known = gpu is not None and card_facts(gpu.name, gpu.total_gib) is not None
    notes = []
    if not known:
        notes.append(
            f"{table['card']} is not in the card table: predictions use the default card's speed, so the constants "
            "fitted here describe that stand-in, not a card (do not adopt them)"
        )
    return {
        "table": str(table_path),
        "card": table["card"],
        "card_known": known,
        "paths": list(paths),
        "fitted": list(movable),
        "unconstrained": kept,
        "entries": len(entries),
        "left_out": left_out,
        "constants": {
            name: {"before": before[name], "after": round(fitted[name], 6)} for name in speed.FITTED_CONSTANTS
        },
        "table_errors": {"before": table_errors(before), "after": table_errors(fitted)},
        "published_errors": {"before": published_errors(before), "after": published_errors(fitted)},
        "memory": memory_terms(table),
        "notes": notes,
    }
