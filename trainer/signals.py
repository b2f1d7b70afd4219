"""SIGINT / SIGTERM during an attempt: the first asks for a clean stop (save, then exit 130), a second stops
at once. Imports nothing heavy, so it can be installed before Unsloth and transformers load."""

from __future__ import annotations

import signal
import sys


class StopFlag:
    """Installed for the whole attempt; the training loop reads it through callbacks.StopOnSignal."""

    def __init__(self):
        self.received: int | None = None
        self.training = False  # only changes what the first signal's message promises
        self._previous = {}

    def install(self) -> "StopFlag":
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
            raise KeyboardInterrupt(f"second {name}")
        self.received = signum
        if self.training:
            text = (f"\n{name} received: saving a checkpoint at the end of this step, then stopping "
                    "(send it again to stop now)")
        else:
            text = f"\n{name} received while loading: stopping before training starts"
        try:
            print(text, file=sys.stderr, flush=True)
        except OSError:  # the reader of our output has gone
            pass
