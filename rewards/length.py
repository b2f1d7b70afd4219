"""Length rewards: how near a completion comes to its cap. soft_overlong is DAPO's overlong reward shaping, as
TRL's registry names it (`get_soft_overlong_punishment` in `trl grpo`): 0 up to the cap less a cache of tokens,
then falling linearly to -1 at the cap, and -1 past it. Lengths are counted in tokens (TRL's completion_ids)."""

from __future__ import annotations

from rewards.parse import as_batch

# TRL's registry builds it with these (trl/scripts/grpo.py): the shaping starts at 1,280 - 256 = 1,024 tokens
REGISTRY_MAX_TOKENS = 1280
REGISTRY_CACHE_TOKENS = 256


def overlong_penalty(length: int, max_tokens: int = REGISTRY_MAX_TOKENS, cache: int = REGISTRY_CACHE_TOKENS) -> float:
    """0.0 for a completion of at most max_tokens - cache tokens, -1.0 past max_tokens, linear between."""
    free = max_tokens - cache
    if length <= free:
        return 0.0
    if length <= max_tokens:
        return (free - length) / cache
    return -1.0


def soft_overlong(completions, completion_ids=None, **kwargs) -> list[float]:
    """DAPO's soft overlong punishment at TRL's registry's lengths; 0.0 for a completion whose ids are not given
    or cannot be counted."""
    batch = as_batch(completions)
    try:
        ids = list(completion_ids) if completion_ids is not None else []
    except TypeError:
        ids = []
    out = []
    for index in range(len(batch)):
        try:
            out.append(overlong_penalty(len(ids[index])) if index < len(ids) else 0.0)
        except TypeError:
            out.append(0.0)
    return out
