"""Accuracy on a set of questions: an answer is judged by the profile's `correctness` reward itself (the
accuracy reward unless the profile names another), correct when it scores its full 1.0. The reward is called as
TRL calls it in training, so the accuracy reported and the reward trained on never disagree."""

from __future__ import annotations

from evaluation.generate import completion_token_ids, generate
from rewards import REWARDS, is_correct
from rewards.format import WELL_FORMED
from rewards.parse import REASONING_LAYOUT, asked_layout

EXAMPLES_KEPT = 3
FULL_SCORE = 1.0


def _ignore(*args, **kwargs) -> None:
    """Stands in for TRL's log_extra / log_metric, which a reward may call."""


def reward_inputs(rows: list[dict], completions: list[str], completion_ids: list | None = None) -> dict:
    """The keywords TRL gives a reward function for these rows and completions: prompts, completions (as
    messages when the prompts are conversations), completion_ids and every other column of the rows."""
    conversational = bool(rows) and isinstance(rows[0].get("prompt"), list)
    shaped = [[{"role": "assistant", "content": c}] for c in completions] if conversational else list(completions)
    columns = [key for key in rows[0] if key not in ("prompt", "completion", "completion_ids")] if rows else []
    return {
        "prompts": [row.get("prompt") for row in rows],
        "completions": shaped,
        "completion_ids": completion_ids,
        **{key: [row.get(key) for row in rows] for key in columns},
        "trainer_state": None,
        "log_extra": _ignore,
        "log_metric": _ignore,
    }


def judge(reward, rows: list[dict], completions: list[str], completion_ids: list | None = None) -> list[bool]:
    """For each completion, whether the correctness reward gives it its full score."""
    scores = reward(**reward_inputs(rows, completions, completion_ids))
    return [score is not None and float(score) >= FULL_SCORE for score in scores]


def score(completions: list[str], golds: list, verdicts: list[bool] | None = None) -> dict:
    """{"accuracy", "correct", "total", "examples"}; without verdicts, the accuracy reward's rule judges."""
    if verdicts is None:
        verdicts = [is_correct(c, g) for c, g in zip(completions, golds)]
    correct = sum(bool(v) for v in verdicts)
    total = len(golds)
    return {
        "accuracy": round(correct / total, 4) if total else None,
        "correct": correct,
        "total": total,
        "examples": [
            {"completion": c[:500], "answer": str(g)}
            for c, g in zip(completions[:EXAMPLES_KEPT], golds[:EXAMPLES_KEPT])
        ],
    }


def evaluate(
    model,
    tokenizer,
    rows: list[dict],
    *,
    max_new_tokens: int,
    use_vllm: bool,
    lora_path: str | None = None,
    reward=None,
    stop=None,
    live_lora: bool = False,
    switches: dict | None = None,
) -> dict:
    """{"accuracy", "correct", "total", "examples"} over rows of {prompt, answer, ...}, judged by `reward`
    (the correctness reward; the accuracy reward when none is given); the prompts rendered with the chat
    template's `switches`."""
    if not rows:
        return {"accuracy": None, "correct": 0, "total": 0, "examples": []}
    completions = generate(
        model,
        tokenizer,
        rows,
        max_new_tokens=max_new_tokens,
        use_vllm=use_vllm,
        lora_path=lora_path,
        stop=stop,
        live_lora=live_lora,
        switches=switches,
    )
    verdicts = judge(reward or REWARDS["accuracy"], rows, completions, completion_token_ids(tokenizer, completions))
    result = score(completions, [row.get("answer") for row in rows], verdicts)
    result["well_formed"] = well_formed_share(completions, prompt_layout(rows))
    return result


def prompt_layout(rows: list[dict]) -> str | None:
    """The answer layout the rows' system turn asks for (rewards.parse.asked_layout), or None."""
    prompt = rows[0].get("prompt") if rows else None
    if not isinstance(prompt, list):
        return None
    system = next((m.get("content") for m in prompt if isinstance(m, dict) and m.get("role") == "system"), None)
    return asked_layout(system)


def well_formed_share(completions: list[str], layout: str | None = None) -> float | None:
    """The share of completions in the layout the prompt asks for, <reasoning>/<answer> unless it asks for
    another (the full score of that layout's reward: xml_soft, think_format)."""
    if not completions:
        return None
    reward = REWARDS[WELL_FORMED.get(layout or REASONING_LAYOUT, "xml_soft")]
    return round(sum(s == 1.0 for s in reward(list(completions))) / len(completions), 4)
