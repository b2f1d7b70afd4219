"""WHICH models a profile's rewards name (`model:NAME`, rewards.model): each resolved as the planner reads any
model (a folder's config.json, the catalogue, the Hugging Face cache; never the network), or why its size is not
known here. The estimate counts their memory and the step-time model their forward."""

from __future__ import annotations

from dataclasses import dataclass

from profiles.catalog import Architecture, resolve


@dataclass(frozen=True)
class Scorer:
    name: str  # the model as the reward names it
    arch: Architecture | None  # None: its size is not known here
    problem: str | None = None  # why, with the fix


def scorers(profile) -> list[Scorer]:
    from rewards.model import MODEL_PREFIX

    out = []
    for entry in profile.rewards:
        if not str(entry).startswith(MODEL_PREFIX):
            continue
        name = str(entry)[len(MODEL_PREFIX) :]
        try:
            out.append(Scorer(name, resolve(name, allow_hub=False)))
        except Exception as exc:  # noqa: BLE001 - any reason the size is not known here is the answer
            out.append(
                Scorer(
                    name,
                    None,
                    f"reward model {name}: its size is not known here ({str(exc).split(';')[0][:200]}); fix: give "
                    "a folder holding its config.json, or download it to the Hugging Face cache first",
                )
            )
    return out
