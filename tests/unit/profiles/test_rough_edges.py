"""Profile keys that used to mean something other than what they say: an empty `max_steps:` silently 250,
`save_merged` on a CPU profile silently nothing, and a schema.json that marked `gradient_checkpointing: true`
wrong and a comma-separated `target_modules` right the other way round."""

from __future__ import annotations

import json

import pytest

from contract.errors import ProfileError
from profiles.help import schema_json
from profiles.load import load_profile, profile_from_dict


def write(tmp_path, text):
    path = tmp_path / "p.yaml"
    path.write_text("dataset: arithmetic\n" + text)
    return path


@pytest.mark.parametrize(
    "line, key, fix",
    [
        ("max_steps:\n", "max_steps", "remove the line to keep the default (0)"),
        ("learning_rate: null\n", "learning_rate", "give a value"),
        ("system_prompt:\n", "system_prompt", 'write system_prompt: "" for no system turn'),
    ],
)
def test_an_empty_value_in_a_file_is_refused(tmp_path, line, key, fix):
    with pytest.raises(ProfileError) as info:
        load_profile(write(tmp_path, line))
    assert info.value.key == key and "empty value" in str(info.value) and fix in str(info.value)


def test_an_empty_text_key_whose_default_is_empty_means_none(tmp_path):
    assert load_profile(write(tmp_path, "hub_model_id:\nanswer_pattern:\n")).hub_model_id == ""


def test_save_merged_on_a_cpu_profile_is_refused():
    with pytest.raises(ProfileError) as info:
        profile_from_dict(
            {
                "dataset": "arithmetic",
                "device": "cpu",
                "fast_inference": False,
                "load_in_4bit": False,
                "optim": "adamw_torch",
                "save_merged": True,
            },
            "<test>",
        )
    assert info.value.key == "save_merged" and "set save_merged: false" in str(info.value)


def _accepts(spec: dict, value) -> bool:
    """A small JSON Schema check of the forms a key takes (type, enum), as an editor would."""
    types = {"boolean": bool, "string": str, "array": list}
    for form in spec.get("anyOf", [spec]):
        if isinstance(value, types[form["type"]]) and value in form.get("enum", [value]):
            return True
    return False


@pytest.mark.parametrize(
    "key, value",
    [
        ("gradient_checkpointing", True),
        ("gradient_checkpointing", False),
        ("gradient_checkpointing", "unsloth"),
        ("target_modules", "q_proj, v_proj"),
        ("target_modules", ["q_proj"]),
    ],
)
def test_schema_json_accepts_what_the_loader_accepts(key, value):
    props = json.loads(schema_json())["properties"]
    profile_from_dict({"dataset": "arithmetic", key: value}, "<test>")
    assert _accepts(props[key], value), props[key]


def test_schema_json_refuses_what_the_loader_refuses():
    props = json.loads(schema_json())["properties"]
    with pytest.raises(ProfileError):
        profile_from_dict({"dataset": "arithmetic", "gradient_checkpointing": "sometimes"}, "<test>")
    assert not _accepts(props["gradient_checkpointing"], "sometimes")
