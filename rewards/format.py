"""Format rewards: does a completion use the layout the system prompt asks for? The project's own
`<reasoning>` / `<answer>` (xml_strict, xml_soft, xml_count), or the `<think>` / `<answer>` of DeepSeek-R1 and
open-r1's recipes (think_format, think_count: open-r1's `format` and `tag_count`).

Each scores in [0, 1], 1.0 at full marks, so that the weights a profile gives them are comparable.
"""

from __future__ import annotations

import re

from rewards.parse import (
    ANSWER_CLOSE,
    ANSWER_OPEN,
    REASONING_CLOSE,
    REASONING_LAYOUT,
    REASONING_OPEN,
    TAGS,
    THINK_CLOSE,
    THINK_LAYOUT,
    THINK_OPEN,
    find_numbers,
    score_texts,
)
from rewards.parse import extract_answer as _extract_answer

_STRICT_START = REASONING_OPEN + "\n"
_STRICT_MIDDLE = "\n" + REASONING_CLOSE + "\n" + ANSWER_OPEN + "\n"
_STRICT_END = "\n" + ANSWER_CLOSE

TAG_CREDIT = 0.25
TRAILING_PENALTY_PER_CHAR = 0.001


def _each_tag_once(text: str) -> bool:
    return all(text.count(tag) == 1 for tag in TAGS)


def _strict_score(text: str) -> float:
    if not text.startswith(_STRICT_START):
        return 0.0
    body = text[:-1] if text.endswith("\n") else text
    if not body.endswith(_STRICT_END) or not _each_tag_once(text):
        return 0.0
    middle = text.find(_STRICT_MIDDLE)
    if middle < 0:
        return 0.0
    reasoning = text[len(_STRICT_START) : middle]
    answer = text[middle + len(_STRICT_MIDDLE) : len(body) - len(_STRICT_END)]
    return 1.0 if reasoning.strip() and answer.strip() else 0.0


def _soft_score(text: str) -> float:
    if not _each_tag_once(text):
        return 0.0
    r_open, r_close = text.find(REASONING_OPEN), text.find(REASONING_CLOSE)
    a_open, a_close = text.find(ANSWER_OPEN), text.find(ANSWER_CLOSE)
    if not r_open < r_close < a_open < a_close:
        return 0.0
    outside = (text[:r_open], text[r_close + len(REASONING_CLOSE) : a_open], text[a_close + len(ANSWER_CLOSE) :])
    if any(part.strip() for part in outside):
        return 0.0
    reasoning = text[r_open + len(REASONING_OPEN) : r_close]
    answer = text[a_open + len(ANSWER_OPEN) : a_close]
    return 1.0 if reasoning.strip() and answer.strip() else 0.0


def _count_score(text: str) -> float:
    # Position of each tag that appears exactly once; the others earn nothing and constrain nothing.
    positions = [text.find(tag) if text.count(tag) == 1 else -1 for tag in TAGS]
    score = 0.0
    for i, position in enumerate(positions):
        if position < 0:
            continue
        before_ok = all(p < position for p in positions[:i] if p >= 0)
        after_ok = all(p > position for p in positions[i + 1 :] if p >= 0)
        if before_ok and after_ok:
            score += TAG_CREDIT
    close = text.rfind(ANSWER_CLOSE)
    if close >= 0:
        trailing = len(text[close + len(ANSWER_CLOSE) :].strip())
        score -= TRAILING_PENALTY_PER_CHAR * trailing
    return round(max(score, 0.0), 6)


def _number_score(text: str) -> float:
    answer = _extract_answer(text)
    if not answer:
        return 0.0
    return 1.0 if len(find_numbers(answer)) == 1 else 0.0


def xml_strict(completions=None, answer=None, **kwargs) -> list[float]:
    """1.0 when the whole completion is exactly <reasoning>\\n...\\n</reasoning>\\n<answer>\\n...\\n</answer>, else 0.0.

    One optional trailing newline is allowed; the reasoning may span several lines. Each of the four tags
    appears exactly once and both blocks hold some non-blank text. Anything else (leading or trailing
    text, other spacing) scores 0.0.
    """
    return score_texts(completions, _strict_score)


