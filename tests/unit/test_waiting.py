"""The tests' one way to wait (tests/support/waiting.py): bounded by progress, on an injected clock for
wait_until; run_to_end with real processes and windows of seconds (its parameters), each test a few seconds."""

from __future__ import annotations

import sys

import pytest

from support.waiting import finish, run_to_end, wait_until


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += 1.0


def test_a_wait_lasts_as_long_as_the_work_makes_progress(tmp_path):
    clock = Clock()
    log = tmp_path / "log"
    ticks = []

    def done() -> bool:  # a line is written every 50 s of the clock; done after 20 lines (1,000 s)
        ticks.append(clock.now)
        if clock.now % 50 == 0:
            with open(log, "a") as handle:
                handle.write("step\n")
        return clock.now >= 1000

    wait_until(done, watch=[tmp_path], stall_s=100, clock=clock, sleep=clock.sleep)
    assert clock.now == 1000  # far past the stall limit in all, never past it between two lines


def test_a_wait_without_progress_fails_and_so_does_one_whose_process_ended(tmp_path):
    clock = Clock()
    with pytest.raises(AssertionError, match="no progress .* for 100 s"):
        wait_until(lambda: False, watch=[tmp_path], stall_s=100, clock=clock, sleep=clock.sleep)

    class Ended:
        returncode = 3

        def poll(self):
            return 3

    with pytest.raises(AssertionError, match="the process ended \\(exit 3\\) before the checkpoint"):
        wait_until(lambda: False, process=Ended(), what="the checkpoint", clock=clock, sleep=clock.sleep)


# Windows short enough for a test, long enough that a machine at load 6 on 2 cores still shows progress in one:
# a busy process gets a share of a core within milliseconds, and a share of 0.05 CPU s is far under it
QUIET_S, CPU_STEP_S = 2.0, 0.05


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_a_quiet_process_that_computes_is_not_killed():
    busy = "import time\nend = time.monotonic() + 6\nwhile time.monotonic() < end: pass\nprint('done')"
    done = run_to_end(_python(busy), quiet_s=QUIET_S, cpu_step_s=CPU_STEP_S)
    assert (done.returncode, done.stdout) == (0, "done\n")


def test_a_process_that_writes_now_and_then_is_not_killed():
    # far longer than the window in all, its lines closer together than the window
    talking = "import sys, time\nfor i in range(30):\n    print(i, flush=True)\n    time.sleep(0.2)"
    done = run_to_end(_python(talking), quiet_s=QUIET_S, cpu_step_s=100.0)  # only its output counts here
    assert done.returncode == 0 and done.stdout.split() == [str(i) for i in range(30)]


def test_a_hung_process_is_killed_naming_its_command_and_its_last_words():
    hung = (
        "import sys, time\nprint('loading the model', flush=True)\n"
        "print('warning: odd', file=sys.stderr, flush=True)\ntime.sleep(600)"
    )
    with pytest.raises(AssertionError) as failed:
        run_to_end(_python(hung), quiet_s=QUIET_S, cpu_step_s=CPU_STEP_S)
    text = str(failed.value)
    assert f"no progress (no output, under {CPU_STEP_S:g} s of CPU) for {QUIET_S:g} s" in text
    assert "time.sleep(600)" in text and "loading the model" in text and "warning: odd" in text
    assert "exit -9" in text  # killed, not left behind


def test_a_process_that_never_ends_is_killed_at_the_ceiling():
    endless = "import time\nwhile True:\n    print('still here', flush=True)\n    time.sleep(0.1)"
    with pytest.raises(AssertionError, match="still running at the ceiling of 3 s"):
        run_to_end(_python(endless), quiet_s=QUIET_S, ceiling_s=3.0)


def test_a_started_process_is_finished_with_its_input_as_communicate_would():
    import subprocess

    process = subprocess.Popen(
        _python("import sys; print(sys.stdin.read().upper())"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert finish(process, input="abc") == ("ABC\n", "")
    assert process.returncode == 0


def test_time_the_waiter_did_not_run_counts_neither_as_quiet_nor_toward_the_ceiling(monkeypatch, tmp_path):
    """A machine that sleeps, or a process group stopped and continued, stops the waiter with the work: on waking
    the clock has jumped, and that jump is no stall of the work."""
    import time as real_time

    from support import waiting

    class Jumping:  # the clock jumps 1,000 s once, a few looks in
        def __init__(self):
            self.looks = 0

        def monotonic(self) -> float:
            self.looks += 1
            return real_time.monotonic() + (1000.0 if self.looks > 3 else 0.0)

        def __getattr__(self, name):
            return getattr(real_time, name)

    monkeypatch.setattr(waiting, "time", Jumping())
    talking = "import time\nfor i in range(10):\n    print(i, flush=True)\n    time.sleep(0.2)"
    done = run_to_end(_python(talking), quiet_s=QUIET_S, ceiling_s=30.0, cpu_step_s=100.0)
    assert done.returncode == 0 and done.stdout.split() == [str(i) for i in range(10)]

    clock = Clock()
    jumped = []

    def woken() -> bool:  # nothing under tmp_path changes; the clock jumps once, then the condition holds
        if clock.now == 5 and not jumped:
            clock.now += 1000
            jumped.append(True)
        return clock.now > 1010

    wait_until(woken, watch=[tmp_path], stall_s=100, clock=clock, sleep=clock.sleep)
