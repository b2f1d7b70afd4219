"""The `math` reward: is a LaTeX answer (MATH-style `\\boxed{}`) mathematically equal to the gold one?

Uses the math-verify package, imported on first use (it pulls sympy and an ANTLR parser: the planner never
needs it). `1/2`, `\\frac{1}{2}`, `0.5` and `\\boxed{\\dfrac12}` are the same answer; so are `x=2` and `2`
where the gold is 2.
"""

from __future__ import annotations

import re

from rewards.parse import MAX_COMPLETION_CHARS, as_batch, completion_text, extract_answer

_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
# math-verify times out parsing with an alarm signal, which only the main thread may set; off elsewhere.
PARSE_TIMEOUT_S = 5


def _timeout() -> int | None:
    import threading

    return PARSE_TIMEOUT_S if threading.current_thread() is threading.main_thread() else None


def _as_latex(text: str) -> str:
    """math-verify reads LaTeX inside $...$ or a \\boxed{}; a bare gold such as `\\frac{1}{2}` gets the $ it lacks."""
    stripped = text.strip()
    if "$" in stripped or _BOXED.search(stripped) or "\\(" in stripped or "\\[" in stripped:
        return stripped
    return f"${stripped}$"


# An answer longer than this is no final answer; the cap keeps math-verify's parser fast on runaway text.
MAX_ANSWER_CHARS = 1000
TAIL_CHARS = 300


def predicted_text(completion_text_: str) -> str:
    """What the model answered: the <answer> block when there is one, else the text from the last
    \\boxed{} on, else the completion's tail (math-verify reads the last answer it finds there)."""
    block = extract_answer(completion_text_)
    if block:
        return _as_latex(block)
    boxes = list(_BOXED.finditer(completion_text_))
    return completion_text_[boxes[-1].start() :] if boxes else completion_text_[-TAIL_CHARS:]


def math(completions=None, answer=None, **kwargs) -> list[float]:
    """1.0 when the answer (the <answer> block, else the last \\boxed{}) equals the LaTeX gold `answer`."""
    try:
        from math_verify import parse, verify
    except ImportError as exc:  # the profile loader refuses the reward without the package; belt and braces
        raise RuntimeError("the `math` reward needs the math-verify package (pip install math-verify)") from exc
    batch = as_batch(completions)
    golds = answer if isinstance(answer, (list, tuple)) else [answer] * len(batch)
    timeout = _timeout()
    scores = []
    cache: dict[str, list] = {}
    for completion, gold in zip(batch, list(golds) + [None] * (len(batch) - len(golds))):
        try:
            text = completion_text(completion)
            if gold is None or text is None or len(text) > MAX_COMPLETION_CHARS:
                scores.append(0.0)
                continue
            key = str(gold)
            if key not in cache:
                cache[key] = parse(_as_latex(key), parsing_timeout=timeout)
            answer_text = predicted_text(text)
            if len(answer_text) > MAX_ANSWER_CHARS or len(key) > MAX_ANSWER_CHARS:
                scores.append(0.0)
                continue
            predicted = parse(answer_text, parsing_timeout=timeout)
            scores.append(
                1.0 if cache[key] and predicted and verify(cache[key], predicted, timeout_seconds=timeout) else 0.0
            )
        except Exception:  # a reward never stops training: what cannot be read is wrong
            scores.append(0.0)
    return scores
