"""SIGINT / SIGTERM during an attempt: the first asks for a clean stop (save, then exit 130), a second stops
at once; once the attempt has written its outcome, any signal ends the process at once with 130
(exit_on_signal). Imports nothing heavy, so it can be installed before Unsloth and transformers load."""

from __future__ import annotations

import os
import signal
import sys


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

    def install(self) -> StopFlag:
        for signum in (signal.SIGINT, signal.SIGTERM):
            try:
                self._previous[signum] = signal.signal(signum, self._handle)
            except ValueError:  # not the main thread: the default handlers stay
                pass
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
