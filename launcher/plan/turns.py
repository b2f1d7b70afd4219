"""HOW MANY turns a completion that calls tools takes, and what they add to its length and its generation.

With tools (or an environment), TRL's completion is the model's turns and the tools' replies between them,
all counted against max_completion_length (`_tool_call_loop`). The planner assumes the worst the profile
allows, for memory and time alike: every completion makes max_tool_calls calls, each call's markup is
CALL_TOKENS long and each reply the longest its tool gives (a shipped tool's own bound, tools.SHIPPED_REPLY_CHARS;
anyone else's, the guard's cap on a reply, tools.guard.MAX_OUTPUT_CHARS), plus the template's turn markers.

Generation then runs in rounds (TRL generates the next turn of every completion that called a tool, one
completion per request): round 0 is the first turn of each group, the later rounds one request per completion
whose prompt is the prompt and every turn and reply so far, prefilled again each round (the re-prefill), and
the last round writes the answer. `rounds` gives each round's step shape; launcher.plan.speed times them.
Nothing here imports the user's code: a tool's reply length is known from its entry alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

CALL_TOKENS = 24  # one call's markup, name and arguments (a JSON or XML call of one short argument: 15-30)
TURN_MARKER_TOKENS = 8  # the reply's role markers and the next assistant header around it
SCHEMA_TOKENS = 100  # one tool's description in the prompt (its JSON schema as chat templates render it)


@dataclass(frozen=True)
class TurnPlan:
    calls: int  # tool-calling turns assumed per completion (max_tool_calls)
    call_tokens: int  # tokens of one call
    reply_tokens: int  # tokens of one reply with its turn markers
    basis: str
    schema_tokens: int = 0  # what the tools' descriptions add to every prompt

    @property
    def model_turns(self) -> int:
        return self.calls + 1

    @property
    def extra_tokens(self) -> int:
        """What the turns add to a completion: the calls and the replies."""
        return self.calls * (self.call_tokens + self.reply_tokens)

    def to_json(self) -> dict:
        return {
            "tool_calls": self.calls,
            "model_turns": self.model_turns,
            "call_tokens": self.call_tokens,
            "reply_tokens": self.reply_tokens,
            "extra_tokens": self.extra_tokens,
            "schema_tokens": self.schema_tokens,
            "basis": self.basis,
        }


def reply_chars(profile) -> tuple[int, str]:
    """The longest reply the profile's tools give, in characters, and whose bound it is."""
    from tools import SHIPPED_REPLY_CHARS
    from tools.guard import MAX_OUTPUT_CHARS

    entries = list(profile.tools) + ([profile.environment] if profile.environment else [])
    longest, whose = 0, "none"
    for entry in entries:
        chars = SHIPPED_REPLY_CHARS.get(entry, MAX_OUTPUT_CHARS)
        if chars > longest:
            longest = chars
            whose = f"{entry}'s replies" if entry in SHIPPED_REPLY_CHARS else f"the guard's cap on {entry}'s replies"
    return longest, whose


def turn_plan(profile, chars_per_token: float) -> TurnPlan | None:
    """The turns assumed for `profile` (None without tools or an environment)."""
    if not getattr(profile, "tools", None) and not getattr(profile, "environment", ""):
        return None
    chars, whose = reply_chars(profile)
    reply = math.ceil(chars / max(chars_per_token, 0.5)) + TURN_MARKER_TOKENS
    calls = profile.max_tool_calls
    basis = (
        f"{calls} tool calls a completion (max_tool_calls), each ~{CALL_TOKENS} tokens, each reply at most "
        f"{reply} tokens ({chars} characters: {whose}, and the turn markers)"
    )
    offered = len(profile.tools) + (1 if profile.environment else 0)  # an environment: one method assumed
    basis += f"; the tools' descriptions add ~{offered * SCHEMA_TOKENS} tokens to every prompt"
    return TurnPlan(calls, CALL_TOKENS, reply, basis, offered * SCHEMA_TOKENS)


def turn_plan_of(profile) -> TurnPlan | None:
    """The turns assumed for `profile`, at its model's tokenizer rate (the catalogue's; None without tools, or
    when the model is not known offline)."""
    if not getattr(profile, "tools", None) and not getattr(profile, "environment", ""):
        return None
    from profiles.catalog import chars_per_token, resolve

    try:
        rate, _ = chars_per_token(resolve(profile.model))
    except Exception:  # a model the catalogue cannot read offline: the plan says so elsewhere
        return None
    return turn_plan(profile, rate)


def rounds(shape) -> list:
    """The generation rounds of a step shape whose completions take `shape.tool_calls` calls (a shape of
    launcher.plan.speed, changed with dataclasses.replace): their prompts, lengths and requests."""
    calls = getattr(shape, "tool_calls", 0)
    if not calls:
        return [shape]
    turn = shape.call_tokens + shape.reply_tokens
    answer = max(1, shape.expected - calls * turn)
    completions = shape.prompts * shape.generations
    out = [replace(shape, expected=min(shape.call_tokens, shape.cap), tool_calls=0)]
    for k in range(1, calls + 1):
        last = k == calls
        out.append(
            replace(
                shape,
                prompts=completions,
                generations=1,
                prompt_tokens=shape.prompt_tokens + k * turn,
                expected=max(1, min(answer if last else shape.call_tokens, shape.cap - k * turn)),
                cap=max(1, shape.cap - k * turn),
                tool_calls=0,
            )
        )
    return out
