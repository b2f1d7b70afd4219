"""A user's reward whose parameters no column gives is named before training, with the columns that are there."""

from __future__ import annotations

import pytest

from rewards import get_reward
from rewards.user import UserRewardError, check_columns

ROW = {"prompt": [{"role": "user", "content": "1 + 1?"}], "answer": "2", "problem": "1 + 1?", "solution": "\\boxed{2}"}


def _reward_file(tmp_path, text: str) -> str:
    path = tmp_path / "mine.py"
    path.write_text(text)
    return f"{path}:{text.split('def ', 1)[1].split('(', 1)[0]}"


def test_a_column_named_parameter_passes(tmp_path):
    reward = get_reward(
        _reward_file(tmp_path, "def accuracy_reward(completions, solution, **kwargs):\n    return []\n")
    )
    check_columns(reward, ROW)


def test_a_parameter_no_column_gives_is_named_with_the_columns(tmp_path):
    entry = _reward_file(tmp_path, "def exact(prompts, completions, ground_truth, **kwargs):\n    return []\n")
    with pytest.raises(UserRewardError) as info:
        check_columns(get_reward(entry), ROW)
    text = str(info.value)
    assert "'ground_truth'" in text and "answer, problem, solution" in text and "mine.py:1" in text
    assert "answer_field" in text


def test_trl_keywords_and_defaults_are_given(tmp_path):
    text = "def r(prompts, completions, completion_ids, trainer_state, target=None, **kwargs):\n    return []\n"
    check_columns(get_reward(_reward_file(tmp_path, text)), ROW)
    for name in ("accuracy", "math", "xml_strict", "tool_ok"):
        check_columns(get_reward(name), {"prompt": [], "answer": "1"})
