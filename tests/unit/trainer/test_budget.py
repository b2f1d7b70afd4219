"""train --hours in the attempt: the ETA from the measured pace, one word when the run will overrun its budget by
more than a tenth, and at the budget a stop with a checkpoint (trainer.budget, on an injected clock)."""

from types import SimpleNamespace

from contract.attempt import STOPPED_BY_BUDGET, Outcome, merge_outcomes, run_budget_from_env
from contract.environment import ENV_RUN_BUDGET_S, ENV_RUN_DEADLINE
from trainer.budget import FINISH_MARGIN_S, BudgetCallback
from trainer.progress import eta_seconds, pace


class Clock:
    def __init__(self, now=1000.0):
        self.now = now

    def __call__(self):
        return self.now


def control():
    return SimpleNamespace(should_save=False, should_training_stop=False)


def run_steps(callback, clock, seconds, max_steps, first=None):
    """Steps of `seconds` each (the first `first`) until the callback stops them or max_steps; the steps done."""
    callback.on_train_begin(None, None, control())
    for step in range(1, max_steps + 1):
        clock.now += first if (step == 1 and first is not None) else seconds
        ctl = callback.on_step_end(
            SimpleNamespace(device=None), SimpleNamespace(global_step=step, max_steps=max_steps), control()
        )
        if ctl.should_training_stop:
            assert ctl.should_save  # the stop saves a checkpoint
            return step
    return max_steps


def test_the_pace_leaves_the_first_step_out_and_takes_the_median():
    assert pace([]) is None and pace([30.0]) == 30.0
    assert pace([30.0, 10.0, 12.0, 11.0]) == 11.0
    assert eta_seconds([30.0, 10.0, 12.0, 11.0], 4, 10) == 66.0


def test_a_run_inside_its_budget_neither_stops_nor_warns():
    clock, said = Clock(), []
    budget = BudgetCallback(deadline=clock.now + 3600, budget_s=3600, finish_s=60, clock=clock, say=said.append)
    assert run_steps(budget, clock, 10.0, 100) == 100
    assert not budget.stopped and said == []


def test_an_overrun_is_said_once_and_the_run_stops_at_its_budget_with_time_to_finish():
    clock, said = Clock(), []
    budget = BudgetCallback(deadline=clock.now + 600, budget_s=600, finish_s=40, clock=clock, say=said.append)
    done = run_steps(budget, clock, 10.0, 200, first=25.0)
    assert budget.stopped and done < 200
    # the last step ended early enough for the finishing (its evaluation and the saving) to fit the budget
    assert clock.now + 40 + FINISH_MARGIN_S <= budget.deadline + 10.0
    assert clock.now + 10.0 + 40 + FINISH_MARGIN_S > budget.deadline
    warnings = [line for line in said if "more than the" in line]
    assert len(warnings) == 1 and "by over 10%" in warnings[0]
    assert "more than the 10 min budget" in warnings[0]  # in minutes: "0.17 h" told a 10-minute budget badly
    assert any(line.startswith("the run's budget ends") for line in said)


def test_a_budget_of_seconds_is_said_in_seconds():
    clock, said = Clock(), []
    budget = BudgetCallback(deadline=clock.now + 30, budget_s=30, finish_s=0, clock=clock, say=said.append)
    run_steps(budget, clock, 5.0, 100)
    warning = next(line for line in said if "more than the" in line)
    assert "more than the 30 s budget" in warning and "0.0" not in warning  # not "0.01 h"


def test_a_small_overrun_is_not_warned_of():
    clock, said = Clock(), []
    # 100 steps of 10 s: 1,000 s and its finishing, against a budget 5% shorter
    budget = BudgetCallback(deadline=clock.now + 1000, budget_s=1000, finish_s=0, clock=clock, say=said.append)
    run_steps(budget, clock, 10.0, 100)
    assert not any("more than the" in line for line in said)


def test_the_budget_reaches_the_attempt_and_its_outcome_says_why_it_stopped(tmp_path):
    assert run_budget_from_env({}) is None
    assert run_budget_from_env({ENV_RUN_DEADLINE: "2000.5", ENV_RUN_BUDGET_S: "600"}) == (2000.5, 600.0)
    Outcome(status="ok", steps=12, stopped_by=STOPPED_BY_BUDGET).write(tmp_path)
    assert merge_outcomes(tmp_path).stopped_by == "budget"


def test_the_supervisor_gives_the_deadline_to_every_attempt():
    from launcher.run.supervisor import Supervisor
    from profiles.load import load_profile
    from support.cli import REPO

    profile = load_profile(REPO / "profiles" / "cpu-tiny-8gen.yaml")
    env = Supervisor._environment(profile, 1.0, 2.0, budget=(5000.0, 3600.0))
    assert (env[ENV_RUN_DEADLINE], env[ENV_RUN_BUDGET_S]) == ("5000.0", "3600.0")
    assert ENV_RUN_DEADLINE not in Supervisor._environment(profile, 1.0, 2.0)
