"""Accuracy on a set of questions: an answer is judged by the profile's `correctness` reward itself (the
accuracy reward unless the profile names another), correct when it scores its full 1.0. The reward is called as
TRL calls it in training, so the accuracy reported and the reward trained on never disagree."""

from __future__ import annotations

from evaluation.generate import Greedy, completion_token_ids, generate
from rewards import REWARDS, is_correct
from rewards.format import WELL_FORMED
from rewards.parse import REASONING_LAYOUT, asked_layout
from rewards.user import scores_now

EXAMPLES_KEPT = 3
FULL_SCORE = 1.0


def _ignore(*args, **kwargs) -> None:
    """Stands in for TRL's log_extra / log_metric, which a reward may call."""


def reward_inputs(rows: list[dict], completions: list[str], completion_ids: list | None = None) -> dict:
    """The keywords TRL gives a reward function for these rows and completions: prompts, completions (as
    messages when the prompts are conversations), completion_ids and every other column of the rows."""
    conversational = bool(rows) and isinstance(rows[0].get("prompt"), list)
    shaped = [
        c if isinstance(c, list) else [{"role": "assistant", "content": c}] if conversational else c
        for c in completions
    ]
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


def judge(
    reward, rows: list[dict], completions: list, completion_ids: list | None = None, environments: list | None = None
) -> list[bool]:
    """For each completion, whether the correctness reward gives it its full score. A completion may be its
    messages (a multi-turn answer), and `environments` the rollouts' environments, as TRL passes them."""
    inputs = reward_inputs(rows, completions, completion_ids)
    if environments is not None:
        inputs["environments"] = environments
    scores = scores_now(reward, **inputs)  # an async reward (a user's) is awaited here
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
    greedy: Greedy,
    *,
    reward=None,
    tools: list | None = None,
    environment=None,
    max_tool_calls: int = 0,
) -> dict:
    """{"accuracy", "correct", "total", "examples"} over rows of {prompt, answer, ...} answered as `greedy`
    says, judged by `reward` (the correctness reward; the accuracy reward when none is given). With `tools` or
    an `environment` factory, each answer may call them (evaluation.turns) and the result adds the tool
    figures."""
    if not rows:
        return {"accuracy": None, "correct": 0, "total": 0, "examples": []}
    if tools or environment is not None:
        from evaluation.generate import EvaluationStopped, generate_hf_ids, generate_vllm, stop_ids
        from evaluation.turns import figures, rollouts

        stops = stop_ids(model, tokenizer)

        def generate_ids(prompts, budget):
            if greedy.stop is not None and greedy.stop():
                raise EvaluationStopped("stopped between two turns")
            if greedy.use_vllm:
                outputs = generate_vllm(model, prompts, budget, greedy.lora_path, stops, greedy.live_lora)
                return [list(out.token_ids) for out in outputs]
            return generate_hf_ids(model, tokenizer, prompts, budget, stop=greedy.stop)

        results = rollouts(
            generate_ids,
            tokenizer,
            rows,
            tools=tools,
            environment_factory=environment,
            max_new_tokens=greedy.max_new_tokens,
            max_tool_calls=max_tool_calls,
            switches=greedy.switches,
        )
        answers, answer_ids = [r.messages for r in results], [r.completion_ids for r in results]
        environments = [r.environment for r in results] if environment is not None else None
        shown, texts, tool_figures = [_shown_rollout(r) for r in results], [r.text for r in results], figures(results)
    else:
        answers = shown = texts = generate(model, tokenizer, rows, greedy)
        answer_ids, environments, tool_figures = completion_token_ids(tokenizer, answers), None, {}
    verdicts = judge(reward or REWARDS["accuracy"], rows, answers, answer_ids, environments)
    result = score(shown, [row.get("answer") for row in rows], verdicts)
    result["well_formed"] = well_formed_share(texts, prompt_layout(rows))
    return {**result, **tool_figures}


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


def _shown_rollout(rollout) -> str:
    """A multi-turn answer as one text for the report: each tool call and reply on its own line."""
    parts = []
    for message in rollout.messages:
        if message.get("role") == "tool":
            parts.append(f"[{message.get('name')} -> {message.get('content')}]")
            continue
        for call in message.get("tool_calls") or []:
            function = call.get("function", {}) if isinstance(call, dict) else {}
            parts.append(f"[call {function.get('name')}({function.get('arguments')})]")
        if message.get("content"):
            parts.append(message["content"])
    return "\n".join(parts)
