"""WHAT reading a TRL or open-r1 recipe gave: how each key was read (Reading: renamed to the project's key,
or noted and not used), and every key that could not be, each with its fix (RecipeProblems), so that a recipe
is fixed in one pass."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from contract.errors import ProfileError

RENAMED, DECIDED, REFUSED = "renamed", "decided", "refused"
# A key a recipe leaves out: read as TRL's default (TRL_DEFAULT), or the project's own value, which differs from
# TRL's (DIFFERS); profiles.trl_defaults says which
TRL_DEFAULT, DIFFERS = "trl-default", "differs"
WRITTEN_KINDS = (RENAMED, DECIDED)  # the kinds of a key the file writes


@dataclass
class Reading:
    """How one key of a file was read: as the project's key (renamed), or noted and not used (decided); or
    how one it leaves out was: as TRL's default `trl` (trl-default), or the project's value (differs)."""

    key: str
    kind: str
    ours: str | None
    value: Any
    note: str
    trl: Any = None

    def to_json(self) -> dict:
        out = {"key": self.key, "kind": self.kind, "as": self.ours, "value": self.value, "note": self.note}
        if self.kind in (TRL_DEFAULT, DIFFERS):
            out["trl"] = self.trl
        return out


class RecipeProblems(ProfileError):
    """Every key of one file that cannot be read as written, each with its fix: one ProfileError whose text
    lists them all (a single problem reads as a plain ProfileError). `partial`: the keys that did read."""

    def __init__(self, source: str, problems: list[ProfileError]):
        self.problems = problems
        self.partial: dict = {}
        if len(problems) == 1:
            only = problems[0]
            super().__init__(source, only.key, only.reason, only.fix)
            return
        lines = [f"{len(problems)} problems, all of them at once:"]
        for problem in problems:
            where = f"key '{problem.key}': " if problem.key else ""
            lines.append(f"  - {where}{problem.reason}" + (f" (fix: {problem.fix})" if problem.fix else ""))
        super().__init__(source, None, "\n".join(lines))


def problems_of(error: ProfileError) -> list[ProfileError]:
    """The problems one error reports: each of a RecipeProblems, else the error itself."""
    return list(getattr(error, "problems", None) or [error])


__all__ = [
    "DECIDED",
    "DIFFERS",
    "REFUSED",
    "RENAMED",
    "TRL_DEFAULT",
    "WRITTEN_KINDS",
    "Reading",
    "RecipeProblems",
    "problems_of",
]
