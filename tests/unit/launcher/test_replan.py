"""After the length probe: answers cut at the cap re-plan it (the memory and time that follow), as any other plan
change: the profile with the larger cap where it fits, else the solver's configuration that holds it, else the
next rung. The supervisor's side runs the fake child (tests/support/fake_child.py, action `long_answers`)."""

from __future__ import annotations

import json

from test_supervise import CPU_MACHINE, call_of, card, cpu_profile, gpu_profile, in_run, run

from contract.lengths import measure
from launcher.plan.choose import make_plan
from launcher.run.fallback import replan_lengths
from launcher.run.supervise import MAX_LENGTH_REPLANS


def cut_at(cap: int) -> dict:
    """The length probe's figures of answers all cut at `cap`."""
    return {**measure([cap] * 24, [True] * 24, cap).to_json(), "planned_expected": 39, "switches": {}}


def test_cut_answers_double_the_cap_where_it_fits():
    profile = cpu_profile("a", 1, completion=48)
    plan = make_plan([profile], CPU_MACHINE)
    decision = replan_lengths(plan, profile, cut_at(48), frozenset(), {"a"}, None)
    assert decision.action == "replan" and decision.profile.name == "a"
    # 128 prompt + 96 completion still fit the profile's max_seq_length of 256
    assert decision.changes == {"max_completion_length": [48, 96], "expected_completion_length": [0, 48]}
    assert decision.profile.max_completion_length == 96
    assert decision.profile.max_prompt_length + 96 <= decision.profile.max_seq_length
    assert decision.text.startswith("re-planned from the measured answers (24 answers: 48 tokens at the 95th")
    assert "fits:" in decision.text


def test_the_sequence_length_grows_to_hold_the_new_cap():
    profile = cpu_profile("a", 1, completion=128)  # 128 prompt + 128 completion = the 256 of max_seq_length
    decision = replan_lengths(make_plan([profile], CPU_MACHINE), profile, cut_at(128), frozenset(), {"a"}, None)
    assert decision.changes["max_completion_length"] == [128, 256]
    assert decision.changes["max_seq_length"] == [256, 384]


def test_a_pinned_cap_stays_and_only_the_expected_length_moves():
    profile = cpu_profile("a", 1, completion=48)
    plan = make_plan([profile], CPU_MACHINE)
    decision = replan_lengths(plan, profile, cut_at(48), frozenset({"max_completion_length"}), {"a"}, None)
    assert decision.changes == {"expected_completion_length": [0, 48]}


def test_a_cap_that_does_not_fit_takes_the_solvers_configuration_on_one_gpu():
    profile = gpu_profile("g", 1, per_device_train_batch_size=8, num_generations=8, max_seq_length=1280)
    plan = make_plan([profile], card(8))
    assert plan.candidates[0].fits
    decision = replan_lengths(plan, profile, cut_at(1024), frozenset(), {"g"}, None)
    assert decision.action == "replan" and decision.profile.name == "g"
    assert decision.changes["max_completion_length"] == [1024, 2048]
    assert "at the cap of 2048 this configuration does not fit" in decision.text
    assert len(decision.changes) > 3  # the solver gave up other levers to hold the cap
    again = make_plan([decision.profile], card(8)).candidates[0]
    assert again.fits, again.reason


def test_nothing_holds_the_cap_here_falls_back_to_the_next_rung():
    big = gpu_profile("g", 1, per_device_train_batch_size=8, num_generations=8, max_seq_length=1280)
    small = gpu_profile("small", 2, model="Qwen/Qwen3-0.6B", max_completion_length=256, max_seq_length=512)
    plan = make_plan([big, small], card(6, free=6))
    decision = replan_lengths(plan, big, cut_at(1024), frozenset(), {"g"}, None)
    assert decision.action == "next" and decision.profile.name == "small"
    assert decision.text.startswith("the answers need a cap of 2048 (24 answers: 1024 tokens at the 95th percentile")


def test_unreadable_lengths_fall_back_instead_of_guessing():
    profile = cpu_profile("a", 1)
    decision = replan_lengths(make_plan([profile], CPU_MACHINE), profile, {"mean": "x"}, frozenset(), {"a"}, None)
    assert decision.action == "stop" and decision.text.startswith("the attempt's measured lengths cannot be read")


# ---------------------------------------------------------------------------------------------------
# The supervisor, with the fake child


def test_a_run_whose_answers_are_cut_replans_and_trains_at_the_new_cap(tmp_path, monkeypatch):
    plan = make_plan([cpu_profile("a", 1, completion=48)], CPU_MACHINE)
    code, records, text = run(plan, tmp_path, monkeypatch, {"a": {"do": "long_answers", "answers": 70}})
    assert code == 0
    assert [r["status"] for r in records] == ["replanned", "ok"]
    first, second = records
    assert first["steps"] == 0 and first["lengths"]["p95"] == 48 and first["lengths"]["cut_share"] == 0.5
    assert second["replanned"]["max_completion_length"] == [48, 96]
    assert second["settings"]["max_completion_length"] == 96
    assert second["decided"].startswith("re-planned from the measured answers")
    told = call_of(first, tmp_path)
    assert told["GRPO_LENGTH_REPLAN"] == "1" and int(told["GRPO_ATTEMPT_EXPECTED_TOKENS"]) > 0
    assert call_of(second, tmp_path)["max_completion_length"] == 96
    assert "replanned" in text and "re-planned: max_completion_length 48->96" in text
    # the ledger keeps the lengths, under the model, task and template switches
    ledger = [json.loads(line) for line in (tmp_path / "ledger.jsonl").read_text().splitlines()]
    lengths = [e["lengths"] for e in ledger if e.get("lengths")]
    assert lengths[0]["model"] == "tiny" and lengths[0]["task"] == "arithmetic" and lengths[0]["p95"] == 48
    assert (in_run(tmp_path, second["attempt_dir"]) / "profile.yaml").read_text().count("max_completion_length: 96")


def test_replans_stop_after_the_limit_and_the_run_trains_with_what_it_has(tmp_path, monkeypatch):
    plan = make_plan([cpu_profile("a", 1, completion=32)], CPU_MACHINE)
    code, records, _ = run(plan, tmp_path, monkeypatch, {"a": {"do": "long_answers", "answers": 5000}})
    assert code == 0
    assert [r["status"] for r in records] == ["replanned"] * MAX_LENGTH_REPLANS + ["ok"]
    assert [r["settings"]["max_completion_length"] for r in records] == [32, 64, 128]
    assert call_of(records[-1], tmp_path)["GRPO_LENGTH_REPLAN"] is None  # the last one is told to train on


def test_a_cap_pinned_with_set_is_never_replanned(tmp_path, monkeypatch):
    plan = make_plan([cpu_profile("a", 1, completion=48)], CPU_MACHINE)
    behaviour = {"a": {"do": "long_answers", "answers": 70}}
    code, records, _ = run(plan, tmp_path, monkeypatch, behaviour, overrides=["max_completion_length=48"])
    assert code == 0 and [r["status"] for r in records] == ["ok"]
    assert call_of(records[0], tmp_path)["GRPO_LENGTH_REPLAN"] is None
    assert records[0]["lengths"]["cut_share"] == 0.5  # measured all the same
