"""HOW LONG completions are planned: the cap the task needs (memory is planned at it) and the length a
completion is expected to run (time is planned at it), from the task's reference solutions under the model's
tokenizer (tasks.lengths gives the characters, profiles.catalog.chars_per_token the tokenizer's rate).

A model's worked solution runs longer than the terse reference: published GRPO runs on GSM8K log mean
completions of 157-203 tokens (docs/planning.md) against reference solutions of 69-85 tokens under the same
tokenizers, about 2.5 times. The cap the task needs is that ratio on the 99th percentile of the references,
with a quarter more as margin, rounded up to CAP_STEP tokens; the expected length is the ratio on their mean.
Data whose answers are not worked solutions (or that cannot be read at plan time) takes DEFAULT_CAP and half
of it as the expected length. A pinned max_completion_length or a set expected_completion_length wins.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from launcher.plan.turns import TurnPlan, turn_plan
from profiles.catalog import Architecture, chars_per_token
from tasks.lengths import SHIPPED, reference_lengths

WORKED_SOLUTION_RATIO = 2.5  # a model's worked solution, in tokens, over the reference solution's
FORMAT_TOKENS = 24  # the <reasoning> and <answer> tags around it and the answer line
CAP_MARGIN = 1.25  # on the 99th percentile
CAP_STEP = 128
DEFAULT_CAP = 1024  # data without worked solutions: a stated default
DEFAULT_EXPECTED_SHARE = 0.5  # ... and half of it expected
TEMPLATE_TOKENS = 24  # a chat template's role markers around the system and user turns
PROMPT_SHARE_UNKNOWN = 0.75  # prompts of data not read at plan time: this share of max_prompt_length


@dataclass(frozen=True)
class CompletionPlan:
    cap: int  # tokens: the completion cap the task needs (or the pinned one)
    expected: int  # tokens a completion is expected to run on average
    prompt_expected: int  # tokens a prompt is expected to take (its cap is max_prompt_length)
    basis: str  # where the figures come from, in words
    turns: TurnPlan | None = None  # with tools: the turns assumed (launcher.plan.turns), in cap and expected

    def to_json(self) -> dict:
        out = {
            "cap": self.cap,
            "expected": self.expected,
            "prompt_expected": self.prompt_expected,
            "basis": self.basis,
        }
        if self.turns is not None:
            out["turns"] = self.turns.to_json()
        return out


@lru_cache(maxsize=64)
def _reference(dataset: str, answer_field: str, question_field: str):
    return reference_lengths(dataset, answer_field, question_field)


def completion_plan(profile, arch: Architecture, pinned=()) -> CompletionPlan:
    """The cap and expected length of `profile`'s completions on its task with `arch`'s tokenizer. `pinned`:
    the keys the user set (a pinned max_completion_length is the cap)."""
    rate, tokenizer = chars_per_token(arch)
    ref = _reference(profile.dataset, profile.answer_field or "", profile.question_field or "")
    usable = ref is not None and (ref.task in SHIPPED or ref.worked)
    if usable:
        need = CAP_MARGIN * (WORKED_SOLUTION_RATIO * ref.answer_p99_chars / rate + FORMAT_TOKENS)
        cap = max(CAP_STEP, math.ceil(need / CAP_STEP) * CAP_STEP)
        expected = WORKED_SOLUTION_RATIO * ref.answer_mean_chars / rate + FORMAT_TOKENS
        basis = (
            f"{ref.task}: reference solutions of {ref.answer_mean_chars:.0f} characters on average, "
            f"{ref.answer_p99_chars:.0f} at the 99th percentile, at {rate:g} characters a token ({tokenizer} "
            f"tokenizer, an estimate), x{WORKED_SOLUTION_RATIO:g} for a worked solution"
        )
    else:
        cap = DEFAULT_CAP
        expected = DEFAULT_EXPECTED_SHARE * cap
        basis = (
            f"{profile.dataset}: "
            + ("its answers are not worked solutions" if ref is not None else "not readable at plan time")
            + f"; the default cap {DEFAULT_CAP} tokens, half of it expected"
        )
    turns = turn_plan(profile, rate)
    if turns is not None:  # the calls and the replies share the completion's tokens with the answer
        cap = math.ceil((cap + turns.extra_tokens) / CAP_STEP) * CAP_STEP
        expected += turns.extra_tokens
        basis += f"; with tools: {turns.basis}"
    if "max_completion_length" in pinned:
        cap = profile.max_completion_length
        basis += f"; the cap pinned at {cap}"
    if profile.expected_completion_length:
        expected = profile.expected_completion_length
        basis += f"; expected length set to {expected}"
    expected = max(1, min(int(round(expected)), cap))
    if ref is not None and ref.question_mean_chars:
        chars = ref.question_mean_chars + len(profile.system_prompt or "")
        prompt = min(profile.max_prompt_length, int(round(chars / rate + TEMPLATE_TOKENS)))
    else:  # prompts not known: three quarters of their cap
        prompt = int(PROMPT_SHARE_UNKNOWN * profile.max_prompt_length)
    if turns is not None:  # TRL renders the tools into every prompt
        prompt = min(profile.max_prompt_length, prompt + turns.schema_tokens)
    return CompletionPlan(int(cap), expected, max(prompt, 1), basis, turns)


def expected_length(profile, arch: Architecture) -> int:
    """Tokens a completion of `profile` is expected to run, at most its cap: the profile's own
    expected_completion_length when set, else the task's."""
    plan = completion_plan(profile, arch)
    return min(plan.expected, profile.max_completion_length)
