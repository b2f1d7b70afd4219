"""HOW LONG a run lasts: its optimizer steps, the prompts it generates for, the epochs of the training data they
make, and the hours the step-time model predicts for them.

The user's pins win, in TRL's order: `max_steps` (a number of optimizer steps), else `num_train_epochs` (passes
over the training split: TRL's epoch holds rows x num_iterations / P optimizer steps, every prompt generated once
per epoch), else `--hours H` (as many steps as the predicted step time fits into H hours). Without any of them
the run is the default: one epoch of the training split, and no longer than DEFAULT_HOURS of predicted steps,
so that no default plan predicts more than DEFAULT_HOURS (README, docs/planning.md). Where the split's size is
not known before the data loads (a hub dataset) the default is DEFAULT_HOURS; where no step time is predicted it
is one epoch; where neither is known, DEFAULT_STEPS. What a run does beside its steps is timed by
launcher.plan.run_time (`beside`), and the whole run's hours are `total_hours`.

`--hours` is also a wall-clock budget the run keeps: the attempt stops with a checkpoint, the adapter and the
report when the next step would not finish inside it (trainer.budget).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from launcher.plan.run_time import RunTime

DEFAULT_HOURS = 4.0
DEFAULT_STEPS = 250  # neither the data's size nor the step's time known
MAX_HOURS = 24.0 * 365  # a budget past a year is a typo


@dataclass(frozen=True)
class RunLength:
    steps: int
    prompts: int  # prompts of the data generated for over the run
    epochs: float | None  # of the training split (None: its size is not known at plan time)
    hours: float | None  # predicted (None: no step-time prediction)
    basis: str  # why this many steps, in words
    budget_hours: float | None = None  # the wall-clock budget the run keeps (--hours), None: none
    beside: RunTime | None = None  # what the run does beside its steps (launcher.plan.run_time), when timed

    @property
    def total_hours(self) -> float | None:
        """The whole run's predicted hours: its steps and what it does beside them (None: not predicted)."""
        if self.hours is None:
            return None
        return self.hours + (self.beside.seconds / 3600 if self.beside is not None else 0.0)

    def to_json(self) -> dict:
        return {
            "steps": self.steps,
            "prompts": self.prompts,
            "epochs": None if self.epochs is None else round(self.epochs, 3),
            "hours": None if self.hours is None else round(self.hours, 3),
            "basis": self.basis,
            "budget_hours": self.budget_hours,
            "total_hours": None if self.total_hours is None else round(self.total_hours, 3),
            "beside_steps": self.beside.to_json() if self.beside is not None else None,
        }

    def finishes(self, now: datetime) -> datetime | None:
        """When a run started at `now` is predicted to finish (None without a prediction)."""
        total = self.total_hours
        return None if total is None else now + timedelta(hours=total)

    def text(self, now: datetime | None = None) -> str:
        """One line: steps, prompts, epochs, hours and the finishing time."""
        parts = [f"{self.steps:,} steps", f"{self.prompts:,} prompts"]
        parts.append(f"{self.epochs:.2f} epochs of the data" if self.epochs is not None else "epochs unknown")
        if self.hours is not None and self.total_hours is not None:
            parts.append(f"predicted {duration_text(self.total_hours)}{self._beside_text()}")
            if now is not None:
                parts.append(f"finishing about {self.finishes(now):%Y-%m-%d %H:%M}")
        text = ", ".join(parts) + f" ({self.basis})"
        if self.budget_hours is not None:
            text += f"; stops at its budget of {seconds_text(self.budget_hours * 3600)}"
        return text

    def _beside_text(self) -> str:
        """In words, the steps' time and the parts beside them (empty where only the steps are timed)."""
        if self.beside is None or self.hours is None:
            return ""
        words = {"start": "start", "probes": "probes", "evaluations": "evaluations", "checkpoints": "saves"}
        said = [f"steps {seconds_text(self.hours * 3600)}"]
        for name, seconds in self.beside.parts.items():
            label = words.get(name, name)
            if name == "evaluations":
                label = f"{self.beside.evaluations} evaluations"
            if seconds >= 0.5:
                said.append(f"{label} {seconds_text(seconds)}")
        return " in all (" + ", ".join(said) + ")"


def seconds_text(seconds: float) -> str:
    """A duration in words: seconds under two minutes, else duration_text's minutes and hours."""
    return f"{seconds:.0f} s" if seconds < 120 else duration_text(seconds / 3600)


