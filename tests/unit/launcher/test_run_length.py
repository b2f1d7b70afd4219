"""The run a plan predicts (launcher.plan.duration): its length from the user's pins in TRL's order, the stated
default, --hours, and what `plan` says of it (steps, prompts, epochs, hours, finishing time)."""

import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from commands import main
from commands.attempt import with_run_length
from commands.plan import print_plan
from contract.errors import ProfileError
from launcher.card.detect import detect_machine
from launcher.plan.choose import make_plan
from launcher.plan.duration import DEFAULT_HOURS, DEFAULT_STEPS, run_length
from launcher.plan.request import PlanRequest
from profiles.load import load_profile, load_profiles
from tasks import ARITHMETIC_TRAIN_SIZE, PROGRAMS_TRAIN_SIZE
from tasks.size import ARITHMETIC_TRAIN_ROWS, GSM8K_TRAIN_ROWS, PROGRAMS_TRAIN_ROWS, train_rows

REPO = Path(__file__).resolve().parents[3]
PROFILES = REPO / "profiles"
H100 = ("79.6", "NVIDIA H100 80GB HBM3")


def rung(**changes):
    return load_profile(PROFILES / "gpu-80gb-qwen2.5-14b.yaml").model_copy(update=changes)


def test_the_default_is_one_epoch_or_the_default_hours_whichever_is_less():
    # fast steps: one epoch of 7,473 prompts at 8 a step is 935 steps, well inside the default hours
    run = run_length(rung(), 2.0, 8, rows=7473)
    assert (run.steps, run.epochs) == (935, pytest.approx(1.0, abs=0.01)) and run.basis.startswith("default: one epoch")
    # slow steps: the default hours bound it, less than an epoch
    run = run_length(rung(), 60.0, 8, rows=7473)
    assert run.steps == int(DEFAULT_HOURS * 3600 // 60.0) and run.hours <= DEFAULT_HOURS
    assert run.epochs < 1 and run.basis.startswith(f"default: {DEFAULT_HOURS:g} h")
    # neither known: the stated default number of steps
    assert run_length(rung(), None, 8).steps == DEFAULT_STEPS


def test_pins_win_in_trls_order_and_epochs_count_prompts_as_trl_does():
    assert run_length(rung(max_steps=300, num_train_epochs=2.0), 5.0, 8, rows=7473, hours=1.0).steps == 300
    # TRL's epoch: every prompt generated once; num_iterations repeats each batch, so an epoch is rows x mu / P
    run = run_length(rung(num_train_epochs=2.0), 5.0, 8, rows=7473)
    assert run.steps == 1869 and run.epochs == pytest.approx(2.0, abs=0.01)
    assert run_length(rung(num_train_epochs=1.0, num_iterations=4), 5.0, 8, rows=7473).steps == 3737
    # --hours: the steps the predicted step fits into the budget, which the run also keeps
    run = run_length(rung(), 30.0, 8, rows=7473, hours=2.0)
    assert (run.steps, run.budget_hours) == (240, 2.0) and run.hours == pytest.approx(2.0)


def test_epochs_of_data_whose_size_is_unknown_are_refused_naming_the_key():
    with pytest.raises(ProfileError) as error:
        run_length(rung(num_train_epochs=1.0, dataset="org/data"), 5.0, 8, rows=None, rows_basis="a hub dataset")
    assert error.value.key == "num_train_epochs" and "max_steps" in error.value.fix


def test_the_training_split_is_counted_without_loading_it(tmp_path):
    assert train_rows("gsm8k") == (GSM8K_TRAIN_ROWS, "GSM8K's train split")
    assert train_rows("arithmetic", 2000)[0] == 2000 and ARITHMETIC_TRAIN_ROWS == ARITHMETIC_TRAIN_SIZE
    assert train_rows("programs")[0] == PROGRAMS_TRAIN_ROWS == PROGRAMS_TRAIN_SIZE
    data = tmp_path / "mine.jsonl"
    data.write_text("".join(json.dumps({"question": str(i), "answer": str(i)}) + "\n" for i in range(37)))
    assert train_rows(str(data))[0] == 37
    assert train_rows("org/some-hub-data")[0] is None


def test_an_attempt_started_by_hand_gets_a_run_length():
    profile = load_profile(PROFILES / "cpu-tiny-8gen.yaml", ["max_steps=auto"])
    assert profile.max_steps == 0
    # 2,000 training problems at 16 prompts a step: one epoch
    assert with_run_length(profile).max_steps == 125


def test_no_default_plan_of_the_shipped_ladder_predicts_more_than_the_default_hours():
    for gib, name in (("15", "Tesla T4"), ("24", "NVIDIA GeForce RTX 4090"), H100):
        machine = detect_machine(what_if_gib=float(gib), what_if_name=name)
        rungs = [p for p in load_profiles(PROFILES) if p.device == "cuda"]
        plan = make_plan(PlanRequest(rungs, machine))
        for cand in plan.candidates:
            if cand.fits and cand.written is not None:  # a rung whose run the plan decides
                assert cand.run.hours <= DEFAULT_HOURS + 1e-9, (name, cand.profile.name, cand.run)
                assert cand.run.steps >= cand.profile.min_updates, (name, cand.profile.name)


def test_plan_prints_and_carries_the_run_with_its_finishing_time(capsys):
    code = main(["plan", "--gpu-memory", H100[0], "--gpu-name", H100[1], "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    for cand in out["candidates"]:
        assert {"steps", "prompts", "epochs", "hours"} <= set(cand["run"])
        assert cand["settings"]["max_steps"] == cand["run"]["steps"]  # the attempt trains what the plan says
    chosen = next(c for c in out["candidates"] if c["profile"] == out["chosen"])
    assert chosen["run"]["hours"] == pytest.approx(chosen["run"]["steps"] * chosen["speed"]["step_s"] / 3600, rel=0.01)

    machine = detect_machine(what_if_gib=float(H100[0]), what_if_name=H100[1])
    plan = make_plan(PlanRequest([load_profile(PROFILES / "gpu-16gb-gemma3-1b.yaml")], machine))
    print_plan(plan, now=datetime(2030, 1, 2, 3, 4))
    text = capsys.readouterr().out
    run = plan.candidates[0].run
    finish = datetime(2030, 1, 2, 3, 4) + timedelta(hours=run.total_hours)
    assert f"run: {run.steps:,} steps, {run.prompts:,} prompts" in text
    assert f"finishing about {finish:%Y-%m-%d %H:%M}" in text


def test_hours_sets_the_run_and_the_budget(capsys):
    code = main(["plan", "--gpu-memory", H100[0], "--gpu-name", H100[1], "--hours", "1.5", "--json"])
    out = json.loads(capsys.readouterr().out)
    chosen = next(c for c in out["candidates"] if c["profile"] == out["chosen"])
    assert code == 0 and chosen["run"]["budget_hours"] == 1.5 and chosen["run"]["hours"] <= 1.5


@pytest.mark.parametrize("hours, said", [(0.01, "36 s"), (0.0000001, "0 s"), (0.5, "30 min"), (2.0, "2 h 00 min")])
def test_the_budget_is_said_at_its_own_scale(hours, said):
    # a budget of seconds was said "1 min"
    run = run_length(rung(), 2.0, 8, hours=hours, rows=7473)
    assert run.text().endswith(f"; stops at its budget of {said}")


@pytest.mark.parametrize("value", ["0", "-1", "nan", "1e9", "two"])
def test_a_budget_that_is_not_a_number_of_hours_exits_2(value, capsys):
    assert main(["plan", "--hours", value]) == 2
    assert "--hours" in capsys.readouterr().err


def test_a_pinned_run_past_its_budget_is_said_before_it_starts(capsys):
    code = main(
        ["plan", "--gpu-memory", H100[0], "--gpu-name", H100[1], "--set", "max_steps=2000", "--hours", "2", "--json"]
    )
    out = json.loads(capsys.readouterr().out)
    chosen = next(c for c in out["candidates"] if c["profile"] == out["chosen"])
    assert code == 0 and chosen["run"]["steps"] == 2000 and chosen["run"]["hours"] > 2.2
    assert any("past the --hours 2 budget by more than 10%" in note for note in out["notes"])
