"""A user's reward doing what a reward must not: returning inf, NaN, text, None, the wrong length; calling
sys.exit or os._exit; failing at import; a dotted module path misspelled. Each is refused naming the reward,
the completion and what it returned (or the file and line), never as a library traceback or a run that
trains nothing."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import pytest

from contract.attempt import ERROR, REWARD_RUNNING_FILE, Outcome
from launcher.run.attempts import read_result
from rewards import user
from support.waiting import run_to_end
from trainer.run import _record_failure, classify
from usercode.entry import check_spec, parse_spec
from usercode.failure import UserCodeError


@pytest.fixture(autouse=True)
def detached():
    """Warnings through the warnings module, each said anew: an attempt run earlier in this process (a trainer
    test) may have attached its printer and said its own warnings."""
    user.attach(None)
    user._warned.clear()
    yield
    user.attach(None)


REWARDS = """import math, sys, os

def infinite(prompts, completions, **kw):
    return [math.inf] + [1.0] * (len(completions) - 1)

def not_a_number(prompts, completions, **kw):
    return [float("nan")] * len(completions)

def text(prompts, completions, **kw):
    return ["0.5" for _ in completions]

def objects(prompts, completions, **kw):
    return [object() for _ in completions]

def nothing(prompts, completions, **kw):
    return None

def all_none(prompts, completions, **kw):
    return [None] * len(completions)

def generator(prompts, completions, **kw):
    return (0.5 for _ in completions)

def leaves(prompts, completions, **kw):
    sys.exit(3)

def leaves_hard(prompts, completions, **kw):
    os._exit(7)

def fine(prompts, completions, **kw):
    return [True, 0, 2.5]
