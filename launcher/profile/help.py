"""The profile schema as text: every key with its type, default and range for `--help`, and the JSON Schema
that editors read (`python -m launcher.profile.help > profiles/schema.json`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Literal, get_origin

import annotated_types

from launcher.profile.schema import KEYS, Profile, choices_of
from launcher.profile.keys import shown

# ---------------------------------------------------------------------------------------------------
# The schema as text: `--help` and profiles/schema.json

_LIMIT_SIGNS = ((annotated_types.Ge, "ge", ">="), (annotated_types.Gt, "gt", ">"), (annotated_types.Le, "le", "<="),
                (annotated_types.Lt, "lt", "<"))


def _kind(key: str) -> str:
    annotation = Profile.model_fields[key].annotation
    if get_origin(annotation) is Literal:
        return "str"
    if get_origin(annotation) is list:
        return "list[str]"
    if get_origin(annotation) is dict:
        return "dict[str,float]"
    return annotation.__name__


def _range_text(key: str) -> str:
    parts = []
    if choices_of(key):
        parts.append("one of " + ", ".join(map(str, choices_of(key))))
    for limit in Profile.model_fields[key].metadata:
        for kind, attr, sign in _LIMIT_SIGNS:
            if isinstance(limit, kind):
                parts.append(f"{sign} {getattr(limit, attr)}")
    return "; ".join(parts)


def schema_help() -> str:
    """Every profile key with its type, default and range, grouped by section: the `--set` help text."""
    lines: list[str] = []
    section = None
    for key in KEYS:
        info = Profile.model_fields[key]
        if info.json_schema_extra["section"] != section:
            section = info.json_schema_extra["section"]
            lines.append(f"  [{section}]")
        default = info.get_default(call_default_factory=True)
        if isinstance(default, dict):
            default = ",".join(f"{k}:{v}" for k, v in default.items())
        elif isinstance(default, list):
            default = ",".join(default)
        elif default == "":
            default = "(none)"
        elif isinstance(default, str) and (len(default) > 40 or "\n" in default):
            default = shown(default.replace("\n", " "))
        limits = _range_text(key)
        lines.append(f"    {key} ({_kind(key)}, default {default!s}{'; ' + limits if limits else ''}): "
                     f"{info.description}")
    return "\n".join(lines)


def schema_json() -> str:
    """The JSON Schema of a profile YAML, for editors (`# yaml-language-server: $schema=schema.json`)."""
    return json.dumps(Profile.model_json_schema(), indent=2) + "\n"


SCHEMA_PATH = Path(__file__).resolve().parents[2] / "profiles" / "schema.json"

if __name__ == "__main__":
    sys.stdout.write(schema_json())
