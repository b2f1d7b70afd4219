"""The end of an attempt: what a signal promises at each stage (and that the promise holds), an attempt with
nothing left to train, a second signal once the outcome is written, and the reward figures of a short run."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

from profiles.load import profile_from_dict
from support.waiting import run_to_end
from trainer.signals import StopFlag
from trainer.state import AttemptState

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "phase, words",
    [
        ("loading", "stopping before training starts"),
        ("probe", "stopping after the worst-case probe, before training starts"),
        ("training", "saving a checkpoint at the end of this step, then stopping (send it again to stop now)"),
        (
            "finishing",
            "the adapter is saved; stopping without the final evaluation and report (`train --resume` finishes",
        ),
        ("reporting", "finishing the report (seconds), then exiting"),
    ],
)
def test_the_first_signal_says_what_this_stage_will_do(capsys, phase, words):
    flag = StopFlag()
    flag.phase = phase
    flag._handle(signal.SIGTERM, None)
    assert flag.stopped and f"SIGTERM received while {phase}: {words}" in capsys.readouterr().err
    with pytest.raises(KeyboardInterrupt):
        flag._handle(signal.SIGTERM, None)


def test_a_checkpoint_at_max_steps_leaves_nothing_to_train(tmp_path):
    from trainer.stages import nothing_left_to_train

    profile = profile_from_dict({"dataset": "arithmetic", "max_steps": 3}, "<test>")
    assert nothing_left_to_train(AttemptState(profile, tmp_path, str(tmp_path / "checkpoint-3")))
    assert nothing_left_to_train(AttemptState(profile, tmp_path, str(tmp_path / "checkpoint-4")))
    assert not nothing_left_to_train(AttemptState(profile, tmp_path, str(tmp_path / "checkpoint-2")))
    assert not nothing_left_to_train(AttemptState(profile, tmp_path, None))


def test_a_signal_after_the_outcome_is_written_exits_130_not_143():
    code = (
        "import os, signal, sys, time\n"
        f"sys.path.insert(0, {str(REPO)!r})\n"
        "from trainer.signals import exit_on_signal\n"
        "exit_on_signal(130)\n"
        "os.kill(os.getpid(), signal.SIGTERM)\n"
        "time.sleep(10)\n"
    )
    done = run_to_end([sys.executable, "-c", code], text=False)
    assert done.returncode == 130, (done.returncode, done.stderr[-1000:])


def _rows(rewards):
    return [{"step": i + 1, "reward": r, "rewards": {"accuracy": r}} for i, r in enumerate(rewards)]


@pytest.mark.parametrize(
    "rewards, first, last",
    [
        ([0.1, 0.5, 0.9], 0.1, 0.9),  # 3 steps: the first against the last, not the same three twice
        ([0.2, 0.4, 0.6, 0.8], 0.3, 0.7),  # halves
        ([0.5], 0.5, 0.5),
    ],
)
def test_a_short_run_compares_windows_that_do_not_overlap(rewards, first, last):
    from trainer.report import reward_figures

    figures = reward_figures(_rows(rewards), ["accuracy"])
    assert figures["total"]["first"] == pytest.approx(first) and figures["total"]["last"] == pytest.approx(last)