"""

PROMPTS = [[{"role": "user", "content": f"What is {i} + 1?"}] for i in range(3)]
COMPLETIONS = [[{"role": "assistant", "content": "<answer>1</answer>"}]] * 3


@pytest.fixture
def reward_file(tmp_path):
    path = tmp_path / "my_rewards.py"
    path.write_text(REWARDS)
    return path


def call(reward_file, name):
    reward = user.load(parse_spec(f"{reward_file}:{name}"))
    return reward(prompts=PROMPTS, completions=COMPLETIONS)


@pytest.mark.parametrize(
    "name, words",
    [
        ("infinite", "returned inf for completion 0 (prompt 'What is 0 + 1?'); a score must be finite"),
        ("not_a_number", "returned nan for completion 0 (prompt 'What is 0 + 1?'); a score must be finite"),
        ("text", "returned the text '0.5' for completion 0 (prompt 'What is 0 + 1?'); a score is a number"),
        ("objects", "returned object <object object at"),
        ("nothing", "returned NoneType None, expected a list with one float (or None) per completion"),
    ],
)
def test_a_score_that_is_not_a_finite_number_is_refused_naming_reward_and_row(reward_file, name, words):
    with pytest.raises(user.UserRewardError) as info:
        call(reward_file, name)
    assert info.value.reward == name and words in str(info.value), str(info.value)
    status, line = classify(info.value)
    assert status == ERROR and line.startswith(f"reward '{name}' returned")


def test_scores_that_are_numbers_of_any_kind_pass_as_floats(reward_file):
    assert call(reward_file, "fine") == [1.0, 0.0, 2.5]
    assert call(reward_file, "generator") == [0.5, 0.5, 0.5]


def test_none_for_every_completion_is_said_once(reward_file):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert call(reward_file, "all_none") == [None, None, None]
        call(reward_file, "all_none")
    said = [str(w.message) for w in caught if issubclass(w.category, user.UserRewardWarning)]
    assert len(said) == 1 and "returned None for all 3 completions" in said[0]


def test_sys_exit_in_a_reward_is_an_error_naming_it(reward_file, tmp_path):
    with pytest.raises(user.UserRewardError) as info:
        call(reward_file, "leaves")
    assert "reward 'leaves' called sys.exit(3)" in str(info.value)
    assert f"{reward_file}:25 in leaves" in str(info.value)
    outcome = Outcome()
    code = _record_failure(outcome, info.value, "cpu-tiny-8gen", 0, tmp_path)
    assert code == 1 and outcome.status == ERROR
    assert outcome.error.startswith("reward 'leaves' called sys.exit(3)")


def test_the_users_own_frames_replace_the_library_traceback(reward_file, tmp_path, capsys):
    with pytest.raises(user.UserRewardError) as info:
        call(reward_file, "leaves")
    _record_failure(Outcome(), info.value, "cpu-tiny-8gen", 0, tmp_path)
    err = capsys.readouterr().err
    assert "sys.exit(3)" in err and f'File "{reward_file}", line 25, in leaves' in err
    assert "Traceback (most recent call last)" not in err and len(err.splitlines()) <= 5, err


def test_os_exit_in_a_reward_is_reported_as_the_rewards_doing(reward_file, tmp_path):
    attempt_dir = tmp_path / "attempt"
    attempt_dir.mkdir()
    code = (
        f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parents[3])!r})\n"
        "from pathlib import Path\nfrom rewards import user\nfrom usercode.entry import parse_spec\n"
        f"user.attach(Path({str(attempt_dir)!r}))\n"
        f"reward = user.load(parse_spec({str(reward_file) + ':leaves_hard'!r}))\n"
        "reward(prompts=['p'], completions=['c'])\n"
    )
    done = run_to_end([sys.executable, "-c", code])
    assert done.returncode == 7
    assert json.loads((attempt_dir / REWARD_RUNNING_FILE).read_text())["reward"] == "leaves_hard"
    result = read_result(attempt_dir, 7, "", 1.0, interrupted=False)
    assert result.status == ERROR
    assert result.error.startswith("the attempt process ended (exit 7) inside reward 'leaves_hard' (")


def test_a_reward_that_returns_leaves_no_marker(reward_file, tmp_path):
    user.attach(tmp_path)
    try:
        call(reward_file, "fine")
        with pytest.raises(user.UserRewardError):
            call(reward_file, "text")
    finally:
        user.attach(None)
    assert not (tmp_path / REWARD_RUNNING_FILE).exists()


@pytest.mark.parametrize(
    "source, words",
    [
        (
            "import no_such_package_anywhere\ndef f(completions, **kw):\n    return [0.0]\n",
            "could not be imported from {file}: ModuleNotFoundError: No module named 'no_such_package_anywhere' "
            "(at {file}:1)",
        ),
        (
            "import sys\nsys.exit(2)\ndef f(completions, **kw):\n    return [0.0]\n",
            "could not be imported from {file}: it called sys.exit(2) (at {file}:2)",
        ),
        (
            "x = 1 / 0\ndef f(completions, **kw):\n    return [0.0]\n",
            "could not be imported from {file}: ZeroDivisionError: division by zero (at {file}:1)",
        ),
    ],
)
def test_an_error_while_importing_the_reward_names_it_and_its_file(tmp_path, source, words):
    path = tmp_path / "loud.py"
    path.write_text(source)
    with pytest.raises(UserCodeError) as info:
        user.load(parse_spec(f"{path}:f"))
    assert str(info.value) == "reward 'f' " + words.format(file=path)
    assert classify(info.value)[0] == ERROR


# ---------------------------------------------------------------------------------------------------
# A dotted module path, checked part by part without running the user's code


@pytest.fixture
def package(tmp_path, monkeypatch):
    root = tmp_path / "site"
    (root / "mypkg").mkdir(parents=True)
    (root / "mypkg" / "__init__.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w')\n")
    (root / "mypkg" / "scores.py").write_text(
        "def exact(completions, **kw):\n    return [0.0] * len(completions)\n"
        "try:\n    from fast import quick\nexcept ImportError:\n"
        "    def quick(completions, **kw):\n        return []\n"
    )
    monkeypatch.syspath_prepend(str(root))
    yield tmp_path
    for name in ("mypkg", "mypkg.scores"):
        sys.modules.pop(name, None)


@pytest.mark.parametrize(
    "entry, words",
    [
        ("mypkg.nosuch:exact", "package 'mypkg' has no module 'nosuch' (modules there: scores)"),
        ("mypkg.score:exact", "did you mean 'scores'?"),
        ("mypkg.scores:nosuch", "module 'mypkg.scores' ("),
        ("mypkg.scores:exat", "defines no 'exat' (functions there: exact) (fix: did you mean 'exact'?)"),
        ("mypkg.scores.deeper:exact", "'mypkg.scores' is a module, not a package"),
    ],
)
def test_a_misspelled_module_path_is_refused_at_load(package, entry, words):
    with pytest.raises(ValueError) as info:
        check_spec(parse_spec(entry))
    assert words in str(info.value), str(info.value)
    assert not (package / "ran").exists()  # no package __init__ ran


def test_a_right_module_path_passes_without_running_it(package):
    check_spec(parse_spec("mypkg.scores:exact"))
    check_spec(parse_spec("mypkg.scores:quick"))  # defined inside try / except
    assert not (package / "ran").exists()


def test_a_misspelled_module_path_exits_2_at_dry_run(package, tmp_path):
    from contract.errors import ProfileError
    from profiles.load import load_profile

    cpu = Path(__file__).resolve().parents[3] / "profiles" / "cpu-tiny-8gen.yaml"
    with pytest.raises(ProfileError) as info:
        load_profile(cpu, ["rewards={accuracy: 1, mypkg.nosuch:exact: 1}"])
    assert info.value.key == "rewards" and "has no module 'nosuch'" in str(info.value)


def test_a_slow_reward_is_said_once(tmp_path, monkeypatch):
    path = tmp_path / "slow.py"
    path.write_text(
        "import time\ndef slow(completions, **kw):\n    time.sleep(0.05)\n    return [0.0] * len(completions)\n"
    )
    monkeypatch.setattr(user, "SLOW_CALL_S", 0.01)
    said = []
    user.attach(None, said.append)
    try:
        reward = user.load(parse_spec(f"{path}:slow"))
        reward(prompts=["p"], completions=["c"])
        reward(prompts=["p"], completions=["c"])
    finally:
        user.attach(None)
    assert len(said) == 1 and said[0].startswith("warning: reward 'slow' took ") and "every training step" in said[0]
