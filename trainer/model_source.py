"""WHERE the weights come from: a profile's `model` (a hub id, a local folder, or `tiny`) as a path that the
load stage hands to from_pretrained, and how the model was built when the project built it.

The offline `tiny` model (tiny_model: built and warm-started on first use, then cached) is reached only here,
so that loading, evaluation, the report and `--sample` read the same for every kind of model.
"""

from __future__ import annotations

from dataclasses import dataclass

TINY = "tiny"


@dataclass(frozen=True)
class ModelSource:
    path: str                  # what from_pretrained loads
    built: dict | None = None  # the project's own build record (the tiny model's warm start), else None


def resolve_model(profile) -> ModelSource:
    """The profile's model as something to load; builds the tiny model on first use (seeded, cached)."""
    if profile.model != TINY:
        return ModelSource(profile.model)
    from tiny_model.build import build_record, ensure_tiny

    folder = ensure_tiny(profile.dataset, seed=profile.seed)
    return ModelSource(str(folder), build_record(folder))
