"""The tests' one way to wait (tests/support/waiting.py): bounded by progress, on an injected clock here."""

from __future__ import annotations

import pytest

from support.waiting import wait_until


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
