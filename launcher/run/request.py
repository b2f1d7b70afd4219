"""WHAT `train` asks of a run: where its folder goes, whether it continues one, and what the user changed, as one
object the run's start (launcher.run.supervise), its loop (launcher.run.supervisor) and `--resume`
(launcher.run.resume) read."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from contract.errors import UsageError


@dataclass(frozen=True)
class RunRequest:
    """One `train` command line, as the run reads it.

    `resume_dir`: the run `--resume RUN` names (None with plain --resume: the latest under `output_dir`);
    `fresh_attempt`: start the resumed run's next attempt over at step 1; `named_profile`: the profile
    `--profile FILE` names (None: the ladder); beside --resume (a job script's resubmission) it must be one the
    run trained; `hours` (--hours): the run's wall-clock budget from now; `pinned`: keys never re-planned
    besides those --set (a --profile file's written keys)."""

    output_dir: Path
    overrides: tuple[str, ...] = ()
    resume: bool = False
    resume_dir: Path | None = None
    fresh_attempt: bool = False
    named_profile: str | None = None
    hours: float | None = None
    pinned: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        check_fresh_attempt(self.fresh_attempt, self.resume)
        # the child runs from the same folder, but paths are printed: absolute from here on
        object.__setattr__(self, "output_dir", Path(self.output_dir).absolute())
        object.__setattr__(self, "overrides", tuple(self.overrides or ()))
        object.__setattr__(self, "pinned", frozenset(self.pinned))
        if self.resume_dir is not None:
            object.__setattr__(self, "resume_dir", Path(self.resume_dir).absolute())

    @property
    def machine_command(self) -> dict:
        """What this command line asks, as the machines of one job compare it (launcher.run.follow)."""
        return machine_command(self.overrides, self.named_profile)


def machine_command(overrides, named_profile: str | None = None) -> dict:
    """The one profile a command line names (None: the ladder) and its --set, in order."""
    return {"profile": named_profile, "overrides": list(overrides or [])}


def check_fresh_attempt(fresh_attempt: bool, resume) -> None:
    """--fresh-attempt starts a resumed run's next attempt over: refused without --resume."""
    if fresh_attempt and not resume:
        raise UsageError("--fresh-attempt only applies to --resume (a new run starts at step 1 anyway)")