def xml_soft(completions=None, answer=None, **kwargs) -> list[float]:
    """1.0 when the completion is a <reasoning> block then an <answer> block with any whitespace around them, else 0.0.

    Each tag appears exactly once, both blocks hold some non-blank text, and nothing but whitespace lies
    before, between or after the blocks.
    """
    return score_texts(completions, _soft_score)


def xml_count(completions=None, answer=None, **kwargs) -> list[float]:
    """Partial credit: 0.25 per tag present once and in order, minus 0.001 per character after </answer> (0 to 1).

    The four tags are <reasoning>, </reasoning>, <answer>, </answer>. A tag earns 0.25 when it appears
    exactly once and lies in the right order relative to every other tag that appears exactly once; a tag
    earns this even when the others are missing, so a model that has learned one tag already scores.
    Text after the last </answer> (surrounding whitespace aside) costs 0.001 per character; the score
    never goes below 0.0 and is rounded to 6 decimals.
    """
    return score_texts(completions, _count_score)


def number(completions=None, answer=None, **kwargs) -> list[float]:
    """1.0 when the <answer> block states exactly one number (units, currency, % and words allowed), else 0.0.

    "72", "$1,000", "-3", ".5", "1/2" and "72 dollars" score 1.0; an empty or missing block, "seventy",
    and "3 apples and 4" (two numbers) score 0.0. See rewards.parse for what counts as a number.
    """
    return score_texts(completions, _number_score)


# <think>, then the answer: each tag on a line of its own (open-r1's format), the blocks apart by whitespace (a
# thinking chat template, Qwen3's, ends its block with a blank line)
_THINK_STRICT = re.compile(
    re.escape(THINK_OPEN)
    + r"\n.*?\n"
    + re.escape(THINK_CLOSE)
    + r"\s*"
    + re.escape(ANSWER_OPEN)
    + r"\n.*?\n"
    + re.escape(ANSWER_CLOSE),
    re.DOTALL,
)
# open-r1's tag count: each of these pieces present exactly once earns a quarter
_THINK_PIECES = (THINK_OPEN + "\n", "\n" + THINK_CLOSE + "\n", "\n" + ANSWER_OPEN + "\n", "\n" + ANSWER_CLOSE)


def _think_strict_score(text: str) -> float:
    body = text[:-1] if text.endswith("\n") else text
    return 1.0 if _THINK_STRICT.fullmatch(body) else 0.0


def _think_count_score(text: str) -> float:
    return round(sum((TAG_CREDIT for piece in _THINK_PIECES if text.count(piece) == 1), 0.0), 6)


def think_format(completions=None, answer=None, **kwargs) -> list[float]:
    """1.0 when the whole completion is <think>\\n...\\n</think>\\n<answer>\\n...\\n</answer> (open-r1's format reward), else 0.0.

    One optional trailing newline is allowed; the blocks may span several lines, and any whitespace may lie
    between them (a thinking chat template ends its block with a blank line). For a system prompt that asks
    for the <think>/<answer> layout (DeepSeek-R1's, open-r1's recipes).
    """
    return score_texts(completions, _think_strict_score)


def think_count(completions=None, answer=None, **kwargs) -> list[float]:
    """Partial credit, open-r1's tag count: 0.25 for each of <think>\\n, \\n</think>\\n, \\n<answer>\\n and \\n</answer> present once (0 to 1).

    For a system prompt that asks for the <think>/<answer> layout.
    """
    return score_texts(completions, _think_count_score)


# The layout each format reward scores (rewards.parse.asked_layout reads the one a system prompt asks for)
FORMAT_LAYOUTS = {
    "xml_strict": REASONING_LAYOUT,
    "xml_soft": REASONING_LAYOUT,
    "xml_count": REASONING_LAYOUT,
    "think_format": THINK_LAYOUT,
    "think_count": THINK_LAYOUT,
    "code_format": THINK_LAYOUT,  # open-r1's: the program inside <answer>, after <think>
}
# For each layout, the reward whose full score counts an answer as well formed (evaluation's well_formed)
WELL_FORMED = {REASONING_LAYOUT: "xml_soft", THINK_LAYOUT: "think_format"}
