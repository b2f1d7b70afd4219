"""The accuracy reward: does the number in the <answer> block equal the gold answer?"""

from __future__ import annotations

import math

from rewards.parse import as_batch, completion_text, extract_answer, parse_number

# Loose enough for money written with cents ("1000.00"), tight enough that no two different answers
# a GSM8K-style problem can have compare equal.
REL_TOL = 1e-9
ABS_TOL = 1e-9


def same_number(predicted: float | None, gold: float | None) -> bool:
    """Whether two parsed numbers are the same answer (None never matches)."""
    if predicted is None or gold is None:
        return False
    return math.isclose(predicted, gold, rel_tol=REL_TOL, abs_tol=ABS_TOL)


def gold_number(gold: object) -> float | None:
    """The number a gold answer states ("72", 72, " 1,000 "), or None."""
    return parse_number(gold.strip() if isinstance(gold, str) else gold)


def states_number(completion: object, gold: float | None) -> bool:
    """Whether the completion's <answer> block states the parsed gold number."""
    text = completion_text(completion)
    predicted = parse_number(extract_answer(text)) if text is not None else None
    return same_number(predicted, gold)


def is_correct(completion: object, gold: object) -> bool:
    """The one definition of a correct answer, shared by the accuracy reward and evaluation: the number in
    the completion's last complete <answer> block equals the gold answer's (see `accuracy`)."""
    return states_number(completion, gold_number(gold))


def _golds(answer: object, count: int) -> list:
    """The gold value for each of count completions: a list is aligned with them (missing entries are
    None), a single value applies to all."""
    if answer is None:
        return [None] * count
    if isinstance(answer, (list, tuple)):
        golds = list(answer[:count])
        return golds + [None] * (count - len(golds))
    return [answer] * count


def accuracy(completions=None, answer=None, **kwargs) -> list[float]:
    """1.0 when the number in the <answer> block equals the gold `answer` as a number, else 0.0.

    `$1,000`, `1000` and `1000.00` are equal, as are `.5` and `0.5`; units, currency and words around the
    number do not matter ("72 dollars" is right for 72); when the block states several numbers the last
    one outside parentheses counts ("8 x 9 = 72", "72 (9 x 8)"; see rewards.parse.parse_number).
    Numbers compare with relative and absolute tolerance 1e-9. A completion without a complete
    <answer>...</answer> block, or without a gold answer, scores 0.0. `answer` is the dataset column
    (one gold per completion, e.g. "72") or a single gold for all.
    """
    try:
        batch = as_batch(completions)
        golds = _golds(answer, len(batch))
    except Exception:
        return []
    parsed_golds: dict = {}
    scores = []
    for completion, gold in zip(batch, golds):
        try:
            key = gold if type(gold) in (str, int, float) else None  # bool hashes like 1
            if key in parsed_golds:
                expected = parsed_golds[key]
            else:
                expected = gold_number(gold)
                if key is not None:
                    parsed_golds[key] = expected
            scores.append(1.0 if states_number(completion, expected) else 0.0)
        except Exception:  # a reward must never stop training: an unreadable completion is simply wrong
            scores.append(0.0)
    return scores
