"""Greedy answers that may call tools: the multi-turn rollout of TRL's GRPOTrainer (`_tool_call_loop`) done
greedily for evaluation, with the same pieces it uses, so that an answer scored here is one training could
have sampled.

Per row: the prompt rendered with the tools offered (the environment's methods among them, after its
`reset(**row)`); then turns: generate, read the turn with TRL's `parse_response` (the tokenizer's response
template), call the tools it asked for, append their replies as TRL does (its `_get_tool_suffix_ids`), and
generate again, at most `max_tool_calls` times. Like TRL, the model's turns and the tool replies together
take at most `max_new_tokens` tokens: a reply that would pass it ends the rollout.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from evaluation.generate import chat_ids


@dataclass
class Rollout:
    """One row's multi-turn answer."""

    messages: list = field(default_factory=list)  # the completion as TRL gives it to rewards
    completion_ids: list = field(default_factory=list)  # model turns and tool replies, as TRL trains on them
    tool_mask: list = field(default_factory=list)  # 1 for the model's tokens, 0 for the tool replies'
    calls: int = 0  # tool calls the model made
    answered: int = 0  # calls a tool answered (the last turn's calls are not, at the limit)
    failed: int = 0  # answered calls whose reply tells of an error
    environment: Any = None

    @property
    def text(self) -> str:
        """The assistant turns' text, joined (what the text rewards read)."""
        return "".join(m.get("content") or "" for m in self.messages if m.get("role") == "assistant")


def tool_suffix_ids(tokenizer, tool_messages: list[dict], switches: dict | None = None) -> list[int]:
    """The tokens that follow a model's tool-calling turn: the tool replies and the next assistant header, as
    TRL builds them (GRPOTrainer._get_tool_suffix_ids, called with the tokenizer it reads and the template's
    switches, as training renders them)."""
    from trl import GRPOTrainer

    holder = SimpleNamespace(
        processing_class=tokenizer,
        _tokenizer=tokenizer,
        chat_template=None,
        chat_template_kwargs=dict(switches or {}),
        _is_vlm=False,
    )
    return list(GRPOTrainer._get_tool_suffix_ids(holder, tool_messages))


def parse_turn(tokenizer, ids: list[int], prefix: list[int]) -> dict:
    """One generated turn as a message, tool calls read out, as TRL reads it (plain text without a parser)."""
    if getattr(tokenizer, "response_template", None) is None and getattr(tokenizer, "response_schema", None) is None:
        return {"role": "assistant", "content": tokenizer.decode(ids, skip_special_tokens=True)}
    from trl.chat_template_utils import parse_response

    return parse_response(tokenizer, ids, prefix=prefix)


def _call(tool_dict: dict, call: dict) -> tuple[str, Any, bool]:
    """(name, reply, failed) of one tool call, as TRL makes it (an unknown tool is an error reply)."""
    from rewards.tool_use import failed

    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or call.get("type", "function") != "function":
        return "unknown", {"error": "Unsupported tool call"}, True
    name = function.get("name", "unknown")
    arguments = function.get("arguments") or {}
    try:
        if name not in tool_dict:
            raise ValueError(f"Tool {name} not found.")
        reply = tool_dict[name](**arguments) if isinstance(arguments, dict) else tool_dict[name](arguments)
    except Exception as exc:  # a tool TRL would call unguarded: its error becomes the reply, as in TRL
        return name, {"error": str(exc)}, True
    content = reply if isinstance(reply, list) else str(reply)
    return name, content, failed({"content": content})


def rollouts(
    generate_ids,
    tokenizer,
    rows: list[dict],
    *,
    tools: list | None = None,
    environment_factory=None,
    max_new_tokens: int,
    max_tool_calls: int,
    switches: dict | None = None,
) -> list[Rollout]:
    """Each row's greedy multi-turn answer. `generate_ids(prompts: list[list[int]], max_new_tokens) ->
    list[list[int]]` generates one turn for a batch of token-id prompts; the prompts are rendered with the chat
    template's `switches` (chat_template_kwargs)."""
    from tools import tool_methods

    tools = list(tools or [])
    results = [Rollout() for _ in rows]
    prompts = [copy.deepcopy(row["prompt"]) for row in rows]
    offered: list[list] = []
    for index, row in enumerate(rows):
        methods = []
        if environment_factory is not None:
            environment = environment_factory()
            observation = environment.reset(**row)
            results[index].environment = environment
            methods = tool_methods(environment)
            if isinstance(observation, str) and prompts[index]:
                last = prompts[index][-1]
                prompts[index][-1] = {**last, "content": str(last.get("content", "")) + observation}
        offered.append(tools + methods)
    prompt_ids = [chat_ids(tokenizer, prompt, switches, offer) for prompt, offer in zip(prompts, offered)]
    tool_dicts = [{getattr(t, "__name__", str(t)): t for t in offer} for offer in offered]
    active = list(range(len(rows)))
    contexts = {i: list(prompt_ids[i]) for i in active}
    for turn in range(max_tool_calls + 1):
        if not active:
            break
        budgets = [max_new_tokens - len(results[i].completion_ids) for i in active]
        generated = generate_ids([contexts[i] for i in active], max(budgets))
        still = []
        for i, ids, budget in zip(active, generated, budgets):
            ids = list(ids)[: max(budget, 0)]
            result = results[i]
            message = parse_turn(tokenizer, ids, contexts[i])
            result.messages.append(message)
            result.completion_ids += ids
            result.tool_mask += [1] * len(ids)
            calls = message.get("tool_calls") or []
            result.calls += len(calls)
            if not calls or turn == max_tool_calls:
                continue
            replies, failures = [], 0
            for call in calls:
                name, content, failed = _call(tool_dicts[i], call)
                replies.append({"role": "tool", "name": name, "content": content})
                failures += int(failed)
            suffix = tool_suffix_ids(tokenizer, replies, switches)
            if len(result.completion_ids) + len(suffix) > max_new_tokens:
                continue  # as TRL: replies that would pass the budget are dropped, the rollout ends with its calls
            result.answered += len(replies)
            result.failed += failures
            result.messages.extend(replies)
            result.completion_ids += suffix
            result.tool_mask += [0] * len(suffix)
            contexts[i] = contexts[i] + ids + suffix
            still.append(i)
        active = still
    return results


def figures(results: list[Rollout]) -> dict:
    """Tool calls per answer, the share of answers that called one, the share of answered calls that
    succeeded (None without calls), and the lengths the planner assumes (launcher.plan.turns): model turns
    per answer, the model's tokens per answer and a reply's tokens (with its turn markers) per answered call."""
    if not results:
        return {"tool_calls_per_answer": None, "answers_with_tool": None, "tool_success": None, "tool_calls": 0}
    calls = sum(r.calls for r in results)
    answered = sum(r.answered for r in results)
    failed = sum(r.failed for r in results)
    reply_tokens = sum(len(r.tool_mask) - sum(r.tool_mask) for r in results)
    return {
        "tool_calls": calls,
        "tool_calls_per_answer": round(calls / len(results), 4),
        "answers_with_tool": round(sum(r.calls > 0 for r in results) / len(results), 4),
        "tool_success": round((answered - failed) / answered, 4) if answered else None,
        "model_turns_per_answer": round(
            sum(len([m for m in r.messages if m.get("role") != "tool"]) for r in results) / len(results), 4
        ),
        "model_tokens_per_answer": round(sum(sum(r.tool_mask) for r in results) / len(results), 2),
        "reply_tokens_per_call": round(reply_tokens / answered, 2) if answered else None,
    }
