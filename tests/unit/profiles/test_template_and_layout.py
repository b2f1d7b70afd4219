"""Profile keys of this round: chat_template_kwargs (the template's switches, TRL's name) and length_probe; and
rewards that follow the prompt: a system prompt asking for <think>/<answer> is scored by the rewards for those
tags, open-r1's format / tag_count follow the recipe's prompt, and a prompt and format reward that disagree are
refused at load (exit 2) naming both and the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contract.errors import ProfileError
from profiles.load import load_profile
from rewards import REWARDS, for_layout
from rewards.parse import REASONING_LAYOUT, THINK_LAYOUT, asked_layout
from support.cli import train_py
from support.recipes import OPEN_R1_RECIPE, write

REPO = Path(__file__).resolve().parents[3]
CPU = REPO / "profiles" / "cpu-tiny-4gen.yaml"
R1_PROMPT = (
    "A conversation between User and Assistant. The assistant first thinks about the reasoning process in the mind "
    "and then provides the user with the answer. Respond in the following format: "
    "<think>\n...\n</think>\n<answer>\n...\n</answer>"
)


def test_template_switches_are_a_mapping_of_names_to_plain_values():
    profile = load_profile(CPU, ["chat_template_kwargs={enable_thinking: true, reasoning_effort: low}"])
    assert profile.chat_template_kwargs == {"enable_thinking": True, "reasoning_effort": "low"}
    assert load_profile(CPU).chat_template_kwargs == {}
    for value, words in (
        ("[enable_thinking]", "expected a mapping of switch name to value"),
        ("{tokenize: false}", "'tokenize' is an argument of apply_chat_template itself"),
        ("{add_generation_prompt: false}", "fix: remove add_generation_prompt"),
        ("{reasoning_effort: [1, 2]}", "a switch is true/false, a number or a word"),
        ("{enable_thinking: [1, 2]}", "enable_thinking is [1, 2], not true or false"),
        ("{'not a name': 1}", "is not a template variable name"),
        # names the renderer beneath apply_chat_template takes itself: a TypeError after the model loads
        ("{messages: 1}", "'messages' is a name the chat template's renderer gives the template itself"),
        ("{conversations: []}", "fix: remove conversations"),
        ("{processing_class: x}", "fix: remove processing_class"),
        ("{raise_exception: 0}", "fix: remove raise_exception"),
        # Qwen3 thinks unless enable_thinking is false itself: 0, "", "false" in quotes and an empty value think
        ("{enable_thinking: 0}", "enable_thinking is 0, not true or false"),
        ("{enable_thinking: ''}", "enable_thinking is '', not true or false"),
        ("{enable_thinking: 'false'}", "write enable_thinking: false (no thinking) or enable_thinking: true"),
        ("{enable_thinking: }", "enable_thinking is None, not true or false"),
        ("{enable_thinking: 1.0}", "enable_thinking is 1.0"),
    ):
        with pytest.raises(ProfileError, match="chat_template_kwargs") as info:
            load_profile(CPU, [f"chat_template_kwargs={value}"])
        assert words in str(info.value)
    assert load_profile(CPU, ["chat_template_kwargs={enable_thinking: false}"]).chat_template_kwargs == {
        "enable_thinking": False
    }


def test_the_planner_reads_the_thinking_switch_as_qwen3s_template_does():
    from tasks.prompts import thinks

    assert not thinks({"enable_thinking": False}, True)
    for value in (True, 0, "", None, "false", 0.0):  # Qwen3: `enable_thinking is false` alone turns it off
        assert thinks({"enable_thinking": value}, True), value
    assert thinks({}, True) and not thinks({"enable_thinking": True}, False)


@pytest.mark.parametrize(
    "switches, words",
    [
        ("{messages: 1}", "key 'chat_template_kwargs': 'messages' is a name the chat template's renderer gives"),
        ("{enable_thinking: 0}", "key 'chat_template_kwargs': enable_thinking is 0, not true or false"),
    ],
)
def test_profiles_check_refuses_a_switch_that_cannot_render_with_exit_2(tmp_path, capsys, switches, words):
    """Before, `{messages: 1}` passed `profiles check` and the run died after the model loaded with a TypeError;
    `{enable_thinking: 0}` passed and was planned as not thinking, while Qwen3's template thinks."""
    from train import main

    path = write(
        tmp_path,
        "switch.yaml",
        "model: tiny\ndevice: cpu\nload_in_4bit: false\nfast_inference: false\noptim: adamw_torch\n"
        f"chat_template_kwargs: {switches}\n",
    )
    assert main(["profiles", "check", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"switch.yaml: {words}" in err and "fix: " in err and "Traceback" not in err


def test_length_probe_counts_prompts_and_zero_turns_it_off():
    assert load_profile(CPU).length_probe == 24
    assert load_profile(CPU, ["length_probe=0"]).length_probe == 0
    with pytest.raises(ProfileError, match="length_probe"):
        load_profile(CPU, ["length_probe=-1"])


def test_the_layout_a_prompt_asks_for():
    from tasks.prompts import SYSTEM_PROMPT

    assert asked_layout(SYSTEM_PROMPT) == REASONING_LAYOUT
    assert asked_layout(R1_PROMPT) == THINK_LAYOUT
    assert asked_layout("Answer briefly.") is None and asked_layout("<think> or <reasoning>") is None
    assert asked_layout(None) is None


def test_think_rewards_score_the_think_layout_exactly():
    right = "<think>\n3 + 4 = 7\n</think>\n<answer>\n7\n</answer>"
    blank_line = "<think>\n3 + 4 = 7\n</think>\n\n<answer>\n7\n</answer>\n"  # as Qwen3's thinking template ends a block
    cases = [right, blank_line, "say <think>\nx\n</think>\n<answer>\n7\n</answer>", "<think>\nx", "7"]
    assert REWARDS["think_format"](cases) == [1.0, 1.0, 0.0, 0.0, 0.0]
    assert REWARDS["think_count"](cases) == [1.0, 1.0, 1.0, 0.25, 0.0]
    reasoning = "<reasoning>\n3 + 4 = 7\n</reasoning>\n<answer>\n7\n</answer>"
    assert REWARDS["think_format"]([reasoning]) == [0.0] and REWARDS["xml_strict"]([right]) == [0.0]
    # every reward for the think layout gives a right answer in it full marks
    assert {name: fn([right], answer=["7"])[0] for name, fn in for_layout(THINK_LAYOUT).items()} == {
        name: 1.0 for name in for_layout(THINK_LAYOUT)
    }


def test_a_prompt_and_format_reward_that_disagree_are_refused():
    with pytest.raises(ProfileError) as info:
        load_profile(CPU, [f"system_prompt={json.dumps(R1_PROMPT)}"])
    text = str(info.value)
    assert "key 'rewards'" in text
    assert "and xml_count, xml_soft score the <reasoning>/<answer> layout" in text
    assert "fix: score the prompt's layout with think_format / think_count" in text
    with pytest.raises(ProfileError, match="asks for the <reasoning>/<answer> layout, and think_format scores"):
        load_profile(CPU, ["rewards={think_format: 1.0, accuracy: 2.0}"])
    agreed = load_profile(
        CPU, [f"system_prompt={json.dumps(R1_PROMPT)}", "rewards={think_format: 1.0, think_count: 1.0, accuracy: 2.0}"]
    )
    assert list(agreed.rewards) == ["think_format", "think_count", "accuracy"]
    # a prompt that asks for no layout says nothing of the format rewards
    assert load_profile(CPU, ["system_prompt=Answer with a number."]).system_prompt == "Answer with a number."


def test_open_r1_format_rewards_follow_the_recipes_prompt(tmp_path):
    plain = load_profile(write(tmp_path, "plain.yaml", OPEN_R1_RECIPE))
    assert list(plain.rewards) == ["math", "xml_strict", "xml_count"]  # the project's default prompt
    recipe = OPEN_R1_RECIPE + f"system_prompt: {json.dumps(R1_PROMPT)}\n"
    think = load_profile(write(tmp_path, "think.yaml", recipe))
    assert think.rewards == {"math": 2.0, "think_format": 0.5, "think_count": 1.0}
    reading = next(r for r in think.readings if r.key == "reward_funcs")
    assert "score the <think>/<answer> layout its system_prompt asks for" in reading.note


def test_profiles_check_refuses_the_disagreement_with_exit_2(tmp_path):
    path = write(
        tmp_path,
        "mixed.yaml",
        f"model: tiny\ndevice: cpu\nload_in_4bit: false\nfast_inference: false\n"
        f"optim: adamw_torch\nsystem_prompt: {json.dumps(R1_PROMPT)}\n",
    )
    done = train_py("profiles", "check", str(path))
    assert done.returncode == 2
    assert "mixed.yaml: key 'rewards': system_prompt asks for the <think>/<answer> layout" in done.stderr
    assert "Traceback" not in done.stderr
