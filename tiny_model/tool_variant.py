"""The tiny model that calls tools: the warm-started tiny model (tiny_model.build) given the tool-call markup
(tiny_model.tool_template) and a second, short supervised pass in which some answers use the shipped tools, so
that GRPO finds tool calls among its samples and has their rewards to compare. Built once (seeded) and cached
beside the plain one, for profiles with `tools` or an `environment`.

On the arithmetic task the pass mixes three kinds of answers to the task's own training problems (never the
held-out ones): a direct answer to a prompt that offers the calculator; the same prompt answered through the
calculator (a call of `calculate` with the problem's operation, the calculator's real reply, the answer); and
the guessing game of tools.guess (guesses that close in on the answer, "higher"/"lower" after each, the answer
once it is "correct"). The tool replies are masked out of the loss, as TRL masks them. Its record
(`tool_warm_start.json`) holds the held-out figures with the calculator and in the game after the pass.
Other tasks get the markup only (the tiny model is not warm-started on them).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import shutil
from pathlib import Path

from contract.safe_write import publish_folder
from tiny_model import tool_template

TOOL_BUILD_VERSION = 3  # 3: the record's held-out figures rendered with thinking off, as the pass taught
RECORD_FILE = "tool_warm_start.json"
STEPS = 300
BATCH = 32
LEARNING_RATE = 1.0e-3
THREADS = 1
# Shares of the pass's examples: calculator prompts answered through the tool, answered directly, games
CALCULATOR_SHARE = 0.25
DIRECT_SHARE = 0.45
GAME_SHARE = 0.30
# A game's first guess is the answer plus one of these offsets (weights below): the tiny model's own sums are
# off by a little; each later guess moves one toward the answer
GAME_OFFSETS = (0, 1, -1, 2, -2, 3, -3)
GAME_WEIGHTS = (0.4, 0.15, 0.15, 0.1, 0.1, 0.05, 0.05)
HELDOUT_ROWS = 200
HELDOUT_TOKENS = 64
GAME_TOKENS = 128
MAX_CALLS = 4

_OPERATION = re.compile(r"<<([^=]+)=")


def settings() -> dict:
    return {
        "version": TOOL_BUILD_VERSION,
        "steps": STEPS,
        "batch": BATCH,
        "learning_rate": LEARNING_RATE,
        "shares": [CALCULATOR_SHARE, DIRECT_SHARE, GAME_SHARE],
        "offsets": [GAME_OFFSETS, GAME_WEIGHTS],
        "template": tool_template.TOOL_CHAT_TEMPLATE,
        "response": tool_template.RESPONSE_TEMPLATE,
        "tokens": [*tool_template.MARKUP_TOKENS, *tool_template.NAME_TOKENS, tool_template.TOOL_ROLE],
    }


def tools_folder_name(base_name: str) -> str:
    """The cache folder's name of the tool-calling variant built on the tiny model in folder `base_name`."""
    key = hashlib.sha256(json.dumps({"base": base_name, **settings()}, sort_keys=True).encode()).hexdigest()[:12]
    return f"tiny-tools-{key}"


