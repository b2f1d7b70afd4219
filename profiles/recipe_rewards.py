"""HOW a recipe's reward_funcs (and reward_weights) become the project's rewards mapping: open-r1's and TRL's
reward names with a counterpart here, their factories and remote judges without one (refused with the fix), the
entries that are one reward here with their weights summed, and the note `profiles check` gives."""

from __future__ import annotations

from contract.errors import ProfileError
from profiles.keys import shown
from profiles.recipe_reading import RENAMED, Reading, RecipeProblems
from rewards.model import MODEL_PREFIX

# open-r1's and TRL's reward names with a counterpart here: their accuracy verifies a LaTeX answer against the
# gold with math-verify, which is `math` here (the project's `accuracy` compares one number and would misjudge
# `\frac{1}{2}`); open-r1's `format` and `tag_count` score the layout the recipe's system_prompt asks for,
# <think>/<answer> (think_format, think_count, open-r1's own) or, with the project's default prompt,
# <reasoning>/<answer> (xml_strict, xml_count)
_ACCURACY = {"accuracy": "math", "accuracy_reward": "math", "trl.rewards.accuracy_reward": "math"}
# TRL's registry (`trl grpo`) and trl.rewards' exports, in both its spellings; its think_format_reward scores
# the layout, as open-r1's `format` does
_TRL_ACCURACY = {name: "math" for name in ("reasoning_accuracy_reward", "trl.rewards.reasoning_accuracy_reward")}
_TRL_FORMAT = ("think_format_reward", "trl.rewards.think_format_reward")
# TRL's registry builds DAPO's overlong shaping at fixed lengths (rewards.length); the factory imported as
# trl.rewards.get_soft_overlong_punishment is not itself a reward, and stays refused with the fix
_TRL_LENGTH = {"get_soft_overlong_punishment": "soft_overlong"}
OPEN_R1_REWARDS = {
    **_ACCURACY,
    **_TRL_ACCURACY,
    **_TRL_LENGTH,
    **dict.fromkeys(_TRL_FORMAT, "xml_strict"),
    "format": "xml_strict",
    "tag_count": "xml_count",
}
OPEN_R1_THINK_REWARDS = {
    **_ACCURACY,
    **_TRL_ACCURACY,
    **_TRL_LENGTH,
    **dict.fromkeys(_TRL_FORMAT, "think_format"),
    "format": "think_format",
    "tag_count": "think_count",
}
# open-r1's rewards that judge programs on its own remote workers, with no counterpart here
OPEN_R1_JUDGES = {
    "cf_code": "Codeforces problems judged in C++ by open-r1's Piston checker",
    "ioi_code": "IOI problems judged by open-r1's Piston or Morph workers",
}
# trl.rewards' factories with no counterpart here, and what each scores
TRL_REWARDS_WITHOUT_COUNTERPART = {
    "get_soft_overlong_punishment": "a penalty on completions near max_completion_length",
    "get_cosine_scaled_reward": "accuracy scaled by completion length",
    "get_repetition_penalty_reward": "a penalty on repeated n-grams",
}


def _unknown_reward(source: str, name: str) -> ProfileError:
    from rewards import REWARDS

    short = name.removeprefix("trl.rewards.")
    if name in OPEN_R1_JUDGES:
        return ProfileError(
            source,
            "reward_funcs",
            f"open-r1's {name} ({OPEN_R1_JUDGES[name]}) has no counterpart here",
            "for Python programs with test cases (verification_info), write code (and code_format); "
            "docs/code-rewards.md",
        )
    if short in _TRL_LENGTH:
        return ProfileError(
            source,
            "reward_funcs",
            f"{name} is TRL's factory of a reward, not a reward: TRL's registry builds it at 1,280 tokens",
            f"write reward_funcs: [{short}] (its registry name), or your own lengths as path/to/file.py:function",
        )
    if short in TRL_REWARDS_WITHOUT_COUNTERPART:
        return ProfileError(
            source,
            "reward_funcs",
            f"TRL's {short} ({TRL_REWARDS_WITHOUT_COUNTERPART[short]}) is a factory of a reward with no counterpart "
            "here",
            "write it as path/to/file.py:function in reward_funcs (a function of completions returning floats), "
            "or drop it",
        )
    return ProfileError(
        source,
        "reward_funcs",
        f"reward {name!r} has no counterpart here (known: {', '.join(REWARDS)}; open-r1's accuracy, format, "
        f"tag_count; TRL's {', '.join(['accuracy_reward', *(n for n in (*_TRL_ACCURACY, *_TRL_FORMAT) if '.' not in n)])})",
        "write your reward as path/to/file.py:function or package.module.function in reward_funcs",
    )


