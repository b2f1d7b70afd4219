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
from typing import TYPE_CHECKING

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
    "PLAIN_GENERATE_SLOWDOWN": (1.0, 10.0),
    "PLAIN_TRAINING_SLOWDOWN": (1.0, 10.0),
}
SWEEPS = 6
GOLDEN_STEPS = 40


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


def read_table(path: Path) -> dict:
    try:
        table = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise TableError(
            f"{path}: cannot be read ({exc.strerror or exc}) (fix: give a table gpu-check wrote)"
        ) from None
    except ValueError as exc:
        raise TableError(f"{path}: not JSON ({exc}) (fix: give the .json gpu-check wrote, not the .md)") from None
    if not isinstance(table, dict) or not isinstance(table.get("probes"), list) or "card" not in table:
        raise TableError(f"{path}: not a gpu-check table (no card and probes) (fix: give <card>.json from gpu-check)")
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


def timed_entries(table: dict, paths: tuple[str, ...]) -> tuple[list[Timed], list[dict]]:
    """(what the refit fits, what it leaves out and why). Left out: a step timed at a shape it had not run
    before (the kit before it warmed each length: the first step compiles), and a step on Unsloth's path taken
    in its inference mode (a table from before the probe switched to training mode: no checkpointing)."""
    cuda = table.get("card") != "cpu"
    lengths = table.get("lengths_timed") or []
    used, left_out = [], []
    for row in table["probes"]:
        timed = row.get("timed") or {}
        if row.get("status") != "ok" or not timed or row.get("path") not in paths or not row.get("settings"):
            continue
        profile = kit_profile(row["settings"], cuda)
        in_training_mode = "checkpointing" in (row.get("components") or {})
        case = f"{row['architecture'].rpartition('/')[2]} ({row['path']}, {row['precision']})"
        for kind in ("generation", "training"):
            for entry in timed.get(kind) or []:
                why = None
                if kind == "training" and not entry.get("warmed_at_this_shape") and lengths:
                    if entry["completion_tokens"] != max(lengths):
                        why = "the first step at this shape (it compiled)"
                if kind == "training" and row["path"] == UNSLOTH and cuda and not in_training_mode:
                    why = "stepped in Unsloth's inference mode (no gradient checkpointing)"
                if why:
                    left_out.append({"case": case, "kind": kind, "tokens": entry["completion_tokens"], "why": why})
                    continue
                used.append(
                    Timed(
                        case,
                        row["path"],
                        kind,
                        profile,
                        int(entry["sequences"]),
                        int(entry["prompt_tokens"]),
                        int(entry["completion_tokens"]),
                        float(entry["seconds"]),
                    )
                )
    return used, left_out


def _log_errors(entries: list[Timed], gpu, constants: dict) -> list[float]:
    out = []
    for entry in entries:
        predicted = entry.predicted(gpu, constants)
        if predicted and predicted > 0 and entry.seconds > 0:
            out.append(math.log(predicted / entry.seconds))
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
            if at(math.log(best)) <= loss(current):
                current[name] = best
    return current


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
        for comp in row.get("component_rows") or []:
            ratio = comp.get("measured_over_estimate")
            if isinstance(ratio, (int, float)) and ratio > 0:
                grouped.setdefault((row["path"], comp["component"]), []).append(ratio)
                labels[comp["component"]] = comp.get("estimate_terms") or []
    out = []
    for (path, component), ratios in sorted(grouped.items()):
        note = None
        if path == UNSLOTH and component == "forward" and table.get("card") != "cpu":
            if not any("checkpointing" in (r.get("components") or {}) for r in table["probes"]):
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

    names = tuple(names or speed.FITTED_CONSTANTS)
    unknown = [n for n in names if n not in speed.FITTED_CONSTANTS]
    if unknown:
        raise TableError(
            f"--constants {' '.join(unknown)}: not fitted constants (fix: one of {', '.join(speed.FITTED_CONSTANTS)})"
        )
    table = read_table(table_path)
    gpu = table_gpu(table)
    entries, left_out = timed_entries(table, paths)
    if not entries:
        raise TableError(
            f"{table_path}: no timed wave or step to fit on the {' and '.join(paths)} path(s) (fix: a table "
            "whose probes ran, or another --path)"
        )
    before = {name: float(getattr(speed, name)) for name in speed.FITTED_CONSTANTS}
    fitted = {**before, **fit(entries, gpu, names)}

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
        "fitted": list(names),
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
