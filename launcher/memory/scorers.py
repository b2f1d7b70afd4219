"""WHICH models a profile's rewards name (`model:NAME`, rewards.model): each resolved as the planner reads any
model (a folder's config.json, the catalogue, the Hugging Face cache; never the network), or why its size is not
known here. The estimate counts their memory and the step-time model their forward."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from profiles.catalog import Architecture, resolve


@dataclass(frozen=True)
class Scorer:
    name: str  # the model as the reward names it
    arch: Architecture | None  # None: its size is not known here
    problem: str | None = None  # why, with the fix


def scorers(profile) -> list[Scorer]:
    from rewards.model import MODEL_PREFIX

    names = [str(entry)[len(MODEL_PREFIX) :] for entry in profile.rewards if str(entry).startswith(MODEL_PREFIX)]
    return [_scorer(name) for name in names]


@lru_cache(maxsize=64)
def _scorer(name: str) -> Scorer:
    """One reward model, resolved once per process: the solver asks for it with every candidate it judges."""
    try:
        return Scorer(name, resolve(name, allow_hub=False))
    except Exception as exc:  # noqa: BLE001 - any reason the size is not known here is the answer
        return Scorer(
            name,
            None,
            f"reward model {name}: its size is not known here ({str(exc).split(';')[0][:200]}); fix: give "
            "a folder holding its config.json, or download it to the Hugging Face cache first",
        )
