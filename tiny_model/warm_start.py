"""The tiny model's warm start: a short supervised pass on worked solutions in the answer format.

A random model never writes a right answer, so GRPO's accuracy reward never fires and nothing is learned.
A few hundred seeded steps of next-token training on generated problems (training split only, never the
held-out ones), stopped when its own answers show it (see below), give a weak policy: well-formed
`<reasoning>`/`<answer>` completions that read the problem's numbers right, with the sums right only some of
the time. GRPO then has rewards to compare and the gain it reports is its own.

transformers/torch are imported inside functions only (the trainer imports Unsloth first).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The warm start stops on a measured criterion, not after a fixed count: GRPO needs a policy that restates the
# problem's numbers right and gets the sums right only part of the time. A fixed 235 steps did that at seed
# 3407 (numbers restated in 99.5% of answers, sums right 39%) but not at seed 2 (38% restated): most groups
# of completions then score alike and GRPO learns nothing. So from WARM_START_MIN_STEPS on, every
# WARM_START_CHECK_EVERY steps, the greedy answers to CHECK_ROWS problems of a stream of its own (never a
# held-out one) are read; the warm start stops once BAND_CHECKS checks in a row find at least RESTATE_TARGET
# of them restating the numbers and a share inside ACCURACY_BAND with the sum right. Below the band GRPO's
# gain was slow, inside it fast, above it there is little left to learn (benchmarks/learning.md). Sums right
# swing by 0.1-0.3 between checks 10 steps apart (learning rate 2e-3): two checks in a row keep a passing
# swing from stopping it. At WARM_START_MAX_STEPS without such checks, it takes back the checked weights
# that restated the numbers with the sums right nearest the band (or the last ones, when none restated them).
WARM_START_MIN_STEPS = 200
WARM_START_MAX_STEPS = 400
WARM_START_CHECK_EVERY = 10
CHECK_ROWS = 100
CHECK_SEED = "warm-start check"
RESTATE_TARGET = 0.95
ACCURACY_BAND = (0.4, 0.5)
BAND_CHECKS = 2  # checks in a row inside the band
WARM_START_BATCH = 32
WARM_START_LR = 2.0e-3
WARM_START_THREADS = 1  # one thread: sums in one order on every machine, so the build is the same anywhere
HELDOUT_ROWS = (
    500  # held-out problems measured at build time (random and warm-started): all of them, as the CPU default evaluates
)
HELDOUT_TOKENS = 48
# The variant that writes long answers (`model: tiny-long`): the worked steps restated 1 to this many times in the
# reasoning, by the problem, which makes its answers two to four times as long as the default's (most past the
# CPU profiles' cap, some within it: answers that end say where answers end)
LONG_RESTATEMENTS = 4
LONG_HELDOUT_TOKENS = 128
# The long variant is there for the lengths of its answers, not for GRPO to learn from: its first check inside the
# band stops it. Its sums swing more than the default's between checks (0.41, 0.32, 0.37, 0.49, 0.60 at seed 3407),
# so two in a row never came, and it ran all WARM_START_MAX_STEPS to take back the weights of that first check.
LONG_BAND_CHECKS = 1

_ANNOTATION = re.compile(r"<<[^>]*>>")


def worked_completion(row: dict) -> str:
    """The completion the rewards give full marks: the worked steps (without GSM8K's <<...>> notes) as
    reasoning, the gold number as the answer."""
    steps = _ANNOTATION.sub("", row["answer_text"].rpartition("####")[0]).strip()
    return f"<reasoning>\n{steps}\n</reasoning>\n<answer>\n{row['answer']}\n</answer>"


def restatements(question: str) -> int:
    """How many times the long variant restates a problem's steps: 1 to LONG_RESTATEMENTS, by the question."""
    return 1 + sum(question.encode("utf-8")) % LONG_RESTATEMENTS


def long_completion(row: dict) -> str:
    """The long variant's completion: the worked steps, then restated 1 to LONG_RESTATEMENTS times as checks
    ("Check 1: 7 + 5 = 12."), then the answer: as well formed as the short one, and two to four times as long."""
    steps = _ANNOTATION.sub("", row["answer_text"].rpartition("####")[0]).strip()
    checks = "\n".join(f"Check {i}: {steps}" for i in range(1, restatements(row["question"]) + 1))
    return f"<reasoning>\n{steps}\n{checks}\n</reasoning>\n<answer>\n{row['answer']}\n</answer>"


def long_settings() -> dict:
    """What makes the long variant's weights differ from the default's (part of its build key)."""
    return {
        "restatements": LONG_RESTATEMENTS,
        "by": "question bytes",
        "heldout_tokens": LONG_HELDOUT_TOKENS,
        "band_checks": LONG_BAND_CHECKS,
    }


def training_rows(seed: int, count: int) -> list[dict]:
    """`count` generated problems from the warm start's own seeded stream, every held-out question removed
    (prefix-stable: a smaller count gives the first rows of a larger one)."""
    from tasks import arithmetic, load_task

    held_out = {row["prompt"][-1]["content"] for row in load_task("arithmetic", "test")}
    drawn = count
    while True:
        drawn += drawn // 8 + 16
        rows = [row for row in arithmetic.generate(drawn, seed=f"warm-start {seed}") if row["question"] not in held_out]
        if len(rows) >= count:
            return rows[:count]


def switches(tokenizer) -> dict:
    """The chat template's switches the warm start renders its prompts with: the project's defaults, as every
    attempt renders them (tasks.prompts.template_switches: thinking off)."""
    from tasks.prompts import reads_thinking_switch, template_switches

    return template_switches({}, reads_thinking_switch(tokenizer))


def _examples(tokenizer, seed: int, count: int, long_answers: bool = False):
    """(input ids, labels) per training problem; labels mask the prompt so only the answer is learned."""
    from tasks.prompts import build_prompt

    rows = training_rows(seed, count)
    rendering = switches(tokenizer)
    out = []
    for row in rows:
        prompt = tokenizer.apply_chat_template(
            build_prompt(row["question"]), tokenize=False, add_generation_prompt=True, **rendering
        )
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        completion = long_completion(row) if long_answers else worked_completion(row)
        answer_ids = tokenizer(completion + tokenizer.eos_token, add_special_tokens=False)["input_ids"]
        out.append((prompt_ids + answer_ids, [-100] * len(prompt_ids) + answer_ids))
    return out


def _batch(examples, pad_id: int):
    import torch

    width = max(len(ids) for ids, _ in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    labels = torch.full((len(examples), width), -100, dtype=torch.long)
    mask = torch.zeros((len(examples), width), dtype=torch.long)
    for i, (row_ids, row_labels) in enumerate(examples):
        ids[i, : len(row_ids)] = torch.tensor(row_ids)
        labels[i, : len(row_labels)] = torch.tensor(row_labels)
        mask[i, : len(row_ids)] = 1
    return ids, labels, mask


def settings() -> dict:
    """Everything that decides the warm-started weights (part of the tiny model's build key)."""
    return {
        "min_steps": WARM_START_MIN_STEPS,
        "max_steps": WARM_START_MAX_STEPS,
        "check_every": WARM_START_CHECK_EVERY,
        "check_rows": CHECK_ROWS,
        "check_seed": CHECK_SEED,
        "restate_target": RESTATE_TARGET,
        "accuracy_band": list(ACCURACY_BAND),
        "band_checks": BAND_CHECKS,
        "batch": WARM_START_BATCH,
        "learning_rate": WARM_START_LR,
        "threads": WARM_START_THREADS,
    }


def check_rows(count: int) -> list[dict]:
    """The problems the stopping criterion reads: a stream of their own, every held-out question removed."""
    from tasks import arithmetic, load_task
    from tasks.prompts import build_prompt

    held_out = {row["prompt"][-1]["content"] for row in load_task("arithmetic", "test")}
    drawn = count
    while True:
        drawn += drawn // 8 + 16
        rows = [row for row in arithmetic.generate(drawn, seed=CHECK_SEED) if row["question"] not in held_out]
        if len(rows) >= count:
            return [{**row, "prompt": build_prompt(row["question"])} for row in rows[:count]]


def restates(completion: str, row: dict) -> bool:
    """Whether the answer's reasoning begins with the worked solution's first operation ("7 + 5 ="): the
    problem's numbers read right, whatever the result."""
    worked = _ANNOTATION.sub("", row["answer_text"]).strip().splitlines()[0]
    operation = worked.partition("=")[0].strip()
    reasoning = completion.partition("<reasoning>")[2].strip()
    return bool(operation) and reasoning.startswith(operation + " =")


def check(model, tokenizer, rows: list[dict], tokens: int = HELDOUT_TOKENS) -> dict:
    """The criterion's reading: the share of greedy answers that restate the numbers, and that are right."""
    from evaluation.generate import generate_hf, prompt_ids
    from rewards import is_correct

    completions = generate_hf(model, tokenizer, prompt_ids(tokenizer, rows, switches(tokenizer)), tokens, batch_size=50)
    restated = sum(restates(c, row) for c, row in zip(completions, rows))
    right = sum(bool(is_correct(c, row["answer"])) for c, row in zip(completions, rows))
    return {"restated": round(restated / len(rows), 4), "accuracy": round(right / len(rows), 4)}


def seeded_steps(model, examples, seed: int, batch: int, learning_rate: float, pad_id: int, limit: int):
    """Seeded next-token training of every weight of `model` on `examples` ((input ids, labels) pairs): `limit`
    steps, each on `batch` examples drawn by random.Random(seed), under torch.manual_seed(seed), with AdamW and
    the gradient's norm clipped at 1. Yields (step, loss) after each; the model is in training mode as it steps
    (a caller may evaluate it between two)."""
    import random

    import torch

    order = random.Random(seed)
    torch.manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.0)
    for step in range(1, limit + 1):
        model.train()
        ids, labels, mask = _batch(order.sample(examples, batch), pad_id)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        yield step, loss


@dataclass(frozen=True)
class Band:
    """When a warm start stops: from step `first` on, every `every` steps, its answers are read ({"restated",
    "accuracy"}); it stops once `in_a_row` readings in a row restate at least `target` with the accuracy inside
    `band`. With `past_stops`, a reading that restates enough above the band ends it too (more training only
    moves further away). Without such readings it keeps the checked weights that restated, nearest the band."""

    first: int
    every: int
    target: float
    band: tuple[float, float]
    in_a_row: int
    past_stops: bool = False


def train_to_band(model, steps, read, band: Band | None) -> dict:
    """Runs `steps` (seeded_steps), reading the model with `read(model)` where `band` says, until it says stop.
    Returns {"steps" (of the weights kept), "stopped" ("criterion", "max_steps" or, without a band, "fixed"),
    "checks": [{"step", "restated", "accuracy"}]}; the model is left in evaluation mode."""
    import copy

    checks: list[dict] = []
    fallback = None  # (distance to the band, step, weights) of the nearest checked state that restated
    in_a_row = 0
    done = 0
    for step, _loss in steps:
        done = step
        if band is None or step < band.first or (step - band.first) % band.every != 0:
            continue
        model.eval()
        reading = {"step": step, **read(model)}
        checks.append(reading)
        low, high = band.band
        distance = max(low - reading["accuracy"], reading["accuracy"] - high, 0.0)
        reads = reading["restated"] >= band.target
        in_a_row = in_a_row + 1 if reads and distance == 0.0 else 0
        if in_a_row >= band.in_a_row:
            return {"steps": step, "stopped": "criterion", "checks": checks}
        if reads and (fallback is None or distance < fallback[0]):
            fallback = (distance, step, copy.deepcopy(model.state_dict()))
        if band.past_stops and reads and reading["accuracy"] > high and fallback is not None:
            break
    model.eval()
    if fallback is not None:
        model.load_state_dict(fallback[2])
        return {"steps": fallback[1], "stopped": "max_steps", "checks": checks}
    return {"steps": done, "stopped": "max_steps" if band is not None else "fixed", "checks": checks}


def train_warm_start(model, tokenizer, seed: int, steps: int | None = None, long_answers: bool = False) -> dict:
    """Fine-tune every weight of `model` in place on worked arithmetic solutions, seeded, until the stopping
    criterion holds (see RESTATE_TARGET) or for exactly `steps` steps when given. Returns what it did
    (train_to_band)."""
    limit = WARM_START_MAX_STEPS if steps is None else steps
    examples = _examples(tokenizer, seed, limit * WARM_START_BATCH // 4 + WARM_START_BATCH, long_answers)
    tokens = LONG_HELDOUT_TOKENS if long_answers else HELDOUT_TOKENS
    band, rows = None, []
    if steps is None:
        rows = check_rows(CHECK_ROWS)
        in_a_row = LONG_BAND_CHECKS if long_answers else BAND_CHECKS
        band = Band(WARM_START_MIN_STEPS, WARM_START_CHECK_EVERY, RESTATE_TARGET, ACCURACY_BAND, in_a_row)
    learning = seeded_steps(model, examples, seed, WARM_START_BATCH, WARM_START_LR, tokenizer.pad_token_id, limit)
    return train_to_band(model, learning, lambda m: check(m, tokenizer, rows, tokens), band)


def measure_heldout(model, tokenizer, rows: list[dict], tokens: int = HELDOUT_TOKENS) -> dict:
    """Greedy held-out accuracy, the share of well-formed answers and a few samples with their rewards."""
    from evaluation.generate import generate_hf, prompt_ids
    from evaluation.score import score
    from rewards import REWARDS, for_layout

    completions = generate_hf(model, tokenizer, prompt_ids(tokenizer, rows, switches(tokenizer)), tokens, batch_size=50)
    golds = [row["answer"] for row in rows]
    result = score(completions, golds)
    well_formed = REWARDS["xml_soft"](completions, answer=golds)
    result["well_formed"] = round(sum(well_formed) / len(rows), 4) if rows else None
    result["examples"] = [
        dict(
            example,
            rewards={
                name: fn([example["completion"]], answer=[example["answer"]])[0] for name, fn in for_layout().items()
            },
        )
        for example in result["examples"]
    ]
    return result
