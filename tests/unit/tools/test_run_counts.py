"""summary.json counts the run's own tool calls (tools.guard.RECORD): calls made in the same process for something
else are counted apart (tools.guard.apart). Building the tiny tool-calling model is such work: an attempt with a
fresh cache builds it before training, and its held-out measurement plays the guessing game (hundreds of `guess`
calls) whatever tools the run itself offers."""

from __future__ import annotations

from types import SimpleNamespace

import pytest


@pytest.fixture
def fresh_record(monkeypatch):
    """The run's record as a new attempt's process starts with it: empty."""
    from tools import guard

    record = guard.ToolRecord()
    monkeypatch.setattr(guard, "RECORD", record)
    return record


def test_calls_made_apart_are_counted_there_and_not_as_the_runs(fresh_record):
    from tools import load_environment, load_tools
    from tools.guard import ToolRecord, apart, guarded

    (calculate,) = load_tools(["calculate"])
    own = ToolRecord()
    echo = guarded(lambda text: text, "echo", record=own)
    with apart() as aside:
        calculate(expression="2 + 3")
        game = load_environment("guess")()
        game.reset(answer=5)
        assert game.guess(number=4) == "higher"
        echo("a tool guarded with a record of its own keeps counting there")
    assert aside.calls == {"calculate": 1, "guess": 1}
    assert own.calls == {"echo": 1}
    assert fresh_record.calls == {}
    calculate(expression="1 + 1")  # outside: the run's
    assert fresh_record.calls == {"calculate": 1} and aside.calls["calculate"] == 1


def test_a_run_without_the_game_counts_no_guess_though_the_tool_model_was_measured_in_its_process(
    tiny_tools_model, fresh_record
):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tiny_model.tool_variant import measure_heldout
    from tools import load_tools
    from trainer.stages import tool_summary

    tokenizer = AutoTokenizer.from_pretrained(tiny_tools_model)
    model = AutoModelForCausalLM.from_pretrained(tiny_tools_model)
    model.eval()
    built = measure_heldout(model, tokenizer, rows=8)  # what the build runs (on 200 rows) after its pass
    assert built["game"]["tool_calls_per_answer"] > 0  # the game was played: `guess` was called
    (calculate,) = load_tools(["calculate"])  # the run offers the calculator alone, and calls it once
    assert calculate(expression="4 + 8") == "12"
    state = SimpleNamespace(profile=SimpleNamespace(max_tool_calls=2))
    summary = tool_summary(state, SimpleNamespace(tools=[calculate], environment=None), {}, {})
    assert summary["guard"]["calls"] == {"calculate": 1}
