"""The tiny model's tool-call markup passes TRL's own checks of a template for multi-turn training (it renders a
whole tool conversation, it preserves prefixes) and reads back, through TRL's parse_response, the calls it
writes; its plain messages render as the plain template's; every markup piece is one token."""

from __future__ import annotations

import pytest

from tiny_model.build import CHAT_TEMPLATE, _build_tokenizer, tiny_shape
from tiny_model.tool_template import MARKUP_TOKENS, NAME_TOKENS, TOOL_ROLE, add_tool_markup, tool_call_text


@pytest.fixture(scope="module")
def tokenizer():
    texts = ["Ava has 7 apples and gets 5 more. <reasoning>\n7 + 5 = 12\n</reasoning>\n<answer>\n12\n</answer>"] * 40
    tokenizer = _build_tokenizer(texts, tiny_shape())
    add_tool_markup(tokenizer)
    return tokenizer


def test_trl_accepts_it_for_multi_turn_training(tokenizer):
    from trl.chat_template_utils import is_chat_template_prefix_preserving, supports_tool_calling

    assert supports_tool_calling(tokenizer)
    assert is_chat_template_prefix_preserving(tokenizer)


def test_plain_messages_render_as_the_plain_template(tokenizer):
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]
    plain = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert plain == tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True, chat_template=CHAT_TEMPLATE
    )


def test_each_piece_of_markup_is_one_token(tokenizer):
    for piece in (*MARKUP_TOKENS, *NAME_TOKENS, TOOL_ROLE):
        assert len(tokenizer(piece, add_special_tokens=False)["input_ids"]) == 1, piece


@pytest.mark.parametrize(
    "turn, expected",
    [
        (tool_call_text("calculate", {"expression": "7 + 5"}), [("calculate", {"expression": "7 + 5"})]),
        (tool_call_text("guess", {"number": 12}), [("guess", {"number": 12})]),
        ("<reasoning>\n7 + 5 = 12\n</reasoning>\n<answer>\n12\n</answer>", []),
    ],
)
def test_trl_reads_back_what_the_model_writes(tokenizer, turn, expected):
    from trl.chat_template_utils import parse_response

    from tasks import load_task
    from tools import load_tools

    row = load_task("arithmetic", "test", limit=1)[0]
    prompt = tokenizer.apply_chat_template(
        row["prompt"],
        tools=load_tools(["calculate"]),
        add_generation_prompt=True,
        tokenize=True,
        return_dict=False,
        enable_thinking=False,  # as every attempt renders the tiny model's prompts
    )
    ids = tokenizer(turn + tokenizer.eos_token, add_special_tokens=False)["input_ids"]
    message = parse_response(tokenizer, ids, prefix=prompt)
    calls = [(c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or []]
    assert calls == expected
    if not expected:
        assert message["content"] == turn


def test_the_tools_offered_count_against_the_prompt(tokenizer):
    from tasks.prompts import count_prompt_tokens, filter_by_length
    from tools import load_tools

    prompt = [{"role": "user", "content": "Ava has 7 apples and gets 5 more."}]
    offered = load_tools(["calculate"])
    bare, with_tools = count_prompt_tokens(prompt, tokenizer), count_prompt_tokens(prompt, tokenizer, tools=offered)
    assert with_tools == bare + 6  # <|system|>, \n, <function=calculate>, <parameter=expression>, <|end|>, \n
    rows = [{"prompt": prompt}]
    assert (
        filter_by_length(rows, tokenizer, bare)[1] == 0
        and filter_by_length(rows, tokenizer, bare, tools=offered)[1] == 1
    )
