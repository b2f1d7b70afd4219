"""After the length probe: answers cut at the cap re-plan it (the memory and time that follow), as any other plan
change: the profile with the larger cap where it fits, else the solver's configuration that holds it, else the
next rung. The supervisor's side runs the fake child (tests/support/fake_child.py, action `long_answers`)."""

from __future__ import annotations

import io
import json

from rich.console import Console
from test_supervise import CPU_MACHINE, call_of, card, cpu_profile, gpu_profile, in_run, run

from contract.length_rule import measure
from launcher.plan.choose import make_plan
from launcher.plan.request import PlanRequest
from launcher.run.attempts import read_attempts
from launcher.run.fallback import replan_lengths
from launcher.run.request import RunRequest
from launcher.run.supervise import supervise
from launcher.run.supervisor import MAX_LENGTH_REPLANS
from support.fake_runs import FAKE_CHILD


def cut_at(cap: int) -> dict:
    """The length probe's figures of answers all cut at `cap`."""
    return {**measure([cap] * 24, [True] * 24, cap).to_json(), "planned_expected": 39, "switches": {}}


def test_cut_answers_double_the_cap_where_it_fits():
    profile = cpu_profile("a", 1, completion=48)
    plan = make_plan(PlanRequest([profile], CPU_MACHINE))
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
    decision = replan_lengths(
        make_plan(PlanRequest([profile], CPU_MACHINE)), profile, cut_at(128), frozenset(), {"a"}, None
    )
    assert decision.changes["max_completion_length"] == [128, 256]
    assert decision.changes["max_seq_length"] == [256, 384]


def test_a_pinned_cap_stays_and_only_the_expected_length_moves():
    profile = cpu_profile("a", 1, completion=48)
    plan = make_plan(PlanRequest([profile], CPU_MACHINE))
    decision = replan_lengths(plan, profile, cut_at(48), frozenset({"max_completion_length"}), {"a"}, None)
    assert decision.changes == {"expected_completion_length": [0, 48]}


def test_a_cap_that_does_not_fit_takes_the_solvers_configuration_on_one_gpu():
    profile = gpu_profile("g", 1, per_device_train_batch_size=8, num_generations=8, max_seq_length=1280)
    plan = make_plan(PlanRequest([profile], card(8)))
    assert plan.candidates[0].fits
    decision = replan_lengths(plan, profile, cut_at(1024), frozenset(), {"g"}, None)
    assert decision.action == "replan" and decision.profile.name == "g"
    assert decision.changes["max_completion_length"] == [1024, 2048]
    assert "at the cap of 2048 this configuration does not fit" in decision.text
    assert len(decision.changes) > 3  # the solver gave up other levers to hold the cap
    again = make_plan(PlanRequest([decision.profile], card(8))).candidates[0]
    assert again.fits, again.reason


def test_nothing_holds_the_cap_here_falls_back_to_the_next_rung():
    big = gpu_profile("g", 1, per_device_train_batch_size=8, num_generations=8, max_seq_length=1280)
    small = gpu_profile("small", 2, model="Qwen/Qwen3-0.6B", max_completion_length=256, max_seq_length=512)
    plan = make_plan(PlanRequest([big, small], card(6, free=6)))
    decision = replan_lengths(plan, big, cut_at(1024), frozenset(), {"g"}, None)
    assert decision.action == "next" and decision.profile.name == "small"
    assert decision.text.startswith("the answers need a cap of 2048 (24 answers: 1024 tokens at the 95th percentile")


def test_unreadable_lengths_fall_back_instead_of_guessing():
    profile = cpu_profile("a", 1)
    decision = replan_lengths(
        make_plan(PlanRequest([profile], CPU_MACHINE)), profile, {"mean": "x"}, frozenset(), {"a"}, None
    )
    assert decision.action == "stop" and decision.text.startswith("the attempt's measured lengths cannot be read")


# ---------------------------------------------------------------------------------------------------
# The supervisor, with the fake child


def test_a_run_whose_answers_are_cut_replans_and_trains_at_the_new_cap(tmp_path, monkeypatch):
    plan = make_plan(PlanRequest([cpu_profile("a", 1, completion=48)], CPU_MACHINE))
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
    plan = make_plan(PlanRequest([cpu_profile("a", 1, completion=32)], CPU_MACHINE))
    code, records, _ = run(plan, tmp_path, monkeypatch, {"a": {"do": "long_answers", "answers": 5000}})
    assert code == 0
    assert [r["status"] for r in records] == ["replanned"] * MAX_LENGTH_REPLANS + ["ok"]
    assert [r["settings"]["max_completion_length"] for r in records] == [32, 64, 128]
    assert call_of(records[-1], tmp_path)["GRPO_LENGTH_REPLAN"] is None  # the last one is told to train on


def test_a_cap_pinned_with_set_is_never_replanned(tmp_path, monkeypatch):
    plan = make_plan(PlanRequest([cpu_profile("a", 1, completion=48)], CPU_MACHINE))
    behaviour = {"a": {"do": "long_answers", "answers": 70}}
    code, records, _ = run(plan, tmp_path, monkeypatch, behaviour, overrides=["max_completion_length=48"])
    assert code == 0 and [r["status"] for r in records] == ["ok"]
    assert call_of(records[0], tmp_path)["GRPO_LENGTH_REPLAN"] is None
    assert records[0]["lengths"]["cut_share"] == 0.5  # measured all the same


# ---------------------------------------------------------------------------------------------------
# A value written in the --profile file is pinned like a --set one


def written_profile(tmp_path, **keys):
    from support.fake_runs import CPU_SETTINGS

    data = dict(CPU_SETTINGS, name="mine", num_generations=8, per_device_train_batch_size=8, max_steps=4, **keys)
    path = tmp_path / "mine.yaml"
    path.write_text("\n".join(f"{k}: {v}" for k, v in data.items()) + "\n")
    return path


