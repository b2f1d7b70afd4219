"""The profile schema as text: every key with its type, default and range for `--help`, and the JSON Schema
that editors read (`python -m profiles.help > profiles/schema.json`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import UnionType
from typing import Annotated, Literal, Union, get_args, get_origin

import annotated_types

from profiles.fields import extra_of
from profiles.keys import shown
from profiles.schema import KEYS, Profile, choices_of

# ---------------------------------------------------------------------------------------------------
# The schema as text: `--help` and profiles/schema.json

_LIMIT_SIGNS = (
    (annotated_types.Ge, "ge", ">="),
    (annotated_types.Gt, "gt", ">"),
    (annotated_types.Le, "le", "<="),
    (annotated_types.Lt, "lt", "<"),
)


def _kind(key: str) -> str:
    annotation = Profile.model_fields[key].annotation
    if get_origin(annotation) in (Union, UnionType):
        kinds = [a for a in get_args(annotation) if a is not type(None)]
        named = [getattr(get_args(a)[0] if get_origin(a) is Annotated else a, "__name__", "value") for a in kinds]
        return " or ".join(named) + (" or empty" if len(kinds) < len(get_args(annotation)) else "")
    if get_origin(annotation) is Literal:
        return "str"
    if get_origin(annotation) is list:
        return "list[str]"
    if get_origin(annotation) is dict:
        value = get_args(annotation)[1] if get_args(annotation) else None
        return "dict[str,float]" if value is float else "dict[str,value]"
    return getattr(annotation, "__name__", "value")


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
        if extra_of(info)["section"] != section:
            section = extra_of(info)["section"]
            lines.append(f"  [{section}]")
        default = info.get_default(call_default_factory=True)
        if isinstance(default, dict):
            default = ",".join(f"{k}:{v}" for k, v in default.items())
        elif isinstance(default, list):
            default = ",".join(default)
        elif default == "":
            default = "(none)"
        elif default is None:
            default = "(empty)"
        elif isinstance(default, str) and (len(default) > 40 or "\n" in default):
            default = shown(default.replace("\n", " "))
        limits = _range_text(key)
        lines.append(
            f"    {key} ({_kind(key)}, default {default!s}{'; ' + limits if limits else ''}): {info.description}"
        )
    return "\n".join(lines)


def keys_markdown() -> str:
    """docs/profile-keys.md: every key by section, with type, default, range, tags and meaning (a test keeps
    the file equal to this)."""
    lines = [
        "# Profile keys",
        "",
        "Every key a profile YAML (or `--set KEY=VALUE`) may hold, generated from the schema by",
        "`python train.py profiles keys --markdown > docs/profile-keys.md`. Tags: `memory` keys change how",
        "much memory a step needs (the ledger's fingerprint), `lever` keys are what the fit solver and the",
        "OOM shrink may move, `shape` keys decide whether a checkpoint loads into another attempt.",
    ]
    section = None
    for key in KEYS:
        info = Profile.model_fields[key]
        extra = extra_of(info)
        if extra["section"] != section:
            section = extra["section"]
            lines += [
                "",
                f"## {section}",
                "",
                "| key | type | default | range | tags | meaning |",
                "| --- | --- | --- | --- | --- | --- |",
            ]
        default = info.get_default(call_default_factory=True)
        if isinstance(default, dict):
            default = ", ".join(f"{k}: {v}" for k, v in default.items())
        elif isinstance(default, list):
            default = ", ".join(default)
        elif isinstance(default, str) and (len(default) > 40 or "\n" in default):
            default = shown(default.replace("\n", " "))
        cell = str(default).replace("|", "\\|") if default not in ("", None) else "(none)"
        lines.append(
            f"| `{key}` | {_kind(key)} | {cell} | {_range_text(key).replace('|', '/')} | "
            f"{', '.join(extra.get('tags', ()))} | {(info.description or '').replace('|', '/')} |"
        )
    return "\n".join(lines) + "\n"


def schema_json() -> str:
    """The JSON Schema of a profile YAML, for editors (`# yaml-language-server: $schema=schema.json`); a key the
    plan may derive also takes `auto`."""
    from profiles.schema import AUTO, DERIVED_KEYS

    schema = Profile.model_json_schema()
    auto = {"type": "string", "enum": [AUTO]}
    for key in DERIVED_KEYS:
        spec = schema["properties"][key]
        forms = spec.get("anyOf")
        if forms is None:
            kept = {k: v for k, v in spec.items() if k in ("description", "default", "title", "section", "tags")}
            form = {k: v for k, v in spec.items() if k not in kept}
            spec.clear()
            spec.update({"anyOf": [form, auto], **kept})
        elif auto not in forms:
            forms.append(auto)
    return json.dumps(schema, indent=2) + "\n"


SCHEMA_PATH = Path(__file__).resolve().parent / "schema.json"

if __name__ == "__main__":
    sys.stdout.write(schema_json())
