"""WHAT the user's own data is: the profile's data keys (DataSpec), the kind of source its `dataset` names (a
local file, a folder of files, a hub id), and the columns a question and an answer are looked for in by default.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from contract.errors import UsageError

SUFFIX_BUILDERS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}
QUESTION_FIELDS = ("question", "prompt", "problem")
# the gold, in the order looked for; open-r1's code data holds test cases (verification_info) in its place
ANSWER_FIELDS = ("answer", "solution", "label", "verification_info")
TESTS_FIELD = "verification_info"
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass
class DataSpec:
    """The profile's data keys (defaults when a profile does not set them)."""

    dataset: str
    dataset_config: str | None = None
    train_split: str = "train"
    test_split: str = "test"
    question_field: str | None = None
    answer_field: str | None = None
    answer_pattern: str | None = None
    system_prompt: str | None = None
    conversation: bool = False  # prompts must be conversations: tools and environments answer in turns

    @classmethod
    def of(cls, profile) -> DataSpec:
        keys = [f for f in cls.__dataclass_fields__ if f not in ("dataset", "conversation")]
        values = {k: getattr(profile, k) for k in keys if getattr(profile, k, None) not in (None, "")}
        if getattr(profile, "system_prompt", None) == "":
            values["system_prompt"] = ""
        talks = bool(getattr(profile, "tools", None) or getattr(profile, "environment", None))
        return cls(dataset=str(profile.dataset), conversation=talks, **values)


def source_kind(dataset: str) -> str:
    """ "file", "folder" or "hub" for a dataset that is not a registered task name; UsageError otherwise."""
    path = Path(dataset).expanduser()
    if path.is_dir():
        return "folder"
    if path.exists():
        if not path.is_file():
            raise UsageError(f"dataset {dataset}: not a regular file")
        if path.suffix.lower() not in SUFFIX_BUILDERS:
            raise UsageError(
                f"dataset {dataset}: unknown file type '{path.suffix}' (fix: give a "
                f"{', '.join(SUFFIX_BUILDERS)} file, a folder of them, or a hub id org/name)"
            )
        return "file"
    if _HUB_ID.match(dataset) and not dataset.endswith(tuple(SUFFIX_BUILDERS)):
        return "hub"
    raise UsageError(
        f"dataset {dataset!r}: no such file or folder, and not a hub id of the form org/name "
        "(fix: check the path, or give gsm8k, arithmetic or programs)"
    )
