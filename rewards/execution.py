"""Code rewards: does the program in a completion pass the row's test cases, and is it laid out as asked?
open-r1's `code`, `binary_code` and `code_format`, reading its data layout:

    verification_info = {"language": "python",
                         "test_cases": [{"type": "stdin_stdout", "input": "1 2\\n", "output": "3\\n"}, ...]}

(a dict, or the same as a JSON string). The program is the last ```python fenced block of the completion; it
runs once per test case with the case's input on stdin, in the local sandbox (rewards.sandbox) or, where the
environment variable GRPO_CODE_SANDBOX_URL names a Piston server, there. A test passes when the run exits with
status 0 and its stdout equals the expected output line by line, each line stripped.
"""

from __future__ import annotations

import json
import os
import re
from typing import TYPE_CHECKING

from contract.environment import ENV_CODE_SANDBOX_URL
from rewards.parse import ANSWER_CLOSE, ANSWER_OPEN, THINK_CLOSE, THINK_OPEN, as_batch, completion_text

if TYPE_CHECKING:
    from rewards.sandbox import Limits

SANDBOX_URL_ENV = ENV_CODE_SANDBOX_URL
# open-r1's binary_code: full marks only when (nearly) every test passes
BINARY_THRESHOLD = 0.99
DEFAULT_LANGUAGE = "python"
# The languages the local sandbox runs; any other needs a Piston server
LOCAL_LANGUAGES = ("python", "python3", "py")
STDIN_STDOUT = "stdin_stdout"
# The limits of each run (rewards.sandbox.Limits' defaults where None)
LIMITS: Limits | None = None
# How many runs at once (os.cpu_count() where None)
WORKERS: int | None = None
# A language name as it may follow ``` (it goes into a pattern)
_LANGUAGE = re.compile(r"[A-Za-z0-9_+#.-]{1,32}")


def extract_code(text: object, language: str = DEFAULT_LANGUAGE) -> str:
    """The body of the last ```<language> fenced block of a completion (open-r1's extract_code); "" when there
    is none or the completion cannot be read."""
    if not isinstance(text, str):
        text = completion_text(text)
    if not isinstance(text, str) or not isinstance(language, str) or not _LANGUAGE.fullmatch(language):
        return ""
    blocks = re.findall(r"```" + re.escape(language) + r"\n(.*?)```", text, re.DOTALL)
    return blocks[-1] if blocks else ""


def read_verification_info(info: object) -> tuple[str, list[tuple[str, str] | None]] | None:
    """The language and the (input, expected output) test cases of one row's verification_info; None when it
    cannot be read. A case of another type than stdin_stdout, or one without text input and output, is None
    (it counts as failed: this runner only feeds stdin and reads stdout)."""
    if isinstance(info, (str, bytes)):
        try:
            info = json.loads(info)
        except (ValueError, TypeError):
            return None
    if not isinstance(info, dict):
        return None
    language = info.get("language", DEFAULT_LANGUAGE)
    cases = info.get("test_cases")
    if not isinstance(language, str) or not _LANGUAGE.fullmatch(language):
        return None
    if isinstance(cases, str):
        try:
            cases = json.loads(cases)
        except ValueError:
            return None
    if not isinstance(cases, list) or not cases:
        return None
    tests: list[tuple[str, str] | None] = []
    for case in cases:
        if (
            isinstance(case, dict)
            and case.get("type", STDIN_STDOUT) in (STDIN_STDOUT, None)
            and isinstance(case.get("input"), str)
            and isinstance(case.get("output"), str)
        ):
            tests.append((case["input"], case["output"]))
        else:
            tests.append(None)
    return language, tests


def outputs_match(actual: str, expected: str) -> bool:
    """Whether a program's stdout is the expected output: the same lines, each compared stripped, leading and
    trailing blank lines ignored. (open-r1 compares the lines pairwise with zip, so a program that prints only
    the first lines of the answer passes there; here the line counts must agree too.)"""
    got = [line.strip() for line in actual.strip().split("\n")]
    want = [line.strip() for line in expected.strip().split("\n")]
    return got == want


def _per_row(values: object, count: int) -> list:
    """A column as TRL passes it (one value per completion), or one value for every completion."""
    if isinstance(values, (list, tuple)):
        return [values[i] if i < len(values) else None for i in range(count)]
    return [values] * count