def test_the_keys_a_profile_file_writes_are_its_pins(tmp_path):
    from launcher.run.supervisor import written_keys

    path = written_profile(tmp_path, max_completion_length=22, save_steps=2, eval_samples=0)
    pins = written_keys(path)
    assert {"max_completion_length", "max_seq_length", "num_generations"} <= pins
    assert "expected_completion_length" not in pins and "lora_rank" not in pins  # not written: the plan's
    # TRL's name for a key pins the project's key; `auto` is the plan's to derive, not a written value
    path.write_text(path.read_text() + "lora_r: 8\n")
    assert "lora_rank" in written_keys(path)
    path.write_text(path.read_text().replace("max_completion_length: 22\n", "max_completion_length: AUTO\n"))
    assert "max_completion_length" not in written_keys(path)


def test_a_cap_written_in_the_profile_file_is_never_replanned(tmp_path, monkeypatch):
    """`train --profile FILE` runs the file as written: its cap of 22 stays (the attempt says what the answers
    call for, and trains); before, only --set keys were pinned and the cap went 22 -> 44."""
    from contract.attempt import PLAN_FILE
    from launcher.run.supervisor import written_keys
    from profiles.load import load_profile

    path = written_profile(tmp_path, max_completion_length=22, save_steps=2, eval_samples=0)
    plan = make_plan(PlanRequest([load_profile(path)], CPU_MACHINE))
    monkeypatch.setenv("FAKE_CHILD_PLAN", json.dumps({"mine": {"do": "long_answers", "answers": 30}}))
    out = io.StringIO()
    code = supervise(
        plan,
        RunRequest(tmp_path / "out", pinned=written_keys(path)),
        child_command=FAKE_CHILD,
        console=Console(file=out, width=200, highlight=False),
    )
    records = read_attempts(sorted((tmp_path / "out").glob("run-*"))[-1])
    assert code == 0 and [r["status"] for r in records] == ["ok"], out.getvalue()
    assert records[0]["settings"]["max_completion_length"] == 22
    assert call_of(records[0], tmp_path)["GRPO_LENGTH_REPLAN"] is None
    # a resumed run keeps the pins its plan.json holds, whatever its command line says
    run_dir = sorted((tmp_path / "out").glob("run-*"))[-1]
    assert "max_completion_length" in json.loads((run_dir / PLAN_FILE).read_text())["pinned"]
    from launcher.run.supervisor import pins_of_run

    assert "max_completion_length" in pins_of_run(run_dir)


def test_train_with_a_profile_file_runs_its_written_cap(tmp_path, monkeypatch, capsys):
    """`python train.py train --profile FILE` (in this process, the attempt the fake child): the cap of 22 the
    file writes is trained as written; before, the probe's cut answers re-planned it 22 -> 44."""
    import launcher.run.supervise as supervise_module
    from train import main

    path = written_profile(tmp_path, max_completion_length=22, save_steps=2, eval_samples=0)
    real = supervise_module.supervise

    def with_the_fake_child(plan, request):
        return real(plan, request, child_command=FAKE_CHILD, console=Console(file=io.StringIO(), width=200))

    monkeypatch.setattr(supervise_module, "supervise", with_the_fake_child)
    monkeypatch.setenv("FAKE_CHILD_PLAN", json.dumps({"mine": {"do": "long_answers", "answers": 30}}))
    assert main(["train", "--profile", str(path), "--output-dir", str(tmp_path / "out")]) == 0
    records = read_attempts(sorted((tmp_path / "out").glob("run-*"))[-1])
    assert [r["status"] for r in records] == ["ok"]
    assert records[0]["settings"]["max_completion_length"] == 22
    assert call_of(records[0], tmp_path)["GRPO_LENGTH_REPLAN"] is None


def test_a_pinned_sequence_length_bounds_the_replanned_cap(tmp_path):
    from launcher.run.supervisor import cap_may_grow

    profile = cpu_profile("a", 1, completion=48)  # 128 prompt + 48 of the 256 of max_seq_length
    plan = make_plan(PlanRequest([profile], CPU_MACHINE))
    decision = replan_lengths(plan, profile, cut_at(48), frozenset({"max_seq_length"}), {"a"}, None)
    assert decision.changes["max_completion_length"] == [48, 96] and "max_seq_length" not in decision.changes
    # answers cut at 112 would call for 224: the 256 of the pinned sequence holds 128 of them
    wide = cpu_profile("w", 1, completion=112)
    decision = replan_lengths(
        make_plan(PlanRequest([wide], CPU_MACHINE)), wide, cut_at(112), frozenset({"max_seq_length"}), {"w"}, None
    )
    assert decision.changes["max_completion_length"] == [112, 128] and "max_seq_length" not in decision.changes
    full = cpu_profile("b", 1, completion=128)
    assert cap_may_grow(profile, {"max_seq_length"}) and not cap_may_grow(full, {"max_seq_length"})
    assert not cap_may_grow(profile, {"max_completion_length"}) and cap_may_grow(full, set())


def test_a_run_folders_pins_read_back_whatever_its_plan_json_holds(tmp_path):
    from launcher.run.supervisor import pins_of_run

    assert pins_of_run(tmp_path) == frozenset()
    for text, pins in (
        ('{"pinned": ["max_completion_length", 3, null]}', {"max_completion_length"}),
        ('{"pinned": "max_completion_length"}', set()),
        ("[1, 2]", set()),
        ("not json", set()),
    ):
        (tmp_path / "plan.json").write_text(text)
        assert pins_of_run(tmp_path) == pins, text