def too_short(run: RunLength, floor: int, timed_as: str | None = None) -> str | None:
    """Why a derived rung's run gives too few optimizer updates to be the ladder's choice (fewer than `floor`, its
    min_updates), or None (a length the user pinned is never judged). The run judged must be timed at a speed
    that does not err long: on a card the table does not know, the run of `timed_as`, the fastest card of its
    memory that the table knows (launcher.plan.stages.run_length), never the default card's (which errs long on
    purpose)."""
    if not floor or run.steps >= floor or run.basis.startswith(("max_steps", "num_train")):
        return None
    within = f"{duration_text(run.hours)}" if run.hours is not None else "its run"
    timed = f" even timed as the fastest card of its memory the card table knows ({timed_as})" if timed_as else ""
    return (
        f"derived for this card its run has {run.steps:,} optimizer steps in {within}{timed}, fewer than the "
        f"{floor} a rung must reach (min_updates): the next rung (a smaller model) makes more of them (--hours H "
        "for a longer run, or --profile to run this rung anyway)"
    )


def duration_text(hours: float) -> str:
    minutes = int(round(hours * 60))
    if minutes < 90:
        return f"{max(minutes, 1)} min"
    return f"{minutes // 60} h {minutes % 60:02d} min"


def run_length(
    profile,
    step_s: float | None,
    prompts_per_step: int,
    *,
    hours: float | None = None,
    rows: int | None = None,
    rows_basis: str = "",
) -> RunLength:
    """The run of `profile` (its max_steps and num_train_epochs: 0 when not set) at `step_s` predicted seconds
    a step (None: no prediction) of `prompts_per_step` prompts (every training process's), with a budget of
    `hours` (None: none) over a training split of `rows` prompts (None: not known)."""
    iterations = max(1, int(getattr(profile, "num_iterations", 1) or 1))
    fresh = max(prompts_per_step, 1) / iterations  # prompts of the data a step uses up
    epoch_steps = math.ceil(rows / fresh) if rows else None
    pinned_steps = int(getattr(profile, "max_steps", 0) or 0)
    epochs_pin = float(getattr(profile, "num_train_epochs", 0) or 0)
    budget_steps = int(hours * 3600 // step_s) if hours and step_s else None
    data = f" of {rows:,} prompts ({rows_basis})" if rows else ""
    if pinned_steps:
        steps, basis = pinned_steps, f"max_steps {pinned_steps}"
        if epochs_pin:
            basis += f"; it wins over num_train_epochs {epochs_pin:g}, as in TRL"
    elif epochs_pin:
        if not rows:  # the split's size not known (no epoch_steps)
            from contract.errors import ProfileError

            raise ProfileError(
                profile.source or "<profile>",
                "num_train_epochs",
                f"{epochs_pin:g} epochs of {profile.dataset}, whose size is not known before it loads ({rows_basis})",
                "give max_steps: N (optimizer steps) instead",
            )
        steps = max(1, math.ceil(epochs_pin * rows / fresh))
        basis = f"num_train_epochs {epochs_pin:g}{data}"
    elif hours:
        if budget_steps is not None:
            steps, basis = max(1, budget_steps), f"--hours {hours:g} at the predicted step"
        else:
            steps = epoch_steps or DEFAULT_STEPS
            basis = f"--hours {hours:g}; no predicted step here: " + (
                "one epoch, the budget stops it" if epoch_steps else f"{DEFAULT_STEPS} steps, the budget stops it"
            )
    else:
        default_steps = int(DEFAULT_HOURS * 3600 // step_s) if step_s else None
        floor = int(getattr(profile, "min_updates", 0) or 0)
        if epoch_steps is not None and epoch_steps < floor and (default_steps is None or epoch_steps < default_steps):
            # an epoch of fewer updates than the floor: the floor, within the default hours
            steps = floor if default_steps is None else min(floor, default_steps)
            basis = f"default: {steps} steps, min_updates (one epoch{data} is {epoch_steps})"
        elif epoch_steps is not None and (default_steps is None or epoch_steps <= default_steps):
            steps, basis = epoch_steps, f"default: one epoch{data}"
        elif default_steps is not None:
            steps = max(1, default_steps)
            basis = (
                f"default: {DEFAULT_HOURS:g} h, less than one epoch{data}"
                if epoch_steps is not None
                else f"default: {DEFAULT_HOURS:g} h ({rows_basis})"
            )
        else:
            steps, basis = (
                DEFAULT_STEPS,
                f"default: {DEFAULT_STEPS} steps (neither the data's size nor a step time known)",
            )
    prompts = int(round(steps * fresh))
    return RunLength(
        steps=steps,
        prompts=prompts,
        epochs=prompts / rows if rows else None,
        hours=steps * step_s / 3600 if step_s else None,
        basis=basis,
        budget_hours=hours,
    )
