"""WHERE the weights come from: a profile's `model` (a hub id, a local folder, or `tiny`) as a path that the
attempt's load stage hands to from_pretrained, and how the model was built when the project built it.

The commands that load a model (the per-attempt command, `sample`, `export`) resolve it here and hand the
trainer a path, so the trainer never knows the offline model and loading, evaluation and the report read the
same for every kind of model.
"""

from __future__ import annotations

from dataclasses import dataclass

from contract.attempt import random_weights_requested

TINY = "tiny"
TINY_LONG = "tiny-long"  # the tiny model warm-started to write long answers (the length probe's re-plan on a CPU)


@dataclass(frozen=True)
class ModelSource:
    path: str  # what from_pretrained loads
    built: dict | None = None  # the project's own build record (the tiny model's warm start), else None


def resolve_model(profile) -> ModelSource:
    """The profile's model as something to load; builds the tiny model on first use (seeded, cached). With
    random weights asked for (`calibrate --random-weights`), the model's architecture from the catalogue's
    facts with random weights instead, built offline (tiny_model.random_weights)."""
    if random_weights_requested():
        from tiny_model import random_weights

        folder = random_weights.ensure_random_model(
            profile.model, dataset=profile.dataset, seed=profile.seed, max_positions=max(profile.max_seq_length, 2048)
        )
        return ModelSource(str(folder))  # the probe's figures carry the mark (trainer.probe)
    if profile.model not in (TINY, TINY_LONG):
        return ModelSource(profile.model)
    from tiny_model.build import build_record, ensure_tiny

    if uses_tools(profile):
        return _tool_calling_tiny(profile)
    folder = ensure_tiny(profile.dataset, seed=profile.seed, long_answers=profile.model == TINY_LONG)
    return ModelSource(str(folder), build_record(folder))


def uses_tools(profile) -> bool:
    """Whether the profile offers the model tools (its own, or an environment's)."""
    return bool(getattr(profile, "tools", None) or getattr(profile, "environment", ""))


def _tool_calling_tiny(profile) -> ModelSource:
    """The tiny model with the tool-call markup and its tool-using warm start (tiny_model.tool_variant)."""
    from tiny_model.build import build_record
    from tiny_model.tool_variant import build_record as tool_record
    from tiny_model.tool_variant import ensure_tiny_tools

    folder = ensure_tiny_tools(profile.dataset, seed=profile.seed)
    record = build_record(folder)
    tools = tool_record(folder)
    if record is not None and tools is not None:
        record = {**record, "tools": tools}
    return ModelSource(str(folder), record)


def base_model_path(profile, adapter_dir) -> str:
    """The base a saved adapter was trained on: the folder its config names when it is still there (the tiny
    model's cache), else the profile's model (the tiny model is rebuilt from the same data and seed)."""
    import json
    from pathlib import Path

    try:
        named = json.loads((Path(adapter_dir) / "adapter_config.json").read_text(encoding="utf-8"))
        base = named.get("base_model_name_or_path")
    except (OSError, ValueError, AttributeError):
        base = None
    if isinstance(base, str) and base and Path(base).is_dir():
        return base
    if profile.model in (TINY, TINY_LONG):
        from tasks import load_task

        load_task(profile, "train", limit=1)  # the tiny tokenizer reads the data with the profile's columns
    return resolve_model(profile).path
