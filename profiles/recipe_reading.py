"""WHAT reading a TRL or open-r1 recipe gave: how each key was read (Reading: renamed to the project's key,
or noted and not used), and every key that could not be, each with its fix (RecipeProblems), so that a recipe
is fixed in one pass."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from contract.errors import ProfileError
from profiles.keys import shown

RENAMED, DECIDED, REFUSED = "renamed", "decided", "refused"


@dataclass
class Reading:
    """How one key of a file was read: as the project's key (renamed), or noted and not used (decided)."""

    key: str
    kind: str
    ours: str | None
    value: Any
    note: str

    def to_json(self) -> dict:
        return {"key": self.key, "kind": self.kind, "as": self.ours, "value": self.value, "note": self.note}

    def text(self) -> str:
        if self.kind == RENAMED:
            return f"{self.key} -> {self.ours}: {shown(self.value)}" + (f" ({self.note})" if self.note else "")
        return f"{self.key}: not used ({self.note})"


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


__all__ = ["DECIDED", "REFUSED", "RENAMED", "Reading", "RecipeProblems", "problems_of"]
