"""Rewards from the user's own file or module, and the LaTeX `math` reward."""

from __future__ import annotations

import sys

import pytest

from rewards import user
from rewards.latex import math as math_reward
from usercode.entry import check_spec, is_user_code, parse_spec

REWARD_FILE = """
import re

def brevity(prompts, completions, answer, **kwargs):
    return [1.0 if len(c) < 20 else 0.0 for c in completions]

def broken(prompts, completions, **kwargs):
    return [1 / 0 for _ in completions]

def wrong_length(prompts, completions, **kwargs):
    return [0.5]

scorer = brevity
"""


@pytest.fixture
def reward_file(tmp_path):
    path = tmp_path / "my_rewards.py"
    path.write_text(REWARD_FILE)
    return path


def test_spec_forms(tmp_path, reward_file):
    spec = parse_spec("my_rewards.py:brevity", base_dir=tmp_path)
    assert spec.path == reward_file and spec.function == "brevity"
    spec = parse_spec("pkg.sub.mod:score")
    assert spec.module == "pkg.sub.mod" and spec.path is None
    for bad in ("file.py:", ":f", "file.py:not-a-name", "bad module!:f"):
        with pytest.raises(ValueError):
            parse_spec(bad)
    assert is_user_code("a.py:f") and not is_user_code("accuracy")


def test_check_reads_the_file_without_running_it(tmp_path, reward_file):
    touched = tmp_path / "touched"
    (tmp_path / "side_effect.py").write_text(
        f"open({str(touched)!r}, 'w').write('x')\ndef f(completions, **kw):\n    return [0.0] * len(completions)\n"
    )
    check_spec(parse_spec(str(tmp_path / "side_effect.py") + ":f"))
    assert not touched.exists()
    check_spec(parse_spec(f"{reward_file}:scorer"))  # an assigned name counts as defined
    with pytest.raises(ValueError, match=r"defines no 'missing' \(functions there: brevity, broken, wrong_length\)"):
        check_spec(parse_spec(f"{reward_file}:missing"))
    with pytest.raises(ValueError, match="not found"):
        check_spec(parse_spec(f"{tmp_path / 'nope.py'}:f"))
    (tmp_path / "bad.py").write_text("def f(:\n")
    with pytest.raises(ValueError, match="syntax error at line 1"):
        check_spec(parse_spec(f"{tmp_path / 'bad.py'}:f"))
    with pytest.raises(ValueError, match="not importable"):
        check_spec(parse_spec("no_such_package_here.mod:f"))
    check_spec(parse_spec("rewards.accuracy:accuracy"))


def test_loaded_reward_scores_and_keeps_its_name(reward_file):
    reward = user.load(parse_spec(f"{reward_file}:brevity"))
    assert reward.__name__ == "brevity"
    assert reward(prompts=["p", "p"], completions=["short", "x" * 30], answer=["1", "1"]) == [1.0, 0.0]


def test_a_failing_reward_names_itself_and_the_users_line(reward_file):
    reward = user.load(parse_spec(f"{reward_file}:broken"))
    with pytest.raises(user.UserRewardError) as info:
        reward(prompts=["p"], completions=["c"])
    assert info.value.reward == "broken"
    assert info.value.where.startswith(f"{reward_file}:8 in ")
    assert "ZeroDivisionError" in str(info.value)
    wrong = user.load(parse_spec(f"{reward_file}:wrong_length"))
    with pytest.raises(user.UserRewardError, match="returned 1 scores for 2 completions"):
        wrong(prompts=["p", "q"], completions=["a", "b"])


def test_module_reward(tmp_path, monkeypatch):
    package = tmp_path / "myproj"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "scoring.py").write_text(
        "def exact(completions, answer, **kw):\n    return [float(c == a) for c, a in zip(completions, answer)]\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    reward = user.load(parse_spec("myproj.scoring:exact"))
    assert reward(prompts=["p", "p"], completions=["4", "5"], answer=["4", "4"]) == [1.0, 0.0]
    sys.modules.pop("myproj.scoring", None)
    sys.modules.pop("myproj", None)


@pytest.mark.parametrize(
    "completion, gold, expected",
    [
        ("<reasoning>r</reasoning><answer>\\frac{1}{2}</answer>", "1/2", 1.0),
        ("so the result is \\boxed{0.5}", "\\frac12", 1.0),
        ("<answer>\\sqrt{4}</answer>", "2", 1.0),
        ("The answer is \\boxed{3}", "2", 0.0),
        ("<answer>x = 2</answer>", "2", 1.0),
        ("no answer at all", "2", 0.0),
        ("", "2", 0.0),
    ],
)
def test_math_reward_exact_values(completion, gold, expected):
    assert math_reward(completions=[completion], answer=[gold]) == [expected]


def test_math_reward_never_raises_on_odd_input():
    assert math_reward(
        completions=[None, 3, [{"role": "assistant", "content": "\\boxed{1}"}]], answer=["1", "1", "1"]
    ) == [0.0, 0.0, 1.0]
    assert math_reward(completions=["\\boxed{1}"], answer=[None]) == [0.0]
