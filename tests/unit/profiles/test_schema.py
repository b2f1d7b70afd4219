"""profiles.help: profiles/schema.json is current, every shipped YAML points editors at it, --help lists each key."""

import json
import sys
from pathlib import Path

import yaml

from profiles.help import SCHEMA_PATH, schema_help, schema_json
from profiles.schema import KEYS, Profile
from support.waiting import run_to_end

REPO = Path(__file__).resolve().parents[3]
SCHEMA_LINE = "# yaml-language-server: $schema=schema.json"


def test_committed_schema_is_current():
    assert SCHEMA_PATH == REPO / "profiles" / "schema.json"
    assert SCHEMA_PATH.read_text() == schema_json(), (
        "profiles/schema.json is stale: run `python -m profiles.help > profiles/schema.json`"
    )


def test_schema_module_prints_the_schema():
    result = run_to_end([sys.executable, "-m", "profiles.help"], cwd=REPO, check=True)
    assert result.stdout == schema_json()


def test_schema_lists_every_key_and_no_other():
    schema = json.loads(schema_json())
    assert list(schema["properties"]) == list(KEYS)
    assert schema["additionalProperties"] is False
    assert "source" not in schema["properties"]
    assert schema["properties"]["seed"]["maximum"] == 2**32 - 1
    assert "wandb" in schema["properties"]["report_to"]["enum"]


def test_every_shipped_profile_points_at_the_schema():
    for path in sorted((REPO / "profiles").glob("*.yaml")):
        assert path.read_text().splitlines()[0] == SCHEMA_LINE, path.name


def test_shipped_profiles_use_only_schema_keys_with_schema_types():
    # a small check of the JSON Schema itself (no validator library): key names, enums, number types
    props = json.loads(schema_json())["properties"]
    types = {"integer": int, "number": (int, float), "boolean": bool, "string": str, "array": list, "object": dict}
    for path in sorted((REPO / "profiles").glob("*.yaml")):
        for key, value in yaml.safe_load(path.read_text()).items():
            specs = props[key].get("anyOf", [props[key]])  # a key that takes more than one form lists each
            if value == "auto":  # the plan derives it: the schema says which keys may be
                assert {"type": "string", "enum": ["auto"]} in specs, (path.name, key)
                continue
            if isinstance(value, str) and any(spec.get("type") == "number" for spec in specs):
                float(value)  # YAML 1.1 text such as 5e-6; editors read YAML 1.2, where it is a number
                continue
            assert any(
                isinstance(value, types[spec["type"]]) and value in spec.get("enum", [value]) for spec in specs
            ), (path.name, key)


def test_help_is_generated_from_the_schema():
    text = schema_help()
    for key in KEYS:
        assert f"    {key} (" in text
    assert "lora_rank (int, default 16; >= 0; <= 512): LoRA rank" in text
    assert "seed (int, default 3407; >= 0; <= 4294967295)" in text
    assert "optim (str, default adamw_8bit; one of adamw_torch," in text
    assert Profile.model_fields["lora_rank"].description in text


def test_profile_built_directly_keeps_the_old_defaults():
    """Profile(**keys) as other modules and tests build it: the empty name means 'the file's stem'."""
    assert Profile(name="") == Profile()
    assert Profile(lora_rank=32).to_dict()["lora_rank"] == 32
    assert Profile(source="x.yaml").source == "x.yaml" and "source" not in Profile(source="x.yaml").to_dict()
