"""The prompt a task's question becomes, how it is rendered into tokens (the chat template and its switches),
and how long it is.

Every task gives rows {question, answer}; the trainer sees {prompt: [system, user messages], answer}. The
system turn asks for the <reasoning>/<answer> layout the rewards score, so all tasks share it.
"""

from __future__ import annotations

SYSTEM_PROMPT = (
    "Solve the problem. Respond in exactly this format:\n"
    "<reasoning>\n"
    "your step-by-step reasoning\n"
    "</reasoning>\n"
    "<answer>\n"
    "the final answer as a single number\n"
    "</answer>"
)


# Characters per token that a prompt's text hardly exceeds on average (English BPE: about 4).
CHARACTERS_PER_TOKEN_BOUND = 8

# The chat-template switch that turns a reasoning model's thinking on and off (Qwen3's and its derivatives';
# the tiny model's template reads the same name). Left unsaid, such a template thinks: the answer opens with a
# long <think> block, before the layout the system prompt asks for.
THINKING_SWITCH = "enable_thinking"
# What a chat template does about thinking (template_thinking): nothing; think with no switch to stop it; think
# unless THINKING_SWITCH is false (Qwen3); or think at the length EFFORT_SWITCH asks for (gpt-oss's harmony
# template: its answers open on the analysis channel whatever the level, and nothing turns that off)
THINKS_NEVER = ""
THINKS_ALWAYS = "always"
EFFORT_SWITCH = "reasoning_effort"
EFFORT_LEVELS = ("low", "medium", "high")
EFFORT_DEFAULT = "medium"  # what the harmony template sets when the switch is left unsaid
# A template that reads the thinking out of earlier answers names a closing tag or the reasoning field; one that
# writes <think> without them asks for the block in its own words (Phi-4-reasoning's system message does)
READS_THINKING_BACK = ("reasoning_content", "'</think>' in", '"</think>" in', "split('</think>')", 'split("</think>")')
# Names apply_chat_template takes for itself: never a template switch (TRL passes them beside the switches)
RENDER_ARGUMENTS = (
    "conversation",
    "tools",
    "documents",
    "chat_template",
    "add_generation_prompt",
    "continue_final_message",
    "tokenize",
    "padding",
    "truncation",
    "max_length",
    "return_tensors",
    "return_dict",
    "return_assistant_tokens_mask",
    "tokenizer_kwargs",
)
# Names the renderers beneath apply_chat_template take for themselves, the template's own functions, and the
# arguments of TRL's apply_chat_template that passes the switches on: a switch of one of these names fails
# every rendering with a TypeError ("got multiple values for keyword argument 'messages'") or breaks a call
TAKEN_NAMES = (
    "messages",
    "conversations",
    "self",
    "example",
    "processing_class",
    "raise_exception",
    "strftime_now",
)


def _template_text(template) -> str:
    text = getattr(template, "chat_template", template)
    if isinstance(text, dict):  # a tokenizer may hold several named templates
        text = " ".join(str(t) for t in text.values())
    return text if isinstance(text, str) else ""


def reads_thinking_switch(template) -> bool:
    """Whether a chat template (its text, or a tokenizer holding one) reads THINKING_SWITCH."""
    return THINKING_SWITCH in _template_text(template)


def template_thinking(template) -> str:
    """What a chat template (its text, or a tokenizer holding one) does about thinking: EFFORT_SWITCH where it
    reads that switch, THINKING_SWITCH where it reads that one, THINKS_ALWAYS where its generation prompt opens
    a <think> block (DeepSeek-R1-Distill's, QwQ's) or its own words ask for one (Phi-4-reasoning's system
    message), else THINKS_NEVER."""
    text = _template_text(template)
    if EFFORT_SWITCH in text:
        return EFFORT_SWITCH
    if THINKING_SWITCH in text:
        return THINKING_SWITCH
    start = text.rfind("add_generation_prompt")
    generation = text[start:] if start >= 0 else ""
    if "<think>" in generation and "</think>" not in generation:
        return THINKS_ALWAYS
    if "<think>" in text and not any(marker in text for marker in READS_THINKING_BACK):
        return THINKS_ALWAYS
    return THINKS_NEVER


def template_switches(given: dict | None, reads_thinking: bool | str) -> dict:
    """The keywords every prompt is rendered with (TRL's chat_template_kwargs): the profile's own, and
    `enable_thinking: false` where the template reads that switch (`reads_thinking` true, or
    template_thinking's THINKING_SWITCH) and the profile leaves it unsaid (the shipped tasks ask for their own
    answer layout, which a thinking block before it would break). No other switch is set for the profile: a
    reasoning_effort left unsaid is the template's own default."""
    switches = dict(given or {})
    if reads_thinking is True or reads_thinking == THINKING_SWITCH:
        switches.setdefault(THINKING_SWITCH, False)
    return switches


