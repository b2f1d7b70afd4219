"""HOW `--resume` continues a run: its last attempt found again, the shape that attempt's checkpoints need
checked against the --set given now (refused, or started over on --fresh-attempt, never silently), and the
supervisor's loop taken up where the run stopped."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from rich.console import Console
from rich.markup import escape

from contract.attempt import OK, OOM, PLAN_FILE, PROFILE_FILE, STOPPED_BY_BUDGET, UNSUPPORTED, checkpoint_step
from contract.errors import EXIT_OK, EXIT_OUT_OF_MEMORY, UsageError
from launcher.run.attempts import AttemptRecord
from launcher.run.request import RunRequest
from profiles.load import Profile, load_profile, set_keys
from profiles.schema import SHAPE_KEYS, shape_of


class Supervisor(Protocol):
    """What resuming asks of the run's supervisor (launcher.run.supervisor.Supervisor), named here so that
    the supervisor may call this module without this module importing it back."""

    records: list[AttemptRecord]
    attempt_shapes: list
    resume_floor: int
    run_dir: Path
    console: Console

    def run(self, profile: Profile, changes: dict | None = None, decision_text: str | None = None) -> int: ...
    def decide_after(self, profile: Profile, status: str, report): ...
    def resume_point(self, profile: Profile) -> Path | None: ...
    def in_run(self, path) -> str | None: ...


def resume_run(supervisor: Supervisor, request: RunRequest, taken_up: Callable[[], None] | None = None) -> int:
    """Continue the supervisor's run: re-run its last attempt's profile from its last checkpoint, or, when that
    attempt ran out of memory and the run stopped before deciding, take the decision it would have taken.
    A profile --profile names beside --resume (the job script's resubmission) is refused unless the run trained
    it; `taken_up()` is called once the resume passed its checks, before an attempt."""
    run_dir, console, overrides = supervisor.run_dir, supervisor.console, list(request.overrides)
    attempt_dirs = sorted((p for p in run_dir.glob("attempt-*") if (p / PROFILE_FILE).is_file()), key=lambda p: p.name)
    if not attempt_dirs:
        raise UsageError(f"--resume: {run_dir} holds no attempt (fix: start a new run with `python train.py train`)")
    if request.named_profile is not None:
        _check_named_profile(request.named_profile, run_dir, attempt_dirs)
    last_dir = attempt_dirs[-1]
    record = next((r for r in supervisor.records if r.attempt_dir and Path(r.attempt_dir).name == last_dir.name), None)
    console.print(f"resuming run {run_dir}", markup=False)
    budget_stop = record is not None and record.status == OK and record.stopped_by == STOPPED_BY_BUDGET
    as_run = load_profile(last_dir / PROFILE_FILE)
    profile = load_profile(last_dir / PROFILE_FILE, overrides)
    fresh = request.fresh_attempt
    finished = record if record is not None and record.status == OK and not fresh and not budget_stop else None
    if finished is not None and not _trains_on(finished, profile, overrides):
        console.print(
            f"{last_dir.name} already finished ok at step {finished.steps}: nothing to resume (to train it on: "
            f"--resume with --set max_steps=N, N above {finished.steps})",
            markup=False,
        )
        return EXIT_OK
    if record is None:
        # The supervisor stopped while this attempt ran: count its checkpoints too.
        supervisor.attempt_shapes.append((shape_of(as_run), last_dir))
    _check_shape(supervisor, as_run, profile, fresh)
    if taken_up is not None:
        taken_up()
    if record is None:
        return supervisor.run(profile, None, "resumed: the run stopped during this attempt")
    if record.status in (OOM, UNSUPPORTED):
        decision = supervisor.decide_after(profile, record.status, record.report)
        for line in decision.skipped:
            console.print(f"  {line}")
        console.print(f"resumed after attempt {record.attempt} ({record.status}): {decision.text}", markup=False)
        if decision.action == "stop":
            return EXIT_OUT_OF_MEMORY
        return supervisor.run(decision.profile, decision.changes or None, decision.text)
    if finished is not None:
        said = f"trained on from step {finished.steps} to max_steps {profile.max_steps}"
        console.print(f"{last_dir.name} finished at step {finished.steps}: {said}", markup=False)
        return supervisor.run(profile, None, f"resumed after attempt {finished.attempt} (ok): {said}")
    return supervisor.run(profile, None, f"resumed after attempt {record.attempt} ({record.status})")


def _trains_on(record: AttemptRecord, profile: Profile, overrides: list[str]) -> bool:
    """Whether the --set asks a finished attempt for more steps than it trained: a max_steps above them, set now."""
    return "max_steps" in set_keys(overrides) and profile.max_steps > record.steps


def _check_named_profile(name: str, run_dir: Path, attempt_dirs: list[Path]) -> None:
    """The profile named beside --resume must be one this run planned or trained: the run goes on with its own
    profiles (as run, after any shrink), so another name would be silently not what runs."""
    trained = {load_profile(d / PROFILE_FILE).name for d in attempt_dirs}
    try:
        plan = json.loads((run_dir / PLAN_FILE).read_text(encoding="utf-8"))
        planned = {c.get("profile") for c in plan.get("candidates", []) if isinstance(c, dict)}
    except (OSError, ValueError, AttributeError):
        planned = set()
    if name in trained | planned:
        return
    raise UsageError(
        f"--resume continues {run_dir}, which trained {', '.join(repr(n) for n in sorted(trained))}, and --profile "
        f"names {name!r}, another profile (fix: `train --resume` alone, or with the run's own --profile; "
        "`train --profile FILE` without --resume for a new run)"
    )


def _check_shape(supervisor: Supervisor, as_run: Profile, profile: Profile, fresh: bool) -> None:
    """--set that changes the model or LoRA shape cannot continue the run's checkpoint: refuse, saying what
    differs and how to start over, unless --fresh-attempt asks for exactly that (then say so, loudly)."""
    checkpoint = supervisor.resume_point(as_run)
    if fresh:
        supervisor.resume_floor = len(supervisor.attempt_shapes)
        dropped = (
            f"{supervisor.in_run(checkpoint)} (step {checkpoint_step(checkpoint)}) is kept but not used"
            if checkpoint
            else "no checkpoint is used"
        )
        supervisor.console.print(
            f"[bold red]--fresh-attempt: starting over at step 1[/bold red] with "
            f"{escape(profile.name)}; {escape(dropped)}"
        )
        return
    if checkpoint is None:
        return
    step = checkpoint_step(checkpoint)
    builds = tiny_build(as_run), tiny_build(profile)
    if None not in builds and builds[0] != builds[1]:  # another model altogether: the shape check says so
        old_keys, new_keys = _tool_keys(as_run), _tool_keys(profile)
        raise UsageError(
            f"--resume: {old_keys} -> {new_keys} changes the base model ({as_run.model!r} trained "
            f"{_build_name(tiny_build(as_run))} and would load {_build_name(tiny_build(profile))}), so "
            f"{supervisor.in_run(checkpoint)} (step {step}) of {supervisor.run_dir} would continue on other weights "
            f"(fix: drop that --set to continue from step {step}, or add --fresh-attempt to start this run over "
            "on the other build, or start a new run with `python train.py train`)"
        )
    if shape_of(as_run) == shape_of(profile):
        return
    old, new = as_run.to_dict(), profile.to_dict()
    differs = ", ".join(
        f"{key} {old.get(key)!r} -> {new.get(key)!r}" for key in SHAPE_KEYS if old.get(key) != new.get(key)
    )
    raise UsageError(
        f"--resume: {differs} changes the model/LoRA shape, so {supervisor.in_run(checkpoint)} "
        f"(step {step}) of {supervisor.run_dir} cannot be loaded; resuming would silently start "
        f"over at step 1 (fix: drop that --set to continue from step {step}, or add --fresh-attempt "
        "to start this run over with the new shape, or start a new run with `python train.py train`)"
    )


# The offline model's names (tiny_model.source.TINY, TINY_LONG): the planner imports no tiny_model
_TINY_MODELS = ("tiny", "tiny-long")


def tiny_build(profile: Profile) -> str | None:
    """Which build of the offline model a profile trains: "tools" (the tool-calling build, chosen when the
    profile offers tools or an environment: tiny_model.source.uses_tools) or "plain"; None for any other
    model. A checkpoint trained on one build continues on it only."""
    if profile.model not in _TINY_MODELS:
        return None
    return "tools" if (profile.tools or profile.environment) else "plain"


def _build_name(build: str | None) -> str:
    return "its tool-calling build" if build == "tools" else "its plain build"


def _tool_keys(profile: Profile) -> str:
    keys = [f"tools={list(profile.tools)!r}"]
    if profile.environment:
        keys.append(f"environment={profile.environment!r}")
    return ", ".join(keys)
