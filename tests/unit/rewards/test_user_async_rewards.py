"""A user's `async def` reward, as TRL runs one: TRL awaits the async rewards of a step together on an event
loop of its own thread, so the guarded reward stays async, with the same checks as a plain one (the reward
and its line named on an error, its scores checked, None passed through); code that scores outside TRL calls
it through scores_now."""

from __future__ import annotations

import asyncio
import functools
import json

import pytest

from contract.attempt import REWARD_RUNNING_FILE
from rewards import user
from usercode.entry import parse_spec

REWARDS = """
import asyncio
import functools

async def judge(completions, **kwargs) -> list[float]:
    await asyncio.sleep(0)
    return [float(len(c)) for c in completions]


async def first(completions, seen, **kwargs) -> list[float]:
    # waits for `second` to start (`seen`: one list, the caller's): in time only when the two run side by side
    seen[0].append("first")
    for _ in range(300):
        if "second" in seen[0]:
            break
        await asyncio.sleep(0.01)
    return [1.0 if "second" in seen[0] else 0.0 for _ in completions]


async def second(completions, seen, **kwargs) -> list[float]:
    seen[0].append("second")
    await asyncio.sleep(0.05)
    return [2.0 for _ in completions]


async def raises(completions, **kwargs) -> list[float]:
    await asyncio.sleep(0)
    raise RuntimeError("judge offline")


async def leaves(completions, **kwargs) -> list[float]:
    raise SystemExit(4)


async def nothing(completions, **kwargs):
    return None


async def endless(completions, **kwargs):
    return [float("inf") for _ in completions]


async def some_none(completions, **kwargs):
    return [None if c == "skip" else 0.5 for c in completions]


async def sees_marker(completions, marker, **kwargs):
    import os

    return [1.0 if os.path.exists(m) else 0.0 for m in marker]


class Judge:
    async def __call__(self, completions, **kwargs) -> list[float]:
        return [3.0 for _ in completions]


judge_object = Judge()


def plain_wrapper(function):
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        return function(*args, **kwargs)

    return wrapper


wrapped = plain_wrapper(judge)
"""

COMPLETIONS = ["ab", "abcd", "skip"]


@pytest.fixture
def reward_file(tmp_path):
    path = tmp_path / "judges.py"
    path.write_text(REWARDS)
    return path


def load(reward_file, name):
    return user.load(parse_spec(f"{reward_file}:{name}"))


def test_an_async_reward_stays_async_and_is_scored_when_awaited(reward_file):
    reward = load(reward_file, "judge")
    assert user.is_async(reward) and reward.__name__ == "judge"
    assert asyncio.run(reward(prompts=["p"] * 3, completions=COMPLETIONS)) == [2.0, 4.0, 4.0]
    assert user.is_async(load(reward_file, "judge_object"))  # an object whose __call__ is async
    assert asyncio.run(load(reward_file, "judge_object")(prompts=["p"], completions=["c"])) == [3.0]
    assert user.is_async(functools.partial(reward, prompts=["p"]))


def test_trl_awaits_async_rewards_side_by_side_on_its_own_loop(reward_file):
    pytest.importorskip("trl")
    from trl.trainer.utils import is_async_callable, shutdown_event_loop_in_daemon, start_event_loop_in_daemon

    rewards = [load(reward_file, "first"), load(reward_file, "second")]
    assert all(is_async_callable(r) for r in rewards)
    assert not is_async_callable(load(reward_file, "wrapped"))  # TRL calls it as a plain one
    seen: list = []
    thread, loop, ready = start_event_loop_in_daemon(name="test-async-rewards")
    ready.wait()
    try:

        async def together():  # as GRPOTrainer._calculate_rewards gathers its async rewards
            return await asyncio.gather(
                *(r(prompts=["p"] * 2, completions=["a", "b"], seen=[seen] * 2) for r in rewards)
            )

        scores = asyncio.run_coroutine_threadsafe(together(), loop).result(timeout=30)
    finally:
        shutdown_event_loop_in_daemon(thread, loop)
    assert scores == [[1.0, 1.0], [2.0, 2.0]]


@pytest.mark.parametrize(
    "name, words",
    [
        ("raises", "reward 'raises' raised RuntimeError: judge offline (at {file}:{line} in raises)"),
        ("leaves", "reward 'leaves' called sys.exit(4) (at {file}:{line} in leaves)"),
        ("nothing", "returned NoneType None, expected a list with one float (or None) per completion"),
        ("endless", "returned inf for completion 0; a score must be finite"),
    ],
)
def test_an_async_reward_that_fails_is_named_as_a_plain_one_is(reward_file, name, words):
    reward = load(reward_file, name)
    with pytest.raises(user.UserRewardError) as info:
        asyncio.run(reward(prompts=None, completions=COMPLETIONS))
    line = next(n for n, text in enumerate(REWARDS.splitlines(), 1) if text.startswith(f"async def {name}(")) + 1
    words = words.format(file=reward_file, line=line + (name == "raises"))  # its second line raises
    assert info.value.reward == name and words in str(info.value), str(info.value)


def test_none_from_an_async_reward_passes_as_none(reward_file):
    scores = asyncio.run(load(reward_file, "some_none")(prompts=["p"] * 3, completions=COMPLETIONS))
    assert scores == [0.5, 0.5, None]


def test_scores_now_runs_an_async_reward_from_plain_code(reward_file):
    reward = load(reward_file, "judge")
    assert user.scores_now(reward, prompts=["p"], completions=["abc"]) == [3.0]
    assert user.scores_now(load(reward_file, "wrapped"), completions=["a"]) == [1.0]  # plain rewards too

    async def inside_a_loop():  # asyncio.run cannot nest: a thread of its own runs it
        return user.scores_now(reward, prompts=["p"], completions=["ab"])

    assert asyncio.run(inside_a_loop()) == [2.0]


def test_an_async_reward_behind_a_plain_wrapper_is_awaited(reward_file):
    reward = load(reward_file, "wrapped")
    assert not user.is_async(reward)
    assert reward(prompts=["p"], completions=["abc"]) == [3.0]


def test_the_marker_names_the_async_rewards_while_they_run(reward_file, tmp_path):
    marker = tmp_path / REWARD_RUNNING_FILE
    user.attach(tmp_path)
    try:
        reward = load(reward_file, "sees_marker")
        assert asyncio.run(reward(prompts=["p"], completions=["c"], marker=[str(marker)])) == [1.0]
        first, second = load(reward_file, "first"), load(reward_file, "second")

        async def together():
            seen: list = []
            tasks = [asyncio.ensure_future(r(prompts=["p"], completions=["c"], seen=[seen])) for r in (first, second)]
            await asyncio.sleep(0)  # both have started, neither has ended
            written = json.loads(marker.read_text())
            await asyncio.gather(*tasks)
            return written

        written = asyncio.run(together())
    finally:
        user.attach(None)
    assert written["reward"] == "first', 'second" and f"{reward_file}:second" in written["entry"]
    assert not marker.exists()  # gone once the last of them ended


def test_a_slow_async_reward_is_said_once(reward_file, monkeypatch):
    monkeypatch.setattr(user, "SLOW_CALL_S", 0.0)
    said = []
    user.attach(None, said.append)
    try:
        reward = load(reward_file, "judge")
        for _ in range(2):
            asyncio.run(reward(prompts=["p"], completions=["c"]))
    finally:
        user.attach(None)
    assert len(said) == 1 and said[0].startswith("warning: reward 'judge' took ")
