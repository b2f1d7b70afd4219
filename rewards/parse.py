"""Reading completions: their text, the <answer> block, the number an answer states, and the batch
convention every reward shares (one float per completion, never an error).

Shared by the rewards and by evaluation. Nothing here raises on odd input: what cannot be read is None.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable

# Completions longer than this are not inspected (they score 0): a runaway generation is not an answer,
# and the cap keeps every reward fast whatever the input.
MAX_COMPLETION_CHARS = 100_000

REASONING_OPEN = "<reasoning>"
REASONING_CLOSE = "</reasoning>"
ANSWER_OPEN = "<answer>"
ANSWER_CLOSE = "</answer>"
TAGS = (REASONING_OPEN, REASONING_CLOSE, ANSWER_OPEN, ANSWER_CLOSE)
THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
THINK_TAGS = (THINK_OPEN, THINK_CLOSE, ANSWER_OPEN, ANSWER_CLOSE)

# The answer layouts a system prompt may ask for, by the tag that opens the reasoning: the project's own, and the
# one of DeepSeek-R1 and open-r1's recipes (which a thinking chat template writes too)
REASONING_LAYOUT = "<reasoning>/<answer>"
THINK_LAYOUT = "<think>/<answer>"
LAYOUT_OPENERS = {REASONING_LAYOUT: REASONING_OPEN, THINK_LAYOUT: THINK_OPEN}


def asked_layout(text: object) -> str | None:
    """The answer layout a system prompt asks for: the one whose opening tag it names alone; None when it names
    neither (or both)."""
    if not isinstance(text, str):
        return None
    named = [layout for layout, tag in LAYOUT_OPENERS.items() if tag in text]
    return named[0] if len(named) == 1 else None


# One number as people write it in an answer: an optional sign written right before it (a sign after a
# word or a digit is an operator, so "5-3" reads 5 and 3), an optional currency sign, digits with or
# without thousands commas, an optional decimal part (or a bare ".5"), and an optional "/denominator" for
# a simple fraction, or an exponent ("1e-05", "2.5E+3": how Python, spreadsheets and many datasets write
# small and large numbers). A number glued to a letter, a digit or a caret before it ("m2", "cm^2", "CO2")
# is part of a name or a unit, not a number.
_NUMBER = re.compile(
    r"(?<![\w^.])"
    r"(?P<sign>[-+\u2212]?)"
    r"(?:[$\u00a3\u20ac\u00a5]\s?(?P<sign2>[-\u2212]?))?"
    r"(?:(?P<int>[0-9]{1,3}(?:,[0-9]{3})+(?![0-9])|[0-9]+)(?:\.(?P<frac>[0-9]+))?|\.(?P<bare>[0-9]+))"
    r"(?:[eE](?P<exp>[-+\u2212]?[0-9]+))?"
    r"(?:/(?P<den>[0-9]+)(?!\.?[0-9]))?"
)
_HAS_DIGIT = re.compile(r"\d")
_PARENTHESES = re.compile(r"\([^()]*\)")


def completion_text(completion: object) -> str | None:
    """The text of one completion, or None when it has none that can be scored.

    Accepts a plain string, a conversational completion (a list of messages such as
    `[{"role": "assistant", "content": "..."}]`, where the assistant messages are joined) or one message
    dict. Content given as a list of parts keeps the text parts. Non-strings, text holding NUL characters
    (binary data) and text longer than MAX_COMPLETION_CHARS give None.
    """
    if isinstance(completion, str):
        text = completion
    elif isinstance(completion, dict):
        text = _message_text(completion)
    elif isinstance(completion, (list, tuple)):
        parts, total = [], 0
        for message in completion:
            if isinstance(message, dict):
                if message.get("role", "assistant") != "assistant":
                    continue
                part = _message_text(message)
            elif isinstance(message, str):
                part = message
            else:
                part = None
            if part is None:
                return None
            parts.append(part)
            total += len(part)
            if total > MAX_COMPLETION_CHARS:
                return None
        if not parts:
            return None
        text = parts[0] if len(parts) == 1 else "".join(parts)
    else:
        return None
    if text is None:
        return None
    if len(text) > MAX_COMPLETION_CHARS or "\x00" in text:
        return None
    return text


def _message_text(message: dict) -> str | None:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                texts.append(part["text"])
            else:
                return None
        return "".join(texts)
    return None


def extract_answer(text: object) -> str | None:
    """The content of the last complete `<answer>...</answer>` block, stripped; None when there is none.

    Takes a completion in any form completion_text accepts.
    """
    if not isinstance(text, str):
        text = completion_text(text)
        if text is None:
            return None
    elif len(text) > MAX_COMPLETION_CHARS or "\x00" in text:
        return None
    close = text.rfind(ANSWER_CLOSE)
    if close < 0:
        return None
    start = text.rfind(ANSWER_OPEN, 0, close)
    if start < 0:
        return None
    return text[start + len(ANSWER_OPEN) : close].strip()


def find_numbers(text: str) -> list[float]:
    """Every number stated in text, in order (see _NUMBER for what counts as one)."""
    numbers = []
    for match in _NUMBER.finditer(text):
        value = _match_value(match)
        if value is not None:
            numbers.append(value)
    return numbers


def parse_number(text: object) -> float | None:
    """The number an answer states, or None.

    `$1,000`, `1000` and `1000.00` all read 1000.0; `-3` reads -3.0; `.5` and `0.5` read 0.5; `1/2`
    reads 0.5; `72 dollars`, `72%` and `x = 72` read 72.0. When the text states several numbers the last
    one counts ("8 x 9 = 72" reads 72, and so does "3 apples and 72"), as GSM8K evaluations do; numbers
    inside parentheses count only when there is none outside them ("72 (9 x 8)" reads 72, "(-3)" reads -3).
    Ints and floats pass through; anything else (None, bytes, text without digits) gives None.
    """
    if isinstance(text, bool):
        return None
    if isinstance(text, (int, float)):
        try:
            value = float(text)
        except OverflowError:
            return None
        return value if math.isfinite(value) else None
    if not isinstance(text, str) or len(text) > MAX_COMPLETION_CHARS or not _HAS_DIGIT.search(text):
        return None
    if "(" in text:
        # An aside such as "(9 x 8)" explains the answer; it does not replace it.
        outside = _PARENTHESES.sub(" ", text)
        if outside != text:
            value = _last_number(outside)
            if value is not None:
                return value
    return _last_number(text)


def _last_number(text: str) -> float | None:
    last = None
    for match in _NUMBER.finditer(text):
        value = _match_value(match)
        if value is not None:
            last = value
    return last


def _match_value(match: re.Match) -> float | None:
    whole, frac, bare, exp, den = match.group("int", "frac", "bare", "exp", "den")
    if bare is not None:
        text = "0." + bare
    elif frac is not None:
        text = whole.replace(",", "") + "." + frac
    else:
        text = whole.replace(",", "")
    if exp is not None:  # read by float itself, so "1e-05" is exactly the float Python writes for 0.00001
        text += "e" + exp.replace("\u2212", "-")
    value = float(text)
    if den is not None:
        denominator = float(den)
        if whole is None or frac is not None or exp is not None or denominator == 0:
            return None  # "1.5/2", "1e3/2" or "3/0" is no fraction people write as an answer
        value /= denominator
    if match.group("sign") in ("-", "\u2212") or match.group("sign2") in ("-", "\u2212"):
        value = -value
    return value if math.isfinite(value) else None


def as_batch(completions: object) -> list:
    """The completions of one call as a list. A bare string is a batch of one; None or an object that is
    not a sequence is an empty batch."""
    if completions is None:
        return []
    if isinstance(completions, (str, bytes, dict)):
        return [completions]
    if isinstance(completions, list):
        return completions
    if isinstance(completions, Iterable):
        try:
            return list(completions)
        except Exception:
            return []
    return []


def score_texts(completions: object, score: Callable[[str], float]) -> list[float]:
    """Apply score to the text of each completion; a completion without readable text, or one whose
    scoring fails for any reason, scores 0.0."""
    scores = []
    for completion in as_batch(completions):
        text = completion_text(completion)
        if text is None:
            scores.append(0.0)
            continue
        try:
            scores.append(score(text))
        except Exception:  # a reward must never stop training: an unreadable completion is simply wrong
            scores.append(0.0)
    return scores
