"""SIGINT / SIGTERM during an attempt: the first asks for a clean stop (save, then exit 130), a second stops
at once; once the attempt has written its outcome, any signal ends the process at once with 130
(exit_on_signal). Imports nothing heavy, so it can be installed before Unsloth and transformers load."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

# Once the process that started the attempt (the supervisor) is gone, the attempt has this long to save and
# stop; then it ends, whatever runs in it (a tool, a library that never lets the stop through)
ORPHAN_GRACE_S = 120.0
ORPHAN_POLL_S = 1.0


class StopFlag:
    """Installed for the whole attempt; the training loop reads it through callbacks.StopOnSignal."""

    # What the first signal's message promises, by the stage the attempt is in (trainer.run sets `phase`)
    PROMISES = {
        "loading": "stopping before training starts",
        "building": "stopping now; the model's first-use build is thrown away (it is built again next time)",
        "probe": "stopping after the worst-case probe, before training starts",
        "training": "saving a checkpoint at the end of this step, then stopping",
        "evaluating": "stopping the evaluation during training, saving a checkpoint at this step, then stopping",
        "finishing": "the adapter is saved; stopping without the final evaluation and report (`train --resume` finishes them)",
        "reporting": "finishing the report (seconds), then exiting",
    }

    def __init__(self):
        self.received: int | None = None
        self.phase = "loading"
        self._previous = {}

    def install(self, orphan_grace_s: float | None = ORPHAN_GRACE_S) -> StopFlag:
        for signum in (signal.SIGINT, signal.SIGTERM):
            try:
                self._previous[signum] = signal.signal(signum, self._handle)
            except ValueError:  # not the main thread: the default handlers stay
                pass
        if orphan_grace_s is not None:
            die_with_parent(self, orphan_grace_s)
        return self

    def uninstall(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    @property
    def stopped(self) -> bool:
        return self.received is not None

    def _handle(self, signum, frame):
        name = signal.Signals(signum).name
        if self.received is not None:
            from contract.errors import SecondSignal

            raise SecondSignal(f"second {name}")
        self.received = signum
        text = f"\n{name} received while {self.phase}: {self.PROMISES.get(self.phase, 'stopping')}"
        if self.phase == "building":  # minutes of work with nothing to save: stop at once
            try:
                print(text, file=sys.stderr, flush=True)
            except OSError:
                pass
            raise KeyboardInterrupt(f"{name} while building the model")
        if self.phase == "training":
            text += " (send it again to stop now)"
        try:
            print(text, file=sys.stderr, flush=True)
        except OSError:  # the reader of our output has gone
            pass


def exit_on_signal(code: int) -> None:
    """After the attempt's outcome is written, a signal has nothing left to save: end at once with `code`
    (130) instead of dying by the default SIGTERM (143) while the interpreter tears torch down."""

    def _exit(signum, frame):
        os._exit(code)

    for signum in (signal.SIGINT, signal.SIGTERM):
        try:
            signal.signal(signum, _exit)
        except ValueError:  # not the main thread
            pass


def die_with_parent(flag: StopFlag, grace_s: float = ORPHAN_GRACE_S, poll_s: float = ORPHAN_POLL_S):
    """A daemon thread tying this process's life to its parent's (the supervisor's, or accelerate's for a
    rank): once the parent is gone, the attempt is asked to stop as by a signal (on Linux the supervisor's
    PR_SET_PDEATHSIG already sent it SIGTERM), and `grace_s` later, if it is still running, it ends at once,
    saying why. None when there is no parent to outlive (started by PID 1)."""
    parent = os.getppid()
    if parent <= 1:
        return None

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        if not flag.stopped:
            try:
                os.kill(os.getpid(), signal.SIGTERM)
            except OSError:
                pass
        time.sleep(grace_s)
        try:
            os.write(
                2,
                f"\nthe process that started this attempt (pid {parent}) is gone and the attempt did not stop "
                f"within {grace_s:g} s of being asked: ending it now\n".encode(),
            )
        except OSError:
            pass
        from contract.errors import EXIT_INTERRUPTED

        os._exit(EXIT_INTERRUPTED)

    thread = threading.Thread(target=watch, name="orphan watch", daemon=True)
    thread.start()
    return thread
