"""The tiny model's warm start for the `programs` task: a short supervised pass on reference programs.

A random model never writes a program, so the code rewards never fire and GRPO learns nothing. Seeded
next-token training on generated problems (their own stream, every held-out question removed) teaches the
layout: the expression as reasoning, then the program in a ```python block as the answer. It stops while the
programs are still often wrong, so that GRPO has something to learn: from WARM_START_MIN_STEPS on, every
WARM_START_CHECK_EVERY steps it answers CHECK_ROWS check problems greedily and runs their programs in the
sandbox (the `binary_code` reward); it stops at the first BAND_CHECKS checks in a row where at least
READ_TARGET of the programs read the two integers and the share passing every test case is inside PASS_BAND.
The share passing swings between checks (0.28, 0.42, 0.28, 0.22, 0.62 at steps 100-180, seed 3407): the first
check inside the band stops it. At WARM_START_MAX_STEPS without one it takes back the checked weights nearest
the band.

The model learns the ten expressions one at a time, each for every pair of names at once: a held-out
expression mostly passes for all its problems or for none, so the pass rate counts the expressions learned. The band
is PASS_BAND, not lower, for what GRPO can do from there (docs/cpu-demo.md, the code demo): stopped at 0.3-0.5,
its programs sampled at temperature 0.7 pass about a third as often as its greedy ones, the groups differ mostly
in broken programs, and GRPO moved the held-out pass rate by -0.14 to +0.06 over the settings screened (seed 1,
from 0.39; temperature 1.0 took it to 0.00); stopped at 0.5-0.7, the samples are clean enough that the groups differ
in the expression, and GRPO completes expressions the warm start had in part.
"""

from __future__ import annotations

import re

from tasks import programs
from tiny_model.warm_start import Band, seeded_steps, train_to_band

WARM_START_MIN_STEPS = 60
WARM_START_MAX_STEPS = 600
WARM_START_CHECK_EVERY = 10
CHECK_ROWS = 60
CHECK_SEED = "warm-start check"
READ_TARGET = 0.9
PASS_BAND = (0.5, 0.7)
BAND_CHECKS = 1
WARM_START_BATCH = 32
WARM_START_LR = 2.0e-3
WARM_START_THREADS = 1  # one thread: sums in one order, so the build is the same on machines of a kind
HELDOUT_TOKENS = 64  # a completion is about 40 tokens: the reasoning line, the block and the tags
EXAMPLE_ROWS = 3
# A program that reads the two integers, under any names: the test cases see only stdin and stdout
READS_INPUT = re.compile(r"([A-Za-z_]\w*), ([A-Za-z_]\w*) = map\(int, input\(\)\.split\(\)\)")


def completion(row: dict) -> str:
    """The completion the code rewards give full marks: the expression as reasoning, the program as answer."""
    return f"<reasoning>\n{row['expression']}\n</reasoning>\n<answer>\n{programs.fenced(row['answer'])}\n</answer>"


def settings() -> dict:
    """Everything that decides the warm-started weights (part of the tiny model's build key)."""
    return {
        "task": "programs",
        "min_steps": WARM_START_MIN_STEPS,
        "max_steps": WARM_START_MAX_STEPS,
        "check_every": WARM_START_CHECK_EVERY,
        "check_rows": CHECK_ROWS,
        "check_seed": CHECK_SEED,
        "read_target": READ_TARGET,
        "pass_band": list(PASS_BAND),
        "band_checks": BAND_CHECKS,
        "batch": WARM_START_BATCH,
        "learning_rate": WARM_START_LR,
        "threads": WARM_START_THREADS,
        "tokens": HELDOUT_TOKENS,
    }


def _held_out_questions() -> set[str]:
    from tasks import load_task

    return {row["prompt"][-1]["content"] for row in load_task("programs", "test")}


def _check_problems() -> list[dict]:
    return programs.without(lambda drawn: programs.distinct(drawn, CHECK_SEED), CHECK_ROWS, _held_out_questions())