def _pass_rates(completions: object, verification_info: object) -> list[float]:
    # Imported here: the sandbox pulls in subprocess, selectors and urllib, which the other rewards never need
    from rewards.piston import Piston
    from rewards.sandbox import OK, Limits, run_many

    batch = as_batch(completions)
    infos = _per_row(verification_info, len(batch))
    url = os.environ.get(SANDBOX_URL_ENV, "").strip()
    # language -> [(row, program, stdin, expected output)]
    jobs: dict[str, list[tuple[int, str, str, str]]] = {}
    totals = [0] * len(batch)
    for row, (completion, info) in enumerate(zip(batch, infos)):
        parsed = read_verification_info(info)
        if parsed is None:
            continue
        language, tests = parsed
        totals[row] = len(tests)
        if not url and language.lower() not in LOCAL_LANGUAGES:
            continue
        # A Python row's block is ```python whatever the row calls the language (open-r1 reads only that tag)
        program = extract_code(completion, DEFAULT_LANGUAGE if language.lower() in LOCAL_LANGUAGES else language)
        if not program.strip():
            continue
        for test in tests:
            if test is not None:
                jobs.setdefault(language, []).append((row, program, test[0], test[1]))
    passed = [0] * len(batch)
    for language, items in jobs.items():
        runner = Piston(url, language=language) if url else None
        runs = run_many(
            [(program, stdin) for _, program, stdin, _ in items], LIMITS or Limits(), runner=runner, workers=WORKERS
        )
        for (row, _, _, expected), run in zip(items, runs):
            if run.status == OK and outputs_match(run.stdout, expected):
                passed[row] += 1
    return [passed[row] / totals[row] if totals[row] else 0.0 for row in range(len(batch))]


def _safe_pass_rates(completions: object, verification_info: object) -> list[float]:
    try:
        return _pass_rates(completions, verification_info)
    except Exception:  # a reward must never stop training: whatever could not be scored scores 0
        return [0.0] * len(as_batch(completions))


def code(completions=None, verification_info=None, **kwargs) -> list[float]:
    """The share of the row's test cases the completion's last ```python block passes, 0 to 1 (open-r1's code).

    Needs a `verification_info` column (see the module docstring); a completion without a code block, a row
    without test cases, a program that fails to run, and anything unreadable score 0.0. Runs locally in
    rewards.sandbox, or on the Piston server GRPO_CODE_SANDBOX_URL names.
    """
    return _safe_pass_rates(completions, verification_info)


def binary_code(completions=None, verification_info=None, **kwargs) -> list[float]:
    """1.0 when the completion's program passes all of the row's test cases (a share above 0.99), else 0.0 (open-r1's binary_code).

    Reads the same `verification_info` as `code`.
    """
    return [1.0 if rate > BINARY_THRESHOLD else 0.0 for rate in _safe_pass_rates(completions, verification_info)]


def _format_score(text: str, language: str) -> float:
    """open-r1's code_format pattern, read with str.find instead of one regex of three lazy groups (which
    backtracks cubically on a long completion full of fences)."""
    body = text[:-1] if text.endswith("\n") else text
    head, answer_open, tail = THINK_OPEN + "\n", ANSWER_OPEN + "\n", "\n" + ANSWER_CLOSE
    if not body.startswith(head) or not body.endswith(tail):
        return 0.0
    end = len(body) - len(tail)
    close = body.find("\n" + THINK_CLOSE, len(head))
    while close >= 0:
        after = close + 1 + len(THINK_CLOSE)
        start = after + len(body[after:]) - len(body[after:].lstrip())
        if body.startswith(answer_open, start):
            # The first </think> followed by <answer> leaves the longest answer: if it holds no fenced block
            # of the language, no later split does.
            region = body[start + len(answer_open) : end] if start + len(answer_open) <= end else ""
            fence = region.find("```" + language)
            return 1.0 if fence >= 0 and region.find("```", fence + 3 + len(language)) >= 0 else 0.0
        close = body.find("\n" + THINK_CLOSE, close + 1)
    return 0.0


def _row_language(language: object, info: object) -> str:
    if isinstance(language, str) and _LANGUAGE.fullmatch(language):
        return language
    parsed = read_verification_info(info)
    return parsed[0] if parsed is not None else DEFAULT_LANGUAGE


def code_format(completions=None, verification_info=None, language=None, **kwargs) -> list[float]:
    """1.0 when the completion is <think>\\n...\\n</think> then <answer>\\n...\\n</answer> holding a ```python block, else 0.0 (open-r1's code_format).

    The fenced block's language is the row's: a `language` column where the dataset has one, else
    verification_info's language, else python. As think_format: one optional trailing newline, any whitespace
    between the blocks.
    """
    try:
        batch = as_batch(completions)
        languages = _per_row(language, len(batch))
        infos = _per_row(verification_info, len(batch))
        scores = []
        for completion, row_language, info in zip(batch, languages, infos):
            text = completion_text(completion)
            if text is None:
                scores.append(0.0)
                continue
            scores.append(_format_score(text, _row_language(row_language, info)))
        return scores
    except Exception:  # never raises, as every reward
        return [0.0] * len(as_batch(completions))