def _rewards(data: dict, source: str, context: dict) -> tuple[dict[str, float], list[str]]:
    """reward_funcs [+ reward_weights] as the project's rewards mapping, and a note for each reward named more
    than once (open-r1's `format` is the project's `xml_strict`): TRL adds weight x score for every entry, so
    the entries of one reward are one reward with their weights summed. A --set of reward_weights alone takes
    reward_funcs from the file it changes (`context`); a --set of reward_funcs alone weighs each 1.0, as TRL."""
    funcs = data.get("reward_funcs", context.get("reward_funcs"))
    if isinstance(funcs, str):
        funcs = [funcs]
    scorer = data.get("reward_model_name_or_path", context.get("reward_model_name_or_path"))
    if isinstance(scorer, str) and scorer.strip():  # `trl grpo` puts the reward model first
        funcs = [f"{MODEL_PREFIX}{scorer.strip()}", *(funcs or [])]
    if not isinstance(funcs, list) or not funcs or not all(isinstance(f, str) for f in funcs):
        raise ProfileError(
            source,
            "reward_funcs",
            f"expected a list of reward names, got {shown(funcs)}",
            "write e.g. reward_funcs: [accuracy, format]",
        )
    weights = data.get("reward_weights")
    if weights is None and "reward_funcs" not in data:
        weights = context.get("reward_weights")
    if weights is None:
        weights = [1.0] * len(funcs)  # TRL weighs every reward 1.0 when none are given
    if not isinstance(weights, list) or len(weights) != len(funcs):
        raise ProfileError(
            source,
            "reward_weights",
            f"{shown(weights)} does not give one weight per reward of reward_funcs ({len(funcs)})",
            "give as many weights as rewards",
        )
    from rewards import REWARDS
    from rewards.parse import THINK_LAYOUT, asked_layout

    think = asked_layout(data.get("system_prompt", context.get("system_prompt"))) == THINK_LAYOUT
    table = OPEN_R1_THINK_REWARDS if think else OPEN_R1_REWARDS
    from usercode.entry import colon_spelling, is_user_code

    out: dict[str, float] = {}
    named: dict[str, list[str]] = {}  # the project's reward -> the entries that named it
    problems: list[ProfileError] = []
    for name, weight in zip(funcs, weights):
        factory = name.removeprefix("trl.rewards.") in TRL_REWARDS_WITHOUT_COUNTERPART and name not in table
        ours = name if name.startswith(MODEL_PREFIX) else None if factory else table.get(name)
        if not factory and ours is None and (name in REWARDS or is_user_code(name)):
            ours = colon_spelling(name)
        if ours is None:
            problems.append(_unknown_reward(source, name))
            continue
        try:
            if isinstance(weight, bool):
                raise TypeError
            weight = float(weight)
        except (TypeError, ValueError):
            problems.append(
                ProfileError(source, "reward_weights", f"{shown(weight)} is not a number", "give one number per reward")
            )
            continue
        out[ours] = out.get(ours, 0.0) + weight
        named.setdefault(ours, []).append(name)
    if problems:
        raise RecipeProblems(source, problems)
    notes = [
        f"{' and '.join(entries)} are one reward here ({ours}): weights summed to {out[ours]:g}, as TRL adds them"
        for ours, entries in named.items()
        if len(entries) > 1
    ]
    return out, notes


def translate_rewards(data: dict, source: str, context: dict, out: dict, readings: list[Reading]) -> None:
    if "rewards" in data:
        other = "reward_funcs" if "reward_funcs" in data else "reward_weights"
        raise ProfileError(
            source,
            other,
            f"'rewards' and '{other}' say the same setting twice, in two spellings",
            "keep one of them (the project's name is rewards)",
        )
    if not any(
        key in source_keys for key in ("reward_funcs", "reward_model_name_or_path") for source_keys in (data, context)
    ):
        raise ProfileError(
            source,
            "reward_weights",
            "reward_weights without reward_funcs"
            + (" (the file names its rewards as rewards: {name: weight})" if "rewards" in context else ""),
            "give reward_funcs too, or write rewards: {name: weight}"
            + (" (--set rewards={accuracy: 2.0, ...})" if source == "--set" else ""),
        )
    out["rewards"], merged = _rewards(data, source, context)
    funcs = data.get("reward_funcs", context.get("reward_funcs")) or ()
    if merged:
        note = "; ".join(merged)
    elif set([funcs] if isinstance(funcs, str) else funcs) & {"format", "tag_count", *_TRL_FORMAT}:
        from rewards.parse import THINK_LAYOUT, asked_layout

        system_prompt = data.get("system_prompt", context.get("system_prompt"))
        note = (
            "the format rewards (open-r1's format / tag_count, TRL's think_format_reward) score the <think>/<answer> "
            "layout its system_prompt asks for"
            if asked_layout(system_prompt) == THINK_LAYOUT
            else "the format rewards (open-r1's format / tag_count, TRL's think_format_reward) check the "
            "<reasoning>/<answer> layout the system_prompt asks for here"
        )
    elif "reward_weights" in data or "reward_weights" in context:
        note = "with reward_weights"
    else:
        note = "weights 1.0, as TRL's"
    names = [funcs] if isinstance(funcs, str) else list(funcs)
    verified = list(dict.fromkeys(name for name in names if OPEN_R1_REWARDS.get(name) == "math"))
    if verified:
        note += f"; {' and '.join(verified)} verify LaTeX answers with math-verify, as `math` here"
        if "correctness" not in data and "correctness" not in context and "accuracy" not in out["rewards"]:
            # the before/after evaluation judges by the recipe's own accuracy, not the project's number match
            out["correctness"] = "math"
            note += " (and correctness: math)"
    if any(name in _TRL_LENGTH for name in names):
        from rewards.length import REGISTRY_CACHE_TOKENS, REGISTRY_MAX_TOKENS

        free = REGISTRY_MAX_TOKENS - REGISTRY_CACHE_TOKENS
        note += (
            f"; get_soft_overlong_punishment at TRL's registry's lengths, as soft_overlong: 0 up to {free:,} tokens, "
            f"falling to -1 at {REGISTRY_MAX_TOKENS:,}"
        )
        cap = data.get("max_completion_length", context.get("max_completion_length"))
        if isinstance(cap, int) and not isinstance(cap, bool) and cap <= free:
            note += f" (with max_completion_length {cap} it scores 0 for every completion, as in TRL)"
    runs = [name for name in ("binary_code", "code") if name in out["rewards"]]
    if runs and not verified and "correctness" not in data and "correctness" not in context:
        # an answer is right when its program passes every test (open-r1's binary_code), not by a number
        out["correctness"] = "binary_code"
        note += "; correctness: binary_code (a program right when it passes every test case)"
    readings.append(Reading("reward_funcs", RENAMED, "rewards", out["rewards"], note))
