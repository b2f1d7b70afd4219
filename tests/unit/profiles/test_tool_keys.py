"""The profile keys of tools: `tools`, `environment`, `max_tool_calls`, found and checked without running the
user's code, TRL's own names read through the aliases, and handed to TRL's GRPOConfig."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from profiles.load import load_profile, profile_from_dict
from support.profile_data import refused, valid, write
from trainer.config import grpo_config_kwargs

REPO = Path(__file__).resolve().parents[3]

TOOL_FILE = '''
import sys
sys.exit("importing this file would end the process: the profile check must not run it")


def lookup(word: str) -> str:
    """Looks a word up.

    Args:
        word: the word
    """
    return word


class Shop:
    def reset(self, **row):
        pass
'''


@pytest.fixture
def tool_file(tmp_path):
    path = tmp_path / "my_tools.py"
    path.write_text(TOOL_FILE, encoding="utf-8")
    return path


def test_the_shipped_entries_are_known_by_name():
    profile = profile_from_dict(valid(tools=["calculate"], environment="guess", max_tool_calls=3), "<test>")
    assert (profile.tools, profile.environment, profile.max_tool_calls) == (["calculate"], "guess", 3)
    assert profile_from_dict(valid(tools="calculate"), "<test>").tools == ["calculate"]


def test_a_users_file_is_checked_without_being_run(tool_file):
    profile = profile_from_dict(valid(tools=[f"{tool_file}:lookup"], environment=f"{tool_file}:Shop"), "<test>")
    assert profile.tools == [f"{tool_file.resolve()}:lookup"]
    assert profile.environment == f"{tool_file.resolve()}:Shop"


def test_a_relative_file_is_found_beside_the_profile(tmp_path, tool_file):
    path = write(tmp_path, "dataset: arithmetic\ntools: [my_tools.py:lookup]\nenvironment: my_tools.py:Shop\n")
    profile = load_profile(path)
    assert profile.tools == [f"{tool_file.resolve()}:lookup"]


@pytest.mark.parametrize(
    "keys, key, words",
    [
        ({"tools": ["calculator"]}, "tools", "unknown tool 'calculator'"),
        ({"tools": ["nowhere.py:f"]}, "tools", "tool file"),
        ({"tools": ["{file}:lookp"]}, "tools", "defines no 'lookp' (functions there: lookup)"),
        ({"tools": ["{file}:lookup", "{file}:lookup"]}, "tools", "both be offered to the model as lookup"),
        ({"tools": [3]}, "tools", "expected a list of tool entries"),
        ({"environment": "{file}:Shp"}, "environment", "defines no 'Shp' (classes and functions there: Shop"),
        ({"environment": "nowhere.py:Env"}, "environment", "environment file"),
        ({"environment": "chess"}, "environment", "unknown environment 'chess'"),
        ({"max_tool_calls": 0}, "max_tool_calls", ">= 1"),
    ],
)
def test_a_bad_entry_names_the_key(tool_file, keys, key, words):
    keys = {
        k: [v.format(file=tool_file) if isinstance(v, str) else v for v in value]
        if isinstance(value, list)
        else value.format(file=tool_file)
        if isinstance(value, str)
        else value
        for k, value in keys.items()
    }
    error = refused(valid(**keys))
    assert error.key == key
    assert words in str(error)


def test_trls_names_are_read_through_the_aliases(tmp_path):
    path = write(
        tmp_path,
        "dataset: arithmetic\ntools: [calculate]\nenvironment_factory: guess\nmax_tool_calling_iterations: 2\n",
    )
    profile = load_profile(path)
    assert (profile.environment, profile.max_tool_calls) == ("guess", 2)
    read = {r.key: r.ours for r in profile.readings}
    assert read["environment_factory"] == "environment"
    assert read["max_tool_calling_iterations"] == "max_tool_calls"


def test_unbounded_turns_are_refused(tmp_path):
    from contract.errors import ProfileError

    path = write(tmp_path, "dataset: arithmetic\ntools: [calculate]\nmax_tool_calling_iterations:\n")
    with pytest.raises(ProfileError, match="without end"):
        load_profile(path)


def test_grpo_config_gets_the_turns_only_with_tools():
    from trl import GRPOConfig

    plain = profile_from_dict(valid(device="cpu", fast_inference=False, load_in_4bit=False, optim="adamw_torch"), "<t>")
    assert "max_tool_calling_iterations" not in grpo_config_kwargs(
        plain, "out", device="cpu", bf16=False, use_vllm=False
    )
    tools = plain.replace(tools=["calculate"], max_tool_calls=3)
    kwargs = grpo_config_kwargs(tools, "out", device="cpu", bf16=False, use_vllm=False)
    assert kwargs["max_tool_calling_iterations"] == 3
    assert GRPOConfig(**kwargs).max_tool_calling_iterations == 3


def test_the_shipped_tool_profiles_load():
    tools = load_profile(REPO / "profiles" / "cpu-tiny-tools.yaml")
    assert tools.tools == ["calculate"] and tools.device == "cpu" and tools.model == "tiny"
    guess = load_profile(REPO / "profiles" / "cpu-tiny-guess.yaml")
    assert guess.environment == "guess" and "tools.guess:solved" in guess.rewards
    assert guess.correctness == "tools.guess:solved"


def test_profiles_with_tools_are_not_rungs_of_the_ladder(tmp_path):
    from support.cli import train_py

    done = train_py("plan", "--json")
    assert done.returncode == 0, done.stderr
    names = [c["profile"] for c in json.loads(done.stdout)["candidates"]]
    assert names and "cpu-tiny-tools" not in names and "cpu-tiny-guess" not in names
    done = train_py("plan", "--json", "--profile", str(REPO / "profiles" / "cpu-tiny-tools.yaml"))
    assert json.loads(done.stdout)["chosen"] == "cpu-tiny-tools"
    alone = tmp_path / "ladder"
    alone.mkdir()
    (alone / "a.yaml").write_text((REPO / "profiles" / "cpu-tiny-tools.yaml").read_text())
    done = train_py("plan", "--json", "--profiles-dir", str(alone))
    assert json.loads(done.stdout)["chosen"] == "cpu-tiny-tools"  # a folder of them alone is a ladder
    done = train_py("plan", "--json", "--gpu-memory", "24", "--set", "tools=[calculate]")
    chosen = json.loads(done.stdout)["chosen"]
    assert chosen.startswith("gpu-"), chosen  # the user's --set gives every rung the tools: they stay rungs


# A tool transformers cannot describe (no docstring, an argument without a type hint or a description) is
# refused by the profile check, not after the model has loaded; so is a tool named as one of the environment's
# methods (TRL keys both by name: one would silently stand in for the other).
ODD_TOOLS = '''
import sys
sys.exit("never run by the profile check")


def bare(word: str) -> str:
    return word


def untyped(word) -> str:
    """Looks a word up.

    Args:
        word: the word
    """
    return word


def half_documented(word: str, times: int = 1) -> str:
    """Repeats a word.

    Args:
        word: the word
    """
    return word * times


def typed_in_the_docstring(word: str) -> str:
    """transformers reads `name: what`, not `name (type): what`.

    Args:
        word (str): the word
    """
    return word


def starred(*words: str, **options) -> str:
    """Joins words.

    Args:
        words: the words
        options: ignored
    """
    return " ".join(words)


async def fetch(url: str) -> str:
    """Fetches a page.

    Args:
        url: the address
    """
    return url


def guess(number: float) -> str:
    """Same name as the shipped environment's tool.

    Args:
        number: a number
    """
    return str(number)


class Base:
    def peek(self, card: int) -> str:
        return str(card)


class Table(Base):
    """A card game."""

    def reset(self, **row):
        pass

    def get_reward(self):
        return 0.0

    def _private(self):
        pass

    @property
    def state(self):
        return None

    @classmethod
    def make(cls):
        return cls()


class Shop:
    def reset(self, **row):
        pass

    def lookup(self, item: str) -> str:
        """The price of an item.

        Args:
            item: the item
        """
        return item


if sys.version_info > (3,):
    class Later(Shop):
        """Its tools come from Shop, defined in the same file."""
'''


@pytest.fixture
def odd_file(tmp_path):
    path = tmp_path / "odd_tools.py"
    path.write_text(ODD_TOOLS, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "keys, key, words",
    [
        ({"tools": ["{file}:bare"]}, "tools", "tool bare ({file}:bare, line 6) has no docstring"),
        ({"tools": ["{file}:untyped"]}, "tools", "has no type hint on 'word' (fix: give every argument a type hint"),
        ({"tools": ["{file}:half_documented"]}, "tools", "has no description of 'times' in its docstring (fix:"),
        ({"tools": ["{file}:typed_in_the_docstring"]}, "tools", "has no description of 'word'"),
        ({"tools": ["{file}:starred"]}, "tools", "has no type hint on 'options'"),
        ({"environment": "{file}:Table"}, "environment", "environment Table: its method peek ({file}:Table, line"),
        ({"tools": ["{file}:lookup"], "environment": "{file}:Shop"}, "tools", "the method lookup of the environment"),
        ({"tools": ["{file}:lookup"], "environment": "{file}:Later"}, "tools", "would both be offered to the model"),
        ({"tools": ["{file}:guess"], "environment": "guess"}, "tools", "drop '{file}:guess' from tools"),
    ],
)
def test_a_tool_the_model_could_not_be_told_of_is_refused(odd_file, tmp_path, keys, key, words):
    if "lookup" in str(keys.get("tools")):  # a file holding the tool alone, beside the environment's
        (tmp_path / "lookup.py").write_text(TOOL_FILE, encoding="utf-8")
        keys = {**keys, "tools": [str(tmp_path / "lookup.py") + ":lookup"]}
    keys = {
        k: [v.format(file=odd_file) for v in value] if isinstance(value, list) else value.format(file=odd_file)
        for k, value in keys.items()
    }
    error = refused(valid(**keys))
    assert error.key == key
    assert words.format(file=odd_file) in str(error)


def test_what_transformers_describes_passes(odd_file):
    profile = profile_from_dict(valid(tools=[f"{odd_file}:fetch", f"{odd_file}:guess"]), "<test>")
    assert [t.rpartition(":")[2] for t in profile.tools] == ["fetch", "guess"]
    # the shipped entries, and a tool beside an environment whose methods are other names
    profile_from_dict(valid(tools=["calculate"], environment="guess"), "<test>")


def test_the_attempt_refuses_what_the_parse_could_not_see(tmp_path, monkeypatch):
    """A tool made at run time has no source to read: the attempt checks the imported tool the same way,
    before the model loads, and ends `error` naming it (never a traceback after the model loaded)."""
    from tools import load_environment, load_tools
    from usercode.failure import UserCodeError

    path = tmp_path / "made.py"
    path.write_text(
        "def _make():\n    def shout(word):\n        return word.upper()\n    return shout\n\n\nshout = _make()\n\n\n"
        "from made_base import Base as Env\n",
        encoding="utf-8",
    )
    (tmp_path / "made_base.py").write_text(
        "class Base:\n    def reset(self, **row):\n        pass\n\n    def peek(self, card: int) -> str:\n"
        "        return str(card)\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    profile = profile_from_dict(valid(tools=[f"{path}:shout"], environment=f"{path}:Env"), "<test>")
    with pytest.raises(UserCodeError, match=r"tool '.*made.py:shout' cannot be described to the model: .*no docstring"):
        load_tools(profile.tools)
    with pytest.raises(UserCodeError, match=r"its method peek cannot be described to the model"):
        load_environment(profile.environment)
