"""HOW one attempt's process runs: its command line, started in its own process group, its output teed to
the terminal and DIR/train.log, the supervisor's signals forwarded to it, and its life tied to the
supervisor's (a killed supervisor must not leave a child holding the GPU)."""

from __future__ import annotations

import codecs
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Self

from contract.attempt import LOG_FILE, OUTCOME_FILE
from contract.errors import EXIT_INTERRUPTED
from launcher.run import distributed

_TAIL_BYTES = 256 * 1024  # the end of the output, read for an OOM when the child wrote no outcome
# An attempt that has written its outcome ends itself within trainer.run.EXIT_GRACE_S (60 s); past this the
# supervisor ends it, so that a run never waits without bound for a process with nothing left to do.
OUTCOME_GRACE_S = 120.0
KILL_AFTER_S = 15.0
OUTCOME_POLL_S = 1.0


def parent_death_signal():
    """A function for a child process to run before exec: get SIGTERM if the supervisor dies, instead of
    holding the GPU unattended (a training child saves and stops; a vLLM server shuts down). Linux only
    (prctl); None elsewhere. libc is looked up here, in the parent, so that the forked child only makes the
    call (no import between fork and exec)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def set_signal() -> None:
        prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG

    return set_signal


def attempt_command(
    profile, attempt_dir: Path, resume_from: str | None, override: list[str] | None = None, env: dict | None = None
) -> list[str]:
    """The attempt's argv, writing its launch files first when the profile is distributed. `override`
    stands for `[python, train.py]` (the way tests run a fake child): the single-GPU command becomes
    `override + arguments`, and under accelerate the script and the interpreter are replaced, the launcher's
    own arguments kept."""
    config = distributed.write_launch_files(profile, attempt_dir, env=env) if profile.distributed else None
    argv = distributed.attempt_argv(profile, attempt_dir, resume_from, launch_config=config, env=env)
    if not override:
        return argv
    script = argv.index(str(distributed.TRAIN_PY))
    return [override[0], *argv[1:script], *override[1:], *argv[script + 1 :]]


@contextmanager
def signals_forwarded(runner: ChildRunner):
    """SIGINT and SIGTERM go to `runner` while the block runs (each is forwarded to the attempt process, which
    saves and stops; the caller sees them in runner.signals), the previous handlers afterwards. Handlers can
    be set in the main thread only; elsewhere nothing changes."""
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, runner.handle_signal)
            # ones the program's first handler took (train.EarlyInterrupts): a Ctrl-C the interpreter dropped
            # in a callback still stops the run before its attempt starts
            kept = getattr(previous[signum], "signals", None)
            if isinstance(kept, list):
                runner.signals.extend(kept)
                kept.clear()
    try:
        yield runner
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


class ChildRunner:
    """Runs one attempt's process, tees its output to the terminal and DIR/train.log, forwards signals."""

    def __init__(self, command: list[str] | None = None, echo=None, log_name: str = LOG_FILE):
        self.override = list(command) if command else None
        self.log_name = log_name  # machine N > 0 of a run writes its own log beside machine 0's
        self.echo = echo if echo is not None else sys.stdout
        self.proc: subprocess.Popen | None = None
        self.last_pid: int | None = None  # the last attempt's pid, to ask the kernel why it died
        self.signals: list[int] = []
        self.forwarded = 0  # how many of `signals` the attempt process has been sent
        # True while a vLLM server loads (minutes): a signal then stops the wait instead of being held
        self.waiting_for_server = False
        self.remote_code_said: set[str] = set()  # models whose trust_remote_code a caller has said

    # Signals arrive in the main thread; the child runs in its own process group so that a terminal's
    # Ctrl-C reaches only the supervisor, which forwards exactly one signal per press (the trainer reads a
    # second one as "stop now"). What it forwards is SIGTERM whichever arrived: the trainer stops alike on both,
    # but before its handler is in (the interpreter's first imports) a SIGINT ends it with a traceback and a
    # SIGTERM ends it without a word.
    def handle_signal(self, signum, frame) -> None:
        self.signals.append(signum)
        proc = self.proc
        if proc is None and self.waiting_for_server:
            self.waiting_for_server = False
            raise KeyboardInterrupt(signal.Signals(signum).name)
        if proc is None or proc.poll() is not None:
            return
        name = signal.Signals(signum).name
        try:
            if len(self.signals) >= 3:
                os.write(2, f"\n{name} again: killing attempt (pid {proc.pid}) and its processes\n".encode())
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                hint = "; press again to stop without waiting, a third time to kill" if len(self.signals) == 1 else ""
                os.write(2, f"\n{name}: asking the attempt (pid {proc.pid}) to save and stop{hint}\n".encode())
                self.forwarded = len(self.signals)
                os.kill(proc.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass

    def run_argv(self, argv: list[str], attempt_dir: Path, env: dict) -> tuple[int, str]:
        """Run one attempt's command to its end (output read until the process exits); (status, output tail)."""
        tail = bytearray()
        if len(self.signals) > self.forwarded:
            # Ctrl-C while the attempt was being prepared: do not start it (a process hit by a signal in its
            # first imports could only die with a traceback)
            self.forwarded = len(self.signals)
            return EXIT_INTERRUPTED, ""
        with open(attempt_dir / self.log_name, "ab", buffering=0) as log:  # unbuffered: a full disk loses a chunk only
            self.proc = subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=env,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=parent_death_signal(),
            )
            self.last_pid = self.proc.pid
            if len(self.signals) > self.forwarded:  # one arrived as the process started: it is its to handle
                self.forwarded = len(self.signals)
                os.kill(self.proc.pid, signal.SIGTERM)
            reader = threading.Thread(target=self._pump, args=(self.proc.stdout, log, tail), daemon=True)
            reader.start()
            returncode = self._wait(self.proc, attempt_dir)
            reader.join(timeout=30)
        self.proc = None
        return returncode, tail.decode("utf-8", errors="replace")

    def _wait(self, proc: subprocess.Popen, attempt_dir: Path) -> int:
        """The attempt's exit status. Once it has written its outcome it has nothing left to do: if it has not
        exited OUTCOME_GRACE_S later (a thread someone's code left running, a teardown that hangs), it is ended
        (SIGTERM, then SIGKILL), and its outcome stands."""
        written_at = None
        ended = 0
        while True:
            try:
                return proc.wait(timeout=OUTCOME_POLL_S)
            except subprocess.TimeoutExpired:
                pass
            except KeyboardInterrupt:  # only when no handler is installed (not the main thread)
                continue
            if written_at is None:
                if (attempt_dir / OUTCOME_FILE).is_file():
                    written_at = time.monotonic()
                continue
            waited = time.monotonic() - written_at
            if (ended == 0 and waited >= OUTCOME_GRACE_S) or (ended == 1 and waited >= OUTCOME_GRACE_S + KILL_AFTER_S):
                how = signal.SIGTERM if ended == 0 else signal.SIGKILL
                try:
                    os.write(
                        2,
                        f"\nthe attempt (pid {proc.pid}) wrote its outcome {waited:.0f} s ago and has not "
                        f"exited: ending it ({how.name}); its outcome stands\n".encode(),
                    )
                    os.killpg(proc.pid, how)
                except (ProcessLookupError, PermissionError, OSError):
                    pass
                ended += 1

    def _pump(self, stream, log, tail: bytearray) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        fd = stream.fileno()
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            if log is not None:
                try:
                    log.write(chunk)
                except OSError:  # a full disk: the terminal and the tail still get the output
                    log = None
            tail.extend(chunk)
            if len(tail) > _TAIL_BYTES:
                del tail[: len(tail) - _TAIL_BYTES]
            try:
                self.echo.write(decoder.decode(chunk))
                self.echo.flush()
            except (OSError, ValueError):
                pass
        stream.close()


class StopWhen:
    """While an attempt's process runs: a thread that asks it to stop (SIGTERM to its process group) once
    `reason()` returns a text, kept in `fired`. A reason that cannot be read now (OSError) is asked again at
    the next interval."""

    def __init__(
        self,
        reason: Callable[[], str | None],
        runner: ChildRunner,
        interval: float = 1.0,
        name: str = "attempt watch",
    ):
        self.reason, self.runner, self.interval = reason, runner, interval
        self.fired: str | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name=name, daemon=True)

    def start(self) -> Self:
        self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._done.wait(self.interval):
            try:
                why = self.reason()
            except OSError:
                continue
            if why:
                self.fired = why
                proc = self.runner.proc
                if proc is not None and proc.poll() is None:
                    try:
                        os.killpg(proc.pid, signal.SIGTERM)
                    except (ProcessLookupError, PermissionError):
                        pass
                return

    def stop(self) -> None:
        self._done.set()
        self._thread.join(timeout=self.interval + 1)
