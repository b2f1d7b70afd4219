"""The whole run a plan states (launcher.plan.run_time) and the CPU's step-time model (launcher.plan.cpu_speed):
the parts beside the steps counted as the trainer meets them, a CPU plan that states its duration, and a budget
of hours that holds the whole run."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

from commands import main
from launcher.memory.ledger.weigh import Measured
from launcher.plan import cpu_speed
from launcher.plan.run_time import run_time
from launcher.plan.step_shape import shape_of
from profiles.catalog import resolve
from profiles.evaluation_steps import eval_interval
from profiles.load import load_profile

REPO = Path(__file__).resolve().parents[3]
CPU_DEFAULT = REPO / "profiles" / "cpu-tiny-8gen.yaml"
H100 = ("79.6", "NVIDIA H100 80GB HBM3")


def _chosen(args: list[str], capsys) -> dict:
    assert main(["plan", *args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    return next(c for c in out["candidates"] if c["profile"] == out["chosen"])


def test_a_cpu_plan_states_its_step_and_the_whole_run(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("GRPO_TRAIN_LEDGER", str(tmp_path / "ledger.jsonl"))  # the model's figures, no measurement
    chosen = _chosen(["--profile", str(CPU_DEFAULT)], capsys)
    run, speed = chosen["run"], chosen["speed"]
    assert speed["step_s"] > 0 and speed["measured_step_s"] is None
    assert run["hours"] == pytest.approx(run["steps"] * speed["step_s"] / 3600, abs=6e-4)  # both rounded
    beside = run["beside_steps"]
    assert {"start_s", "probes_s", "evaluations_s", "checkpoints_s", "report_s"} <= set(beside)
    assert run["total_hours"] > run["hours"]
    parts = sum(v for k, v in beside.items() if k.endswith("_s"))
    assert run["total_hours"] * 3600 == pytest.approx(run["hours"] * 3600 + parts, abs=3.0)


@pytest.mark.parametrize("steps", [1, 39, 40, 41, 100, 400])
def test_evaluations_are_counted_as_the_trainer_makes_them(steps):
    """Before training, every eval_steps strictly inside the run (trainer.callbacks), and after it."""
    profile = load_profile(CPU_DEFAULT, [f"max_steps={steps}"])
    every, _ = eval_interval(profile)
    during = sum(1 for step in range(1, steps + 1) if every and step % every == 0 and step < steps)
    timed = run_time(profile, resolve("tiny"), steps)
    assert timed.evaluations == 2 + during
    assert timed.checkpoints == steps // profile.save_steps


def test_no_held_out_rows_no_evaluation_time():
    profile = load_profile(CPU_DEFAULT, ["eval_samples=0"])
    timed = run_time(profile, resolve("tiny"), 100)
    assert timed.evaluations == 0 and timed.parts["evaluations"] == 0


def test_the_cpu_step_grows_with_its_completions_and_shrinks_with_threads():
    tiny = resolve("tiny")
    small = cpu_speed.predict(load_profile(CPU_DEFAULT, ["per_device_train_batch_size=32"]), tiny, cpu_threads=2)
    large = cpu_speed.predict(load_profile(CPU_DEFAULT, ["per_device_train_batch_size=256"]), tiny, cpu_threads=2)
    assert large.step_s > small.step_s
    longer = cpu_speed.predict(load_profile(CPU_DEFAULT, ["expected_completion_length=40"]), tiny, cpu_threads=2)
    shorter = cpu_speed.predict(load_profile(CPU_DEFAULT, ["expected_completion_length=10"]), tiny, cpu_threads=2)
    assert longer.step_s > shorter.step_s
    # a model whose arithmetic outweighs the ops' dispatch runs faster on more threads
    profile = load_profile(CPU_DEFAULT, ["model=Qwen/Qwen2.5-0.5B-Instruct"])
    shape = replace(shape_of(profile, resolve("Qwen/Qwen2.5-0.5B-Instruct"), None), float32=True)
    assert cpu_speed.step_time(shape, 8).step_s < cpu_speed.step_time(shape, 2).step_s / 2


def test_a_step_this_machine_measured_is_the_step(monkeypatch):
    tiny = resolve("tiny")
    profile = load_profile(CPU_DEFAULT)
    measured = Measured(peak_gib=0.9, runs=1, last="2026-01-01", oom_lower_bound_gib=None, step_s=3.5)
    timed = cpu_speed.predict(profile, tiny, measured=measured, cpu_threads=2)
    assert timed.step_s == 3.5 and timed.measured_s == 3.5


def test_a_budget_of_hours_holds_the_whole_run(capsys):
    chosen = _chosen(["--gpu-memory", H100[0], "--gpu-name", H100[1], "--hours", "1.5"], capsys)
    run = chosen["run"]
    assert run["budget_hours"] == 1.5 and run["total_hours"] <= 1.5 and run["hours"] < run["total_hours"]
    assert "beside the steps" in run["basis"]


def test_rewards_that_run_programs_are_in_the_step(monkeypatch):
    """Each program reward runs every completion's program once per test case, over the machine's cores."""
    from launcher.plan import speed, step_shape

    tiny = resolve("tiny")
    plain = load_profile(CPU_DEFAULT)
    coded = load_profile(CPU_DEFAULT, ["rewards={xml_count: 1.0, code: 2.0}"])
    both = load_profile(CPU_DEFAULT, ["rewards={code: 2.0, binary_code: 1.0}"])
    monkeypatch.setattr(step_shape, "cores", lambda: 2)
    monkeypatch.setattr(speed, "cores", lambda: 2)
    base = cpu_speed.predict(plain, tiny, cpu_threads=2).fixed_s
    one = cpu_speed.predict(coded, tiny, cpu_threads=2).fixed_s - base
    runs = plain.effective_batch * step_shape.DEFAULT_TEST_CASES * speed.PROGRAM_RUN_S / 2
    assert one == pytest.approx(runs, rel=1e-6)
    assert cpu_speed.predict(both, tiny, cpu_threads=2).fixed_s - base == pytest.approx(2 * runs, rel=1e-6)
    monkeypatch.setattr(speed, "cores", lambda: 8)
    assert cpu_speed.predict(coded, tiny, cpu_threads=2).fixed_s - base == pytest.approx(runs / 4, rel=1e-6)
