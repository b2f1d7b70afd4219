"""TRL's registry reward `get_soft_overlong_punishment` (DAPO's overlong shaping), at the lengths TRL's `trl grpo`
builds it with (1,280 tokens, a cache of 256), read as the project's `soft_overlong`."""

from __future__ import annotations

import pytest

from rewards.length import REGISTRY_CACHE_TOKENS, REGISTRY_MAX_TOKENS, overlong_penalty, soft_overlong


def test_the_penalty_is_zero_then_linear_then_minus_one():
    free = REGISTRY_MAX_TOKENS - REGISTRY_CACHE_TOKENS
    assert overlong_penalty(1) == 0.0 and overlong_penalty(free) == 0.0
    assert overlong_penalty(free + 128) == pytest.approx(-0.5)
    assert overlong_penalty(REGISTRY_MAX_TOKENS) == pytest.approx(-1.0)
    assert overlong_penalty(REGISTRY_MAX_TOKENS + 1) == -1.0


def test_soft_overlong_counts_tokens_and_never_raises():
    ids = [[1] * 10, [1] * 1152, [1] * 2000]
    assert soft_overlong(["a", "b", "c"], completion_ids=ids) == pytest.approx([0.0, -0.5, -1.0])
    assert soft_overlong(["a", "b"]) == [0.0, 0.0]  # no ids given: nothing to count
    assert soft_overlong(["a", "b"], completion_ids=[None, [1] * 2000]) == [0.0, -1.0]


def test_it_matches_trls_own_function():
    trl_rewards = pytest.importorskip("trl.rewards")
    theirs = trl_rewards.get_soft_overlong_punishment(REGISTRY_MAX_TOKENS, REGISTRY_CACHE_TOKENS)
    ids = [[7] * n for n in (5, 1024, 1025, 1100, 1280, 1281, 4000)]
    assert soft_overlong(["x"] * len(ids), completion_ids=ids) == pytest.approx(theirs(ids))
