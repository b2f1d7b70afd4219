"""WHAT a recipe's keys say together, read after each key on its own (profiles.aliases): the run's length from
epochs and steps, where push_to_hub pushes, the sequence TRL does not name, and the note of a key another one
decides."""

from __future__ import annotations

from typing import Any

from contract.errors import ProfileError
from profiles.keys import shown
from profiles.recipe_reading import RENAMED, Reading


def unsaid(key: str, ours: str) -> str:
    """The note of a TRL key whose value leaves the project's key to another key or its default."""
    if key == "do_eval":
        return "eval_strategy says it (transformers sets do_eval from eval_strategy)"
    if key == "save_steps":
        default = _default_of("save_steps")
        return f"a share of the run, whose length the plan sets: checkpoints every {default} steps (save_steps: N)"
    return f"{ours} says it (or its default)"


def _default_of(key: str) -> Any:
    from profiles.schema import Profile

    return Profile.model_fields[key].get_default(call_default_factory=True)


def derive_sequence(data: dict, out: dict, readings: list[Reading]) -> None:
    """TRL has no max_seq_length: a sequence is its prompt and completion. A recipe in TRL's names that leaves it
    out gets their sum, so that the project's default never cuts what the recipe asks for."""
    if not readings or "max_seq_length" in out:
        return
    prompt = out.get("max_prompt_length", _default_of("max_prompt_length"))
    completion = out.get("max_completion_length", _default_of("max_completion_length"))
    if not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in (prompt, completion)):
        return  # auto, or a value the schema refuses with its own message
    if prompt + completion <= _default_of("max_seq_length"):
        return
    out["max_seq_length"] = prompt + completion
    readings.append(
        Reading(
            "max_seq_length",
            RENAMED,
            "max_seq_length",
            prompt + completion,
            "not in TRL: max_prompt_length + max_completion_length",
        )
    )


def read_epochs(data: dict, source: str, context: dict, out: dict, readings: list[Reading]) -> None:
    """A --set of num_train_epochs alone, on a file that pins max_steps: max_steps wins (TRL's order), so the
    --set would change nothing, silently. Refused, naming what to set with it."""
    if source != "--set" or "num_train_epochs" not in data or "max_steps" in data:
        return
    pinned = context.get("max_steps")
    if pinned in (None, 0, "auto", -1):
        return
    raise ProfileError(
        source,
        "num_train_epochs",
        f"{shown(data['num_train_epochs'])}: the file pins max_steps {shown(pinned)}, which wins over epochs (as in "
        "TRL), so this --set would change nothing",
        "add --set max_steps=auto, so the epochs set the run's length",
    )


def read_push(data: dict, source: str, context: dict, out: dict, readings: list[Reading]) -> None:
    """push_to_hub: false is the user's "do not publish" and wins over hub_model_id; true pushes to hub_model_id,
    or, as TRL does without one, to a repository named after the output folder."""
    if "push_to_hub" not in data:
        return
    push = data["push_to_hub"]
    repo = data.get("hub_model_id", context.get("hub_model_id")) or ""
    reading = next(r for r in readings if r.key == "push_to_hub")
    if push is False:
        out["hub_model_id"] = ""
        reading.note = "false: nothing is pushed" + (f" (hub_model_id {repo} is not used)" if repo else "")
    elif push is True:
        how = ""
        if not repo:
            folder = str(data.get("output_dir", context.get("output_dir")) or "trainer_output")
            repo = out["hub_model_id"] = folder.rstrip("/").rpartition("/")[2]
            how = " (named after output_dir, as TRL names it)"
        if "/" not in repo:
            how += " in the account of HF_TOKEN"
        reading.note = f"true: the adapter is pushed to {repo}{how} at the end when HF_TOKEN is set"
    elif push is not None:
        raise ProfileError(source, "push_to_hub", f"expected true or false, got {shown(push)}", "write true or false")
