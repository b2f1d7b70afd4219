"""WHERE the weights come from: a profile's `model` (a hub id, a local folder, or `tiny`) as a path that the
load stage hands to from_pretrained, and how the model was built when the project built it.

The offline `tiny` model (tiny_model: built and warm-started on first use, then cached) is reached only here,
so that loading, evaluation, the report and `--sample` read the same for every kind of model.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from contract.attempt import ENV_RANDOM_WEIGHTS

TINY = "tiny"


def random_weights_requested(environ=None) -> bool:
    """Whether this attempt runs on random weights (the supervisor sets ENV_RANDOM_WEIGHTS)."""
    return (os.environ if environ is None else environ).get(ENV_RANDOM_WEIGHTS, "") not in ("", "0")


@dataclass(frozen=True)
class ModelSource:
    path: str                  # what from_pretrained loads
    built: dict | None = None  # the project's own build record (the tiny model's warm start), else None


def resolve_model(profile) -> ModelSource:
    """The profile's model as something to load; builds the tiny model on first use (seeded, cached). With
    random weights asked for (--calibrate --random-weights), the model's architecture from the catalogue's
    facts with random weights instead, built offline (tiny_model.random_weights)."""
    if random_weights_requested():
        from tiny_model import random_weights

        folder = random_weights.ensure_random_model(profile.model, dataset=profile.dataset, seed=profile.seed,
                                                    max_positions=max(profile.max_seq_length, 2048))
        return ModelSource(str(folder))  # the probe's figures carry the mark (trainer.probe)
    if profile.model != TINY:
        return ModelSource(profile.model)
    from tiny_model.build import build_record, ensure_tiny

    folder = ensure_tiny(profile.dataset, seed=profile.seed)
    return ModelSource(str(folder), build_record(folder))