def training_rows(seed: int, count: int) -> list[dict]:
    """`count` problems of the warm start's own seeded stream, every held-out and check question removed (the
    check then reads what the model makes of questions it never saw, as the held-out split does)."""
    excluded = _held_out_questions() | {row["question"] for row in _check_problems()}
    return programs.without(lambda drawn: programs.generate(drawn, seed=f"warm-start {seed}"), count, excluded)


def check_rows() -> list[dict]:
    """The CHECK_ROWS distinct problems the stopping criterion reads, none of them held out."""
    from tasks.prompts import build_prompt

    return [{**row, "prompt": build_prompt(row["question"])} for row in _check_problems()]


def _switches(tokenizer) -> dict:
    from tasks.prompts import reads_thinking_switch, template_switches

    return template_switches({}, reads_thinking_switch(tokenizer))


def _examples(tokenizer, seed: int, count: int) -> list[tuple[list[int], list[int]]]:
    """(input ids, labels) per training problem; labels mask the prompt so only the answer is learned."""
    from tasks.prompts import build_prompt

    rendering = _switches(tokenizer)
    out = []
    for row in training_rows(seed, count):
        prompt = tokenizer.apply_chat_template(
            build_prompt(row["question"]), tokenize=False, add_generation_prompt=True, **rendering
        )
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        answer_ids = tokenizer(completion(row) + tokenizer.eos_token, add_special_tokens=False)["input_ids"]
        out.append((prompt_ids + answer_ids, [-100] * len(prompt_ids) + answer_ids))
    return out


def _answers(model, tokenizer, rows: list[dict], tokens: int) -> tuple[list[str], list[bool]]:
    """Greedy completions and, for each, whether its program passes every test case (binary_code)."""
    from evaluation.generate import generate_hf, prompt_ids
    from rewards.execution import binary_code

    completions = generate_hf(
        model, tokenizer, prompt_ids(tokenizer, rows, _switches(tokenizer)), tokens, batch_size=50
    )
    passed = binary_code(completions, verification_info=[row["verification_info"] for row in rows])
    return completions, [score >= 1.0 for score in passed]


def check(model, tokenizer, rows: list[dict], tokens: int = HELDOUT_TOKENS) -> dict:
    """The criterion's reading: the share of answers whose program reads the two integers ("restated", as the
    arithmetic warm start names its reading of the numbers), and the share passing every test case."""
    from rewards.execution import extract_code

    completions, passed = _answers(model, tokenizer, rows, tokens)
    read = sum(bool(READS_INPUT.match(extract_code(c).strip())) for c in completions)
    return {"restated": round(read / len(rows), 4), "accuracy": round(sum(passed) / len(rows), 4)}


def train_warm_start(model, tokenizer, seed: int, steps: int | None = None) -> dict:
    """Fine-tune every weight of `model` in place on reference programs, seeded, until the stopping criterion
    holds, or for exactly `steps` steps when given. Returns what it did (warm_start.train_to_band)."""
    limit = WARM_START_MAX_STEPS if steps is None else steps
    examples = _examples(tokenizer, seed, limit * WARM_START_BATCH // 4 + WARM_START_BATCH)
    band, rows = None, []
    if steps is None:
        rows = check_rows()
        band = Band(WARM_START_MIN_STEPS, WARM_START_CHECK_EVERY, READ_TARGET, PASS_BAND, BAND_CHECKS, past_stops=True)
    learning = seeded_steps(model, examples, seed, WARM_START_BATCH, WARM_START_LR, tokenizer.pad_token_id, limit)
    return train_to_band(model, learning, lambda m: check(m, tokenizer, rows), band)


def measure_heldout(model, tokenizer, rows: list[dict], tokens: int = HELDOUT_TOKENS) -> dict:
    """Greedy held-out pass rate (every test case passed), the share of well-formed answers and a few samples."""
    from evaluation.score import score
    from rewards import REWARDS

    completions, passed = _answers(model, tokenizer, rows, tokens)
    result = score(completions, [row["answer"] for row in rows], passed)
    well_formed = REWARDS["xml_soft"](completions, answer=[row["answer"] for row in rows])
    result["well_formed"] = round(sum(well_formed) / len(rows), 4) if rows else None
    result["examples"] = result["examples"][:EXAMPLE_ROWS]
    return result
