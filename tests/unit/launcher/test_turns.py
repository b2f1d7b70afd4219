"""Planning for turns: with tools, the completion the task needs holds the calls and the tools' replies (TRL
counts both against max_completion_length), and a step's generation runs in rounds, each later round one
request per completion whose prompt is prefilled again."""

from __future__ import annotations

import json

import pytest

from launcher.card.detect import GpuInfo
from launcher.plan.completion_lengths import CAP_STEP, completion_plan
from launcher.plan.speed import predict
from launcher.plan.turns import CALL_TOKENS, TURN_MARKER_TOKENS, rounds, turn_plan
from profiles.catalog import chars_per_token, resolve
from profiles.load import profile_from_dict
from support.cli import train_py
from tools.guard import MAX_OUTPUT_CHARS

L4 = GpuInfo("NVIDIA L4", 22.03, 22.03, 0.0, (8, 9), None, None, 0, "what-if")
BASE = {
    "model": "unsloth/Qwen2.5-7B-Instruct",
    "dataset": "gsm8k",
    "load_in_4bit": True,
    "max_seq_length": 2048,
    "max_prompt_length": 256,
    "max_completion_length": 1024,
    "num_generations": 8,
    "per_device_train_batch_size": 8,
    "gradient_accumulation_steps": 1,
}


def profile(**keys):
    return profile_from_dict({**BASE, **keys}, "<test>")


def test_without_tools_nothing_changes():
    plain = profile()
    arch = resolve(plain.model)
    assert completion_plan(plain, arch).turns is None
    assert turn_plan(plain, 4.0) is None
    shape_rounds = rounds(type("S", (), {"tool_calls": 0})())
    assert len(shape_rounds) == 1


@pytest.mark.parametrize("calls", [1, 4])
def test_the_cap_and_expected_length_hold_every_call_and_reply(calls):
    plain, tools = profile(), profile(tools=["calculate"], max_tool_calls=calls)
    arch = resolve(plain.model)
    before, after = completion_plan(plain, arch), completion_plan(tools, arch)
    turns = after.turns
    rate, _ = chars_per_token(arch)
    assert turns.calls == calls and turns.call_tokens == CALL_TOKENS
    assert turns.reply_tokens == -(-24 // rate) + TURN_MARKER_TOKENS  # the calculator's replies: 24 characters
    assert after.expected == before.expected + calls * (CALL_TOKENS + turns.reply_tokens)
    assert after.cap >= before.cap + turns.extra_tokens and after.cap % CAP_STEP == 0
    assert f"{calls} tool calls a completion" in after.basis
    assert after.prompt_expected == min(plain.max_prompt_length, before.prompt_expected + turns.schema_tokens)


def test_a_users_tool_is_planned_at_the_guards_cap_on_a_reply(tmp_path):
    path = tmp_path / "t.py"
    path.write_text(
        "raise SystemExit('never imported by the planner')\n\n"
        'def look(q: str) -> str:\n    """Look a word up.\n\n    Args:\n        q: the word\n    """\n    return q\n'
    )
    turns = turn_plan(profile(tools=[f"{path}:look"], max_tool_calls=2), 4.0)
    assert turns.reply_tokens == MAX_OUTPUT_CHARS // 4 + TURN_MARKER_TOKENS
    assert "the guard's cap" in turns.basis


def test_each_turn_is_a_round_with_its_prompt_prefilled_again():
    tools = profile(tools=["calculate"], max_tool_calls=3)
    from launcher.plan.step_shape import shape_of

    shape = shape_of(tools, resolve(tools.model), L4)
    parts = rounds(shape)
    turn = shape.call_tokens + shape.reply_tokens
    assert len(parts) == 4
    assert (parts[0].prompts, parts[0].generations, parts[0].prompt_tokens) == (1, 8, shape.prompt_tokens)
    for k, part in enumerate(parts[1:], start=1):
        assert (part.prompts, part.generations) == (8, 1)  # one request per completion, its own history
        assert part.prompt_tokens == shape.prompt_tokens + k * turn
    assert parts[-1].expected == shape.expected - 3 * turn  # the answer, last


def test_step_time_grows_with_the_turns_memory_does_not_at_a_pinned_cap():
    plain = profile()
    arch = resolve(plain.model)
    one, four = profile(tools=["calculate"], max_tool_calls=1), profile(tools=["calculate"], max_tool_calls=4)
    times = [predict(p, arch, L4) for p in (plain, one, four)]
    assert times[0].generation_s < times[1].generation_s < times[2].generation_s
    assert times[0].training_s <= times[1].training_s <= times[2].training_s


def test_plan_json_shows_the_turns_assumed(tmp_path):
    done = train_py(
        "plan", "--gpu-memory", "24", "--gpu-name", "NVIDIA L4", "--profile", "profiles/gpu-24gb-llama3.1-8b.yaml",
        "--set", "tools=[calculate]", "--set", "max_tool_calls=4", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    candidate = json.loads(done.stdout)["candidates"][0]
    assert candidate["turns"]["tool_calls"] == 4 and candidate["turns"]["model_turns"] == 5
    done = train_py("plan", "--gpu-memory", "24", "--profile", "profiles/gpu-24gb-llama3.1-8b.yaml", "--json")
    assert "turns" not in json.loads(done.stdout)["candidates"][0]


def test_the_ledger_tells_a_run_with_tools_from_one_without():
    from launcher.memory.ledger.store import fingerprint, memory_settings

    plain = profile()
    assert "tool_turns" not in memory_settings(plain)  # the fingerprints measured before tools stay valid
    one, four = profile(tools=["calculate"], max_tool_calls=1), profile(tools=["calculate"], max_tool_calls=4)
    assert len({fingerprint(plain), fingerprint(one), fingerprint(four)}) == 3
