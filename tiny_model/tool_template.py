"""The tiny model's tool-call markup: its chat template with tool calls and tool replies, the response template
that reads a tool call back out of what it generated (transformers' `parse_response`, which TRL's multi-turn
loop calls), and the tokens the markup adds to its vocabulary.

Plain messages render exactly as tiny_model.build.CHAT_TEMPLATE renders them (`<|role|>\\ncontent<|end|>\\n`, and its
thinking switch), so the warm start's answers carry over. A tool call is Qwen 3.5's XML-inline shape, kept short for a tiny model:
`<tool_call><function=calculate><parameter=expression>7 + 5</parameter></tool_call>`; a tool's reply is a
`<|tool|>` turn; the tools offered are listed in a system turn of their own before the conversation
(`<function=calculate><parameter=expression>`). Each piece of the markup, and each shipped tool's name and
parameter, is one token.
"""

from __future__ import annotations

TOOL_ROLE = "<|tool|>"
# Ordinary added tokens (not special): TRL decodes completions with skip_special_tokens=True for the rewards
MARKUP_TOKENS = ("<tool_call>", "</tool_call>", "</parameter>")
# The shipped tools' names and parameters as single tokens (tools.SHIPPED_TOOLS, tools.SHIPPED_ENVIRONMENTS)
NAME_TOKENS = ("<function=calculate>", "<parameter=expression>", "<function=guess>", "<parameter=number>")

TOOL_CHAT_TEMPLATE = (
    "{%- if tools -%}"
    "{{ '<|system|>\n' }}"
    "{%- for tool in tools -%}"
    "{%- set f = tool.function if tool.function is defined else tool -%}"
    "{{ '<function=' + f.name + '>' }}"
    "{%- if f.parameters is defined and f.parameters.properties is defined -%}"
    "{%- for name in f.parameters.properties -%}{{ '<parameter=' + name + '>' }}{%- endfor -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{{ '<|end|>\n' }}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{{ '<|' + message['role'] + '|>\n' }}"
    "{%- if message['content'] is string -%}{{ message['content'] }}{%- endif -%}"
    "{%- if message['role'] == 'assistant' and message['tool_calls'] is defined and message['tool_calls'] -%}"
    "{%- for call in message['tool_calls'] -%}"
    "{%- set f = call.function if call.function is defined else call -%}"
    "{{ '<tool_call><function=' + f.name + '>' }}"
    "{%- if f.arguments is mapping -%}"
    "{%- for key, value in f.arguments.items() -%}"
    "{{ '<parameter=' + key + '>' + (value if value is string else value | tojson) + '</parameter>' }}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{ '</tool_call>' }}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{ '<|end|>\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|assistant|>\n' }}"
    "{%- if enable_thinking is not defined or enable_thinking -%}{{ '<think>\n' }}{%- endif -%}"
    "{%- endif -%}"
)

# transformers' response template (tokenizer.response_template): what TRL's parse_response reads a generated
# turn with, tool calls included
RESPONSE_TEMPLATE = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|assistant|>\n",
    "fields": {
        "tool_calls": {
            "open_pattern": r"<tool_call>\s*<function=(?P<name>[^\n>]+)>",
            "close_pattern": r"</tool_call>\s*",
            "repeats": True,
            "content": "xml-inline",
            "content_args": {
                "tag_pattern": r"<parameter=(?P<key>[^>\n]+)>(?P<value>.*?)</parameter>",
                "value_parser": {"name": "json", "args": {"allow_non_json": True}},
            },
            "transform": {"type": "function", "function": {"name": "{name}", "arguments": "{content}"}},
        },
        "content": {"close_pattern": r"<\|end\|>\s*", "content": "text"},
    },
}


def tool_call_text(name: str, arguments: dict) -> str:
    """One tool call as the template writes it (and the model is taught to write it)."""
    import json

    body = "".join(
        f"<parameter={key}>{value if isinstance(value, str) else json.dumps(value)}</parameter>"
        for key, value in arguments.items()
    )
    return f"<tool_call><function={name}>{body}</tool_call>"


def add_tool_markup(tokenizer) -> int:
    """Give a tiny tokenizer the markup: its tokens, the template, the response template. The number of tokens
    added (the model's embeddings grow by as many)."""
    before = len(tokenizer)
    tokenizer.add_tokens([*MARKUP_TOKENS, *NAME_TOKENS])
    tokenizer.add_tokens([TOOL_ROLE], special_tokens=True)  # a role marker, like <|user|>
    tokenizer.chat_template = TOOL_CHAT_TEMPLATE
    tokenizer.response_template = RESPONSE_TEMPLATE
    return len(tokenizer) - before
