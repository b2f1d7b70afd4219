"""The length probe when not one answer ends within the cap (a thinking model planned short): it re-plans where
the supervisor re-plans, and where nothing may (the cap pinned, or started by hand) it keeps the cap and says
what the answers call for."""

from __future__ import annotations

from types import SimpleNamespace

from contract.environment import ENV_LENGTH_REPLAN
from contract.length_rule import PROBE, measure, overruled
from trainer.answer_lengths import stops_for_replan


def _probed(cap: int, expected: int | None = None):
    """An attempt's state and the probe's figures: 8 answers, every one cut at `cap`."""
    measured = measure([cap] * 8, [True] * 8, cap, PROBE)
    assert measured is not None
    figures = {**measured.to_json(), "planned_cap": cap, "planned_expected": expected}
    figures["overruled"] = overruled(measured, cap, expected)
    profile = SimpleNamespace(max_completion_length=cap, max_seq_length=1024, max_prompt_length=256)
    return SimpleNamespace(profile=profile), figures


def test_answers_all_cut_stop_the_attempt_for_a_replan(monkeypatch, capsys):
    state, figures = _probed(768, expected=217)
    assert figures["cut_share"] == 1.0 and figures["censored"]
    monkeypatch.setenv(ENV_LENGTH_REPLAN, "1")
    assert stops_for_replan(state, figures)
    said = capsys.readouterr().out
    assert "none of the 8 answers ended within the cap of 768 tokens" in said
    assert "stopping before training to re-plan the cap" in said
    assert "held" not in figures


def test_answers_all_cut_under_a_pinned_cap_train_as_they_are_and_say_what_would_change(monkeypatch, capsys):
    state, figures = _probed(768, expected=217)
    monkeypatch.delenv(ENV_LENGTH_REPLAN, raising=False)
    assert not stops_for_replan(state, figures)
    assert state.profile.max_completion_length == 768  # the pinned value is never changed
    # the cap doubles (cut answers only say they run longer) and the sequence holds the prompt and it
    assert figures["held"] == {"max_completion_length": [768, 1536], "max_seq_length": [1024, 1792]}
    said = capsys.readouterr().out
    assert "training at the cap of 768 tokens as it is" in said
    assert "--set max_completion_length=1536 --set max_seq_length=1792" in said
