"""An attempt whose outcome is written ends: a thread someone's code left running (a reward's non-daemon
thread) cannot hold the process (the attempt's own watchdog) nor the run (the supervisor ends a process that
lingers after its outcome, and the outcome stands). A KeyboardInterrupt that no signal caused is an error
naming who raised it, not "stopped by a second signal"."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

from rich.console import Console

from contract.errors import SecondSignal
from support.fake_runs import CPU_SETTINGS, FAKE_CHILD
from support.waiting import finish, run_to_end

REPO = Path(__file__).resolve().parents[3]

LINGERING = """
import sys, threading, time
sys.path.insert(0, {repo!r})
from trainer.run import end_within_grace
threading.Thread(target=time.sleep, args=(10 ** 6,), name="left-by-a-reward").start()
print("outcome written", flush=True)
end_within_grace(3, grace_s=0.5)
"""


def test_a_thread_left_running_does_not_hold_the_attempts_exit():
    done = run_to_end(
        [sys.executable, "-c", LINGERING.format(repo=str(REPO))]
    )  # a safety net: without the watchdog this never ends
    assert done.returncode == 3
    assert "threads still running: 'left-by-a-reward' (time.sleep)" in done.stderr


def test_a_process_without_stray_threads_exits_as_usual():
    code = (
        f"import sys; sys.path.insert(0, {str(REPO)!r})\nfrom trainer.run import end_within_grace\n"
        "end_within_grace(0, grace_s=600)\nsys.exit(4)"
    )
    done = run_to_end([sys.executable, "-c", code])
    assert done.returncode == 4 and "note:" not in done.stderr  # the watchdog (a daemon) held nothing up


def test_the_supervisor_ends_an_attempt_that_lingers_after_its_outcome(tmp_path, monkeypatch):
    from launcher.card.detect import Machine
    from launcher.plan.choose import make_plan
    from launcher.plan.request import PlanRequest
    from launcher.run import child
    from launcher.run.attempts import read_attempts
    from launcher.run.request import RunRequest
    from launcher.run.supervise import supervise
    from profiles.load import profile_from_dict

    monkeypatch.setattr(child, "OUTCOME_GRACE_S", 0.5)
    monkeypatch.setattr(child, "KILL_AFTER_S", 0.5)
    monkeypatch.setattr(child, "OUTCOME_POLL_S", 0.1)
    monkeypatch.setenv("FAKE_CHILD_PLAN", json.dumps({"a": {"do": "linger"}}))
    profile = profile_from_dict(
        dict(
            **CPU_SETTINGS,
            max_steps=4,
            save_steps=2,
            eval_samples=0,
            name="a",
            num_generations=4,
            max_completion_length=64,
            per_device_train_batch_size=4,
        ),
        "<test a>",
    )
    plan = make_plan(PlanRequest([profile], Machine(gpus=[], message="test", host_ram_gib=24.0, host_free_gib=20.0)))
    code = supervise(
        plan, RunRequest(tmp_path / "out"), child_command=FAKE_CHILD, console=Console(file=io.StringIO(), width=200)
    )
    assert code == 0
    (run_dir,) = (tmp_path / "out").glob("run-*")
    (record,) = read_attempts(run_dir)
    assert record["status"] == "ok" and record["exit_code"] in (-15, -9)  # ended, and its outcome stands


def test_a_keyboard_interrupt_no_signal_caused_is_an_error_naming_the_reward(tmp_path):
    from rewards import user
    from trainer.run import classify
    from usercode.entry import parse_spec

    path = tmp_path / "r.py"
    path.write_text("def stop(completions, **kw):\n    raise KeyboardInterrupt\n")
    reward = user.load(parse_spec(f"{path}:stop"))
    try:
        reward(prompts=["p"], completions=["c"])
    except KeyboardInterrupt as exc:
        raised = exc
    status, line = classify(raised)
    assert status == "error" and "reward 'stop'" in line and "no signal was sent" in line
    assert classify(raised, signalled=True)[0] == "interrupted"
    assert classify(SecondSignal("second SIGINT")) == ("interrupted", "stopped by a second signal")


BUILDING = """
import sys, time
sys.path.insert(0, {repo!r})
from trainer.run import _interruptible, classify
from trainer.signals import StopFlag

stopper = StopFlag().install()

def build(profile):  # stands for the tiny model's first-use build: minutes of work with nothing to save
    open({ready!r}, "w").close()
    while True:
        time.sleep(0.05)

try:
    _interruptible(build, stopper)(None)
except KeyboardInterrupt as exc:
    print(*classify(exc, signalled=stopper.stopped), sep="|")
"""


def test_a_signal_during_the_first_use_build_stops_it_at_once(tmp_path):
    import os
    import signal
    import time

    ready = tmp_path / "building"
    proc = subprocess.Popen(
        [sys.executable, "-c", BUILDING.format(repo=str(REPO), ready=str(ready))],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    while not ready.exists():  # bounded by progress: the process must still be on its way there
        assert proc.poll() is None, proc.stderr.read()
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGINT)
    out, err = finish(proc)
    assert out.strip() == "interrupted|stopped by a signal", err
    assert "while building" in err and "thrown away" in err


# A supervisor killed outright (SIGKILL) while its attempt runs a tool that swallows every stop: the attempt is
# asked to stop, and ends within the grace all the same; never an attempt left holding the GPU. The supervisor
# here starts the attempt as launcher.run.child does (its own session, the parent-death signal) and kills itself
# once the attempt is in its tool; the attempt gives up swallowing after STUBBORN_TURNS (counted, not timed), so
# that without the watch it ends by itself saying "survived" (and the test fails on that).
STUBBORN_TURNS = 2000
ORPHAN = """
import sys, time
sys.path.insert(0, {repo!r})
import trainer.signals as signals
signals.ORPHAN_POLL_S = 0.05
flag = signals.StopFlag().install(orphan_grace_s=0.5)
open({ready!r}, "w").close()
for _ in range({turns}):
    try:
        time.sleep(0.05)
    except:  # noqa: E722 - a tool that retries whatever happens
        pass
print("survived", flush=True)
"""
SUPERVISOR = """
import os, signal, subprocess, sys, time
sys.path.insert(0, {repo!r})
from launcher.run.child import parent_death_signal
attempt = subprocess.Popen([sys.executable, "-c", {attempt!r}], start_new_session=True, preexec_fn=parent_death_signal())
while not os.path.exists({ready!r}):
    if attempt.poll() is not None:
        sys.exit("the attempt ended before its tool ran")
    time.sleep(0.05)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_an_attempt_dies_with_its_supervisor_even_inside_a_stubborn_tool(tmp_path):
    ready = tmp_path / "in-the-tool"
    attempt = ORPHAN.format(repo=str(REPO), ready=str(ready), turns=STUBBORN_TURNS)
    supervisor = SUPERVISOR.format(repo=str(REPO), attempt=attempt, ready=str(ready))
    # the attempt inherits the pipes: the run ends when the attempt has ended too
    done = run_to_end([sys.executable, "-c", supervisor])
    assert done.returncode == -9
    assert "survived" not in done.stdout
    assert "is gone and the attempt did not stop within 0.5 s of being asked: ending it now" in done.stderr
