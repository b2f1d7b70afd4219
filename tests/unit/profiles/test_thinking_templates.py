"""What a chat template does about thinking, read from its text (tasks.prompts.template_thinking) or, where the
text is not here, from the model's family and name (profiles.architecture.thinking_of); the switches rendered
with it, and the reasoning_effort switch a profile may give."""

from __future__ import annotations

from pathlib import Path

import pytest

from profiles.architecture import thinking_of
from profiles.load import ProfileError, load_profile
from tasks.prompts import (
    EFFORT_SWITCH,
    THINKING_SWITCH,
    THINKS_ALWAYS,
    THINKS_NEVER,
    effort_level,
    template_switches,
    template_thinking,
    thinks,
)

CPU = Path(__file__).resolve().parents[3] / "profiles" / "cpu-tiny-8gen.yaml"

# The parts of the published templates that say what they do about thinking
R1_DISTILL = (
    "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}"
    "{%- for message in messages %}{%- if message['role'] == 'assistant' %}{% set content = message['content'] %}"
    "{% if '</think>' in content %}{% set content = content.split('</think>')[-1] %}{% endif %}"
    "{{'<｜Assistant｜>' + content}}{%- endif %}{%- endfor -%}"
    "{% if add_generation_prompt and not ns.is_tool %}{{'<｜Assistant｜><think>\\n'}}{% endif %}"
)
PHI4_REASONING = (
    "{% if messages[0]['role'] != 'system' %}{{'<|im_start|>system<|im_sep|>Please structure your response into "
    "two main sections: Thought and Solution using the specified format: <think> {Thought section} </think> "
    "{Solution section}.<|im_end|>'}}{% endif %}{% if add_generation_prompt %}{{ '<|im_start|>assistant<|im_sep|>' }}"
    "{% endif %}"
)
HARMONY = (
    "{%- if reasoning_effort is not defined %}{%- set reasoning_effort = 'medium' %}{%- endif %}"
    "{{- 'Reasoning: ' + reasoning_effort + '\\n\\n' }}{{- '# Valid channels: analysis, commentary, final.' }}"
    "{%- if add_generation_prompt -%}<|start|>assistant{%- endif -%}"
)
QWEN3 = (
    "{%- if message.reasoning_content is string %}{%- set reasoning_content = message.reasoning_content %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- if enable_thinking is defined and "
    "enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}"
)
QWEN3_INSTRUCT_2507 = (  # reads earlier answers' thinking back, opens none
    "{%- if '</think>' in content %}{%- set reasoning_content = content.split('</think>')[0] %}{%- endif %}"
    "{{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content + '\\n</think>\\n\\n' + content }}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
QWEN3_THINKING_2507 = QWEN3_INSTRUCT_2507.replace(
    "'<|im_start|>assistant\\n' }}", "'<|im_start|>assistant\\n<think>\\n' }}"
)
LLAMA = "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>' }}{% if add_generation_prompt %}x{% endif %}"


@pytest.mark.parametrize(
    "text, kind",
    [
        (R1_DISTILL, THINKS_ALWAYS),  # the generation prompt opens <think>
        (QWEN3_THINKING_2507, THINKS_ALWAYS),
        (PHI4_REASONING, THINKS_ALWAYS),  # its own system message asks for <think>
        (HARMONY, EFFORT_SWITCH),
        (QWEN3, THINKING_SWITCH),
        (QWEN3_INSTRUCT_2507, THINKS_NEVER),
        (LLAMA, THINKS_NEVER),
        ("", THINKS_NEVER),
    ],
)
def test_a_template_says_what_it_does_about_thinking(text, kind):
    assert template_thinking(text) == kind
    assert template_thinking(type("Tokenizer", (), {"chat_template": {"default": text}})()) == kind


@pytest.mark.parametrize(
    "family, name, kind",
    [
        ("qwen2", "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", THINKS_ALWAYS),
        ("qwen2", "unsloth/DeepSeek-R1-Distill-Qwen-7B-bnb-4bit", THINKS_ALWAYS),
        ("llama", "deepseek-ai/DeepSeek-R1-Distill-Llama-8B", THINKS_ALWAYS),
        ("phi3", "microsoft/Phi-4-reasoning", THINKS_ALWAYS),
        ("phi3", "microsoft/Phi-4-reasoning-plus", THINKS_ALWAYS),
        ("qwen2", "Qwen/QwQ-32B", THINKS_ALWAYS),
        ("qwen3", "Qwen/Qwen3-4B-Thinking-2507", THINKS_ALWAYS),
        ("gpt_oss", "openai/gpt-oss-20b", EFFORT_SWITCH),
        ("qwen3", "Qwen/Qwen3-4B", THINKING_SWITCH),
        ("phi3", "microsoft/phi-4", THINKS_NEVER),
        ("qwen2", "Qwen/Qwen2.5-7B-Instruct", THINKS_NEVER),
    ],
)
def test_the_family_and_name_say_it_where_the_template_is_not_here(family, name, kind):
    assert thinking_of(family, name) == kind


def test_which_templates_think_with_which_switches():
    for kind in (THINKS_ALWAYS, EFFORT_SWITCH):  # no switch turns them off
        assert thinks({}, kind) and thinks({THINKING_SWITCH: False}, kind)
    assert thinks({}, THINKING_SWITCH) and not thinks({THINKING_SWITCH: False}, THINKING_SWITCH)
    assert not thinks({THINKING_SWITCH: True}, THINKS_NEVER)
    # only Qwen3's switch is set for the profile; a reasoning_effort left unsaid is the template's own default
    assert template_switches({}, THINKING_SWITCH) == {THINKING_SWITCH: False}
    assert template_switches({}, EFFORT_SWITCH) == {} == template_switches({}, THINKS_ALWAYS)
    assert effort_level({}) == "medium" and effort_level({EFFORT_SWITCH: "low"}) == "low"


def test_a_profile_gives_reasoning_effort_as_one_of_its_levels():
    for level in ("low", "medium", "high"):
        loaded = load_profile(CPU, [f"chat_template_kwargs={{reasoning_effort: {level}}}"])
        assert loaded.chat_template_kwargs == {"reasoning_effort": level}
    for value in ("extreme", "1", "true", "Low"):
        with pytest.raises(ProfileError, match="chat_template_kwargs") as info:
            load_profile(CPU, [f"chat_template_kwargs={{reasoning_effort: {value}}}"])
        assert "gpt-oss's template knows the levels low, medium, high" in str(info.value)