def ensure_tiny_tools(dataset: str = "arithmetic", seed: int = 0, root: Path | None = None) -> Path:
    """The folder of the tool-calling tiny model for this task (built on first use, then reused)."""
    from tiny_model.build import cache_root, ensure_tiny

    root = Path(root) if root else cache_root()
    base = ensure_tiny(dataset, seed, root)
    target = root / tools_folder_name(base.name)
    if (target / "config.json").is_file() and (target / "tokenizer.json").is_file():
        return target
    model, tokenizer = _with_markup(base)
    record = _warm_start(model, tokenizer, seed) if dataset == "arithmetic" else None

    def write(staged: Path) -> None:
        model.save_pretrained(staged)
        tokenizer.save_pretrained(staged)
        _pin_tokenizer(staged)
        for name in ("warm_start.json",):  # the base's record: the report's random -> warm start figures
            if (base / name).is_file():
                shutil.copy(base / name, staged / name)
        if record is not None:
            (staged / RECORD_FILE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")

    publish_folder(target, write, shared=True)
    return target


def _with_markup(base: Path):
    import torch
    from transformers import AutoTokenizer, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(base)
    model = LlamaForCausalLM.from_pretrained(base, dtype=torch.float32)
    added = tool_template.add_tool_markup(tokenizer)
    if added:
        old = model.get_input_embeddings().weight.shape[0]
        model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
        with torch.no_grad():  # new tokens start at the mean of the others: no token is favoured at first
            weight = model.get_input_embeddings().weight
            weight[old:] = weight[:old].mean(dim=0, keepdim=True)
    return model, tokenizer


def _pin_tokenizer(folder: Path) -> None:
    """As tiny_model.build pins it: the tokenizer's own class, the template (and the response template)."""
    path = folder / "tokenizer_config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config["chat_template"] = tool_template.TOOL_CHAT_TEMPLATE
    config["response_template"] = tool_template.RESPONSE_TEMPLATE
    path.write_text(json.dumps(config, indent=2), encoding="utf-8")


def operation(row: dict) -> str:
    """The worked solution's first operation as a person writes it: "4 + 8"."""
    match = _OPERATION.search(row["answer_text"])
    text = match.group(1) if match else str(row["answer"])
    return re.sub(r"\s*([-+*/])\s*", r" \1 ", text).strip()


def game_guesses(answer: int, rng: random.Random) -> list[int]:
    """The guesses of one taught game: the answer off by a drawn offset, then one closer each time."""
    offset = rng.choices(GAME_OFFSETS, GAME_WEIGHTS)[0]
    guesses = [answer + offset]
    while guesses[-1] != answer and len(guesses) < MAX_CALLS:
        guesses.append(guesses[-1] + (1 if guesses[-1] < answer else -1))
    return guesses


def _schemas():
    from tools import load_environment, load_tools, tool_methods

    calculator = load_tools(["calculate"])
    game = tool_methods(load_environment("guess")())
    return calculator, game


def examples(tokenizer, seed: int, count: int) -> list[tuple[list[int], list[int]]]:
    """(input ids, labels) of `count` taught answers, in order, the tool replies and prompts masked."""
    from tasks.prompts import build_prompt
    from tiny_model.warm_start import switches, training_rows, worked_completion
    from tools.calculator import compute

    calculator, game = _schemas()
    rendering = switches(tokenizer)
    rng = random.Random(f"tool warm start {seed}")
    out = []
    for row in training_rows(seed, count):
        kind = rng.choices(("calculator", "direct", "game"), (CALCULATOR_SHARE, DIRECT_SHARE, GAME_SHARE))[0]
        offered = game if kind == "game" else calculator
        prompt = tokenizer.apply_chat_template(
            build_prompt(row["question"]),
            tools=offered,
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
            **rendering,  # as every attempt renders prompts: thinking off
        )
        turns: list[tuple] = []  # ("model", text) or ("tool", name, reply)
        if kind == "calculator":
            expression = operation(row)
            turns += [("model", tool_template.tool_call_text("calculate", {"expression": expression}))]
            turns += [("tool", "calculate", compute(expression))]
        elif kind == "game":
            answer = int(row["answer"])
            for guess in game_guesses(answer, rng):
                reply = "correct" if guess == answer else "higher" if answer > guess else "lower"
                turns += [("model", tool_template.tool_call_text("guess", {"number": guess})), ("tool", "guess", reply)]
        turns.append(("model", worked_completion(row)))
        ids, labels = conversation_tokens(tokenizer, list(prompt), turns)
        out.append((ids, labels))
    return out


def conversation_tokens(tokenizer, prompt: list[int], turns: list[tuple]) -> tuple[list[int], list[int]]:
    """(ids, labels) of a prompt and its turns laid out as TRL lays out a rollout: each model turn up to its
    end token (trained), each tool reply with the next assistant header (masked)."""
    from evaluation.turns import tool_suffix_ids

    ids, labels = list(prompt), [-100] * len(prompt)
    for turn in turns:
        if turn[0] == "model":
            piece = tokenizer(turn[1] + tokenizer.eos_token, add_special_tokens=False)["input_ids"]
            ids += piece
            labels += piece
        else:
            piece = tool_suffix_ids(tokenizer, [{"role": "tool", "name": turn[1], "content": turn[2]}])
            ids += piece
            labels += [-100] * len(piece)
    return ids, labels


def _warm_start(model, tokenizer, seed: int) -> dict:
    """The supervised pass, then the held-out figures with the calculator and in the game."""
    import time

    import torch

    from tiny_model.warm_start import seeded_steps

    threads = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    try:
        data = examples(tokenizer, seed, STEPS * BATCH // 4 + BATCH)
        started = time.time()
        for _step, last in seeded_steps(model, data, seed, BATCH, LEARNING_RATE, tokenizer.pad_token_id, STEPS):
            loss = last
        model.eval()
        seconds = round(time.time() - started, 1)
        figures = measure_heldout(model, tokenizer)
    finally:
        torch.set_num_threads(threads)
    return {"steps": STEPS, "seconds": seconds, "final_loss": round(float(loss), 4), **figures}


def measure_heldout(model, tokenizer, rows: int = HELDOUT_ROWS) -> dict:
    """Greedy held-out accuracy with the calculator offered, and in the guessing game, with tool figures. Its
    tool calls are counted apart from the run's (tools.guard.apart): an attempt may build the model first."""
    from evaluation.generate import Greedy
    from evaluation.score import evaluate
    from tasks import load_task
    from tiny_model.warm_start import switches
    from tools import load_environment, load_tools
    from tools.guard import apart
    from tools.guess import solved

    held_out = load_task("arithmetic", "test", limit=rows)
    rendering = switches(tokenizer)  # as the pass taught it and every attempt renders prompts: thinking off
    with apart():
        calculator = evaluate(
            model,
            tokenizer,
            held_out,
            Greedy(HELDOUT_TOKENS, switches=rendering),
            tools=load_tools(["calculate"]),
            max_tool_calls=MAX_CALLS,
        )
        game = evaluate(
            model,
            tokenizer,
            held_out,
            Greedy(GAME_TOKENS, switches=rendering),
            reward=solved,
            environment=load_environment("guess"),
            max_tool_calls=MAX_CALLS,
        )
    keep = ("accuracy", "well_formed", "tool_calls_per_answer", "answers_with_tool", "tool_success")
    return {
        "held_out": len(held_out),
        "calculator": {k: calculator.get(k) for k in keep},
        "game_won_first_guess": game.get("accuracy"),
        "game": {k: game.get(k) for k in keep if k != "accuracy"},
    }


def build_record(folder) -> dict | None:
    """The pass's held-out figures (None beside a model built without it)."""
    try:
        return json.loads((Path(folder) / RECORD_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
