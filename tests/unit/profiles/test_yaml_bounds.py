"""A small profile that expands to something huge (YAML aliases, the "billion laughs"), nests thousands deep, or
refers to itself is refused from the parser's events before a value is built, naming the file and the fix;
an error message never builds the whole repr of a huge value."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from contract.errors import ProfileError
from profiles import load as profile_load
from profiles.keys import shown
from profiles.load import MAX_YAML_DEPTH, load_profile, parse_overrides
from support.cli import train_py

REPO = Path(__file__).resolve().parents[3]


def laughs(levels: int = 9, key: str = "target_modules") -> str:
    """`levels` anchors, each a list of nine aliases of the one before: 9**levels values from a few hundred bytes."""
    parts = ['&a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for level in range(1, levels):
        before, now = chr(ord("a") + level - 1), chr(ord("a") + level)
        parts.append(f"&{now} [" + ", ".join([f"*{before}"] * 9) + "]")
    return f"name: laughs\n{key}: [" + ", ".join(parts) + "]\n"


@pytest.fixture
def no_construction(monkeypatch):
    """Fails the test if a refused document is built into Python values at all."""

    def refuse(*args, **kwargs):
        raise AssertionError("the document was built before it was refused")

    monkeypatch.setattr(profile_load.yaml, "load", refuse)


@pytest.mark.parametrize("key", ["target_modules", "rewards", "description"])
def test_billion_laughs_is_refused_before_anything_is_built(tmp_path, no_construction, key):
    path = tmp_path / "laughs.yaml"
    path.write_text(laughs(key=key), encoding="utf-8")
    assert path.stat().st_size < 1500
    with pytest.raises(ProfileError) as refused:
        load_profile(path)
    assert str(path) in str(refused.value) and "aliases" in str(refused.value) and "fix:" in str(refused.value)


def test_deep_nesting_is_refused_without_recursion(tmp_path, no_construction):
    path = tmp_path / "deep.yaml"
    path.write_text("rewards: " + "{a: " * 2000 + "1" + "}" * 2000 + "\n", encoding="utf-8")
    with pytest.raises(ProfileError, match=f"nested more than {MAX_YAML_DEPTH} levels"):
        load_profile(path)
    # a megabyte of brackets: the C parser's events, never a recursion
    path.write_text("rewards: " + "[" * 500_000 + "]" * 500_000 + "\n", encoding="utf-8")
    with pytest.raises(ProfileError, match="nested more than"):
        load_profile(path)


def test_an_alias_inside_its_own_value_is_refused(tmp_path):
    path = tmp_path / "self.yaml"
    path.write_text("name: x\nrewards: &a {accuracy: *a}\n", encoding="utf-8")
    with pytest.raises(ProfileError, match="refers to a value that holds it"):
        load_profile(path)


def test_a_set_value_is_bounded_the_same_way(no_construction):
    value = laughs(5).split("target_modules: ", 1)[1]
    with pytest.raises(ProfileError, match="aliases"):
        parse_overrides([f"rewards={value}"])


def test_aliases_within_reason_still_load(tmp_path):
    text = (REPO / "profiles" / "cpu-tiny-4gen.yaml").read_text(encoding="utf-8")
    path = tmp_path / "anchors.yaml"
    path.write_text(
        text.replace("description:", "description: &d") + "target_modules: &t [q_proj, v_proj]\n", encoding="utf-8"
    )
    assert load_profile(path).target_modules == ["q_proj", "v_proj"]


def test_shown_costs_little_whatever_the_value():
    value = ["lol"] * 9
    for _ in range(8):
        value = [value] * 9  # 43 million leaves, shared
    assert len(shown(value)) <= 40
    nested = 1
    for _ in range(5000):
        nested = [nested]
    assert len(shown(nested)) <= 40  # no RecursionError
    assert shown(10**5000) == "a whole number of about 5001 digits"


def test_the_command_line_refuses_them_with_exit_2_and_no_traceback(tmp_path):
    for name, text in (("laughs.yaml", laughs()), ("deep.yaml", "rewards: " + "{a: " * 2000 + "1" + "}" * 2000)):
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        done = train_py(
            "plan",
            "--profile",
            str(path),
            env=dict(os.environ, GRPO_TRAIN_LEDGER=str(tmp_path / "ledger.jsonl")),
        )
        assert done.returncode == 2, done.stderr[-2000:]
        assert "Traceback" not in done.stderr and str(path) in done.stderr


def test_yaml_events_api_is_what_the_check_reads():
    # the check walks these event classes; a PyYAML that renamed them would make it pass everything
    events = list(yaml.parse("a: &x [1]\nb: *x\n"))
    kinds = {type(e).__name__ for e in events}
    assert {"MappingStartEvent", "SequenceStartEvent", "ScalarEvent", "AliasEvent"} <= kinds
    assert issubclass(yaml.MappingStartEvent, yaml.CollectionStartEvent)