def switch_problem(name: str, value) -> tuple[str, str] | None:
    """(why, fix) when a chat-template switch cannot be given as `name: value`, else None: a name the renderer
    takes for itself, or a thinking switch that is not true or false (Qwen3's template thinks unless it is
    `false` itself, so 0, "false" or an empty value all think; the tiny model's reads it as Python does)."""
    if name in RENDER_ARGUMENTS:
        return f"'{name}' is an argument of apply_chat_template itself, not a switch of the template", f"remove {name}"
    if name in TAKEN_NAMES:
        return (
            f"'{name}' is a name the chat template's renderer gives the template itself (a switch of that name fails "
            "every prompt's rendering after the model loads)",
            f"remove {name}",
        )
    if name == THINKING_SWITCH and not isinstance(value, bool):
        return (
            f"{THINKING_SWITCH} is {value!r}, not true or false: Qwen3's template thinks unless it is false itself "
            '(0, an empty value or "false" in quotes all think), other templates read it otherwise',
            f"write {THINKING_SWITCH}: false (no thinking) or {THINKING_SWITCH}: true, unquoted",
        )
    plain = value is None or isinstance(value, (bool, int, float, str))  # other values: the caller's own check
    if name == EFFORT_SWITCH and plain and value not in EFFORT_LEVELS:
        # the harmony template writes the value into the system message as it is: another word is no level
        return (
            f"{EFFORT_SWITCH} is {value!r}: gpt-oss's template knows the levels {', '.join(EFFORT_LEVELS)}",
            f"write {EFFORT_SWITCH}: low (the shortest thinking), medium (the template's default) or high",
        )
    return None


def thinks(switches: dict, thinking: bool | str) -> bool:
    """Whether a template writes a thinking block with these switches. `thinking`: template_thinking's answer
    (a bool: whether it reads THINKING_SWITCH). As Qwen3's (`enable_thinking is false` turns it off): anything
    but false itself thinks, 0 and "" included (profiles refuse such values: switch_problem); a template that
    always thinks, or thinks by reasoning_effort, thinks whatever the switches say."""
    if thinking is True or thinking == THINKING_SWITCH:
        return switches.get(THINKING_SWITCH, True) is not False
    return thinking in (THINKS_ALWAYS, EFFORT_SWITCH)


def effort_level(switches: dict) -> str:
    """The reasoning_effort a template that reads it renders with: the switch's, else the template's default."""
    level = switches.get(EFFORT_SWITCH)
    return level if level in EFFORT_LEVELS else EFFORT_DEFAULT


def render_ids(prompt: list[dict] | str, tokenizer, switches: dict | None = None, tools: list | None = None) -> list:
    """The token ids the model is given for a prompt, as TRL renders them: the chat template with the
    generation prompt, the template's switches and the tools offered when the tokenizer has one, else the
    message texts joined by blank lines."""
    if not isinstance(prompt, str) and getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template(
            prompt,
            tools=tools or None,
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
            **(switches or {}),
        )
    elif callable(tokenizer):
        ids = tokenizer(_prompt_text(prompt))
    else:  # a bare `tokenizers.Tokenizer`
        ids = tokenizer.encode(_prompt_text(prompt))
    if isinstance(ids, dict) or hasattr(ids, "keys"):
        ids = ids["input_ids"]
    if hasattr(ids, "ids"):
        ids = ids.ids
    if ids and isinstance(ids[0], list):  # a batch of one
        ids = ids[0]
    return list(ids)


def build_prompt(question: str, system_prompt: str | None = None) -> list[dict]:
    """The conversation for one question: the system turn (the format instructions unless the profile's
    `system_prompt` says otherwise; "" = none), then the question as the user turn."""
    system = SYSTEM_PROMPT if system_prompt is None else system_prompt
    return ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": question.strip()}]


def to_prompt_rows(rows: list[dict], system_prompt: str | None = None) -> list[dict]:
    """Rows {question, answer_text, answer} -> training rows {prompt: [...messages], answer: "72"}."""
    return [{"prompt": build_prompt(row["question"], system_prompt), "answer": row["answer"]} for row in rows]


def _prompt_text(prompt: list[dict] | str) -> str:
    if isinstance(prompt, str):
        return prompt
    return "\n\n".join(str(message.get("content", "")) for message in prompt)


def count_prompt_tokens(
    prompt: list[dict] | str, tokenizer, switches: dict | None = None, tools: list | None = None
) -> int:
    """Tokens the model sees for a prompt (render_ids: the chat template with its switches, and the tools offered
    as TRL renders them, when there is one)."""
    return len(render_ids(prompt, tokenizer, switches, tools))


def filter_by_length(
    rows: list[dict], tokenizer, max_prompt_length: int, switches: dict | None = None, tools: list | None = None
) -> tuple[list[dict], int]:
    """Keep the rows whose prompt fits in max_prompt_length tokens, rendered with the template's `switches` and
    the tools offered (as TRL renders them); return (kept rows, number dropped).

    A max_prompt_length of 0 or less keeps every row.
    """
    if not max_prompt_length or max_prompt_length <= 0:
        return list(rows), 0
    # A token rarely spans more than CHARACTERS_PER_TOKEN_BOUND characters, so a longer text is taken as too long
    # unread: one huge line must not cost gigabytes of token ids (and become the attempt's measured peak).
    most_characters = CHARACTERS_PER_TOKEN_BOUND * max_prompt_length + len(SYSTEM_PROMPT)
    kept = [
        row
        for row in rows
        if len(_prompt_text(row["prompt"])) <= most_characters
        and count_prompt_tokens(row["prompt"], tokenizer, switches, tools) <= max_prompt_length
    ]
    return kept, len(rows) - len(kept)
