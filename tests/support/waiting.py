"""The one way a test waits for something another process does: until it is done, for as long as that work
makes progress. A wait fails when the process it waits on has ended first, or when nothing it watches (files
and folders: their names, sizes and modification times) has changed for `stall_s` seconds, never because a
loaded machine took longer than an unloaded one.

A process run to its end (`run_to_end`, or `finish` for one already started) is bounded the same way: by its
output and the CPU it and its children use, never by a wall-clock timeout."""

from __future__ import annotations

import io
import os
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

# No output, checkpoint or log line for this long: the work is stuck (a training step on two busy cores takes
# tens of seconds; a model's load, a minute or two)
STALL_S = 600.0
POLL_S = 0.1
# A gap longer than this between two looks is time the waiter itself did not run (the machine asleep, this
# process stopped with its work): nothing could be seen in it, so it counts neither as quiet nor toward a ceiling
ABSENT_S = 60.0


def _signature(paths: Iterable[Path]) -> tuple:
    seen = []
    for root in paths:
        root = Path(root)
        for path in [root, *(root.rglob("*") if root.is_dir() else ())]:
            try:
                stat = path.stat()
            except OSError:
                continue
            seen.append((str(path), stat.st_size, stat.st_mtime_ns))
    return tuple(sorted(seen))


def wait_until(
    done: Callable[[], bool],
    *,
    watch: Iterable[Path] = (),
    process=None,
    stall_s: float = STALL_S,
    what: str = "the condition",
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Return once done() is true. AssertionError when `process` (a Popen) has exited first, or when the
    files under `watch` have not changed for `stall_s` seconds."""
    watch = [Path(p) for p in watch]
    last, changed = _signature(watch), clock()
    looked = changed
    while not done():
        if process is not None and process.poll() is not None:
            if done():
                return
            raise AssertionError(f"the process ended (exit {process.returncode}) before {what}")
        if (at := clock()) - looked > ABSENT_S:
            changed += at - looked  # the waiter was away (ABSENT_S)
        looked = at
        now = _signature(watch)
        if now != last:
            last, changed = now, clock()
        elif clock() - changed > stall_s:
            raise AssertionError(
                f"no progress in {', '.join(map(str, watch)) or 'anything watched'} for {stall_s:g} s "
                f"while waiting for {what}"
            )
        sleep(POLL_S)


def process_tree_cpu_s(pid: int) -> float:
    """CPU seconds (user and system) used so far by process `pid` and every live process below it: a clock of the
    work a run has done, which a loaded machine slows down as much as the run itself."""
    from measure.processes import process_stats

    ticks = os.sysconf("SC_CLK_TCK")
    stats = process_stats()
    parents = {member: int(fields[1]) for member, fields in stats.items()}
    used = {member: sum(int(value) for value in fields[11:15]) / ticks for member, fields in stats.items()}
    tree, frontier = {pid}, [pid]
    while frontier:
        parent = frontier.pop()
        for child, its_parent in parents.items():
            if its_parent == parent and child not in tree:
                tree.add(child)
                frontier.append(child)
    return sum(used.get(member, 0.0) for member in tree)


# A run to its end: killed only when neither it nor its children have written a byte or used CPU_STEP_S of CPU
# for QUIET_S (a loaded machine slows both, a hang shows neither), or when it outlives CEILING_S, many times the
# longest run of the suite on a busy machine: what a hang that spins (CPU, no end) reaches
QUIET_S = STALL_S
CEILING_S = 3 * 3600.0
CPU_STEP_S = 1.0  # an idle interpreter's threads use a tick now and then; a working one, seconds
TAIL_CHARS = 3000


def _tree_cpu_s(processes: Sequence[subprocess.Popen]) -> float:
    return sum(process_tree_cpu_s(process.pid) for process in processes if process.returncode is None)


def _end_tree(pid: int) -> None:
    """SIGKILL `pid` and every live process below it (a hang may sit in a grandchild)."""
    from measure.processes import process_stats

    parents = {member: int(fields[1]) for member, fields in process_stats().items()}
    tree, frontier = [pid], [pid]
    while frontier:
        parent = frontier.pop()
        children = [child for child, its_parent in parents.items() if its_parent == parent and child not in tree]
        tree += children
        frontier += children
    for member in tree:
        try:
            os.kill(member, signal.SIGKILL)
        except OSError:
            pass


class _Collected:
    """What one pipe of a process has written so far, read by a thread of its own (a full pipe would stop the
    process that writes it)."""

    def __init__(self, stream):
        self.parts: list = []
        self.size = 0
        # a text pipe is read by line (its decoder may hold characters a test already read); a binary one by chunk
        self.empty = "" if isinstance(stream, io.TextIOBase) else b""
        if self.empty == "" or not hasattr(stream, "read1"):
            read = stream.readline
        else:
            read = lambda: stream.read1(65536)
        self.thread = threading.Thread(target=self._read, args=(stream, read), daemon=True)
        self.thread.start()

    def _read(self, stream, read: Callable[[], str | bytes]) -> None:
        try:
            while part := read():
                self.parts.append(part)
                self.size += len(part)
        except (OSError, ValueError):  # closed under us: the process was killed
            pass
        finally:
            stream.close()

    def text(self) -> str | bytes:
        return self.empty.join(self.parts)  # type: ignore[arg-type]


def _tail(text, chars: int = TAIL_CHARS) -> str:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return text[-chars:] if text else "(nothing)"


def finish_all(
    processes: Sequence[subprocess.Popen],
    *,
    input: str | bytes | None = None,
    watch: Iterable[Path] = (),
    quiet_s: float = QUIET_S,
    ceiling_s: float = CEILING_S,
    cpu_step_s: float = CPU_STEP_S,
) -> list[tuple]:
    """Wait for every process to end, as Popen.communicate does: their (stdout, stderr), in order (None for a pipe
    not captured); `input` goes to each one's stdin. They are one piece of work: the output or CPU of any is
    progress for all (peers that wait on each other), and so is a change under `watch` (the logs and folders of a
    process whose output goes to a file). AssertionError, every process killed, when none has made progress for
    `quiet_s` seconds or the wait reaches `ceiling_s`: naming each command, the seconds waited, the progress seen
    and the tail of its output."""
    processes, watch = list(processes), [Path(path) for path in watch]
    pipes = [[_Collected(stream) if stream is not None else None for stream in (p.stdout, p.stderr)] for p in processes]
    for process in processes:
        if process.stdin is not None:
            threading.Thread(target=_feed, args=(process.stdin, input), daemon=True).start()
    readers = [reader for pair in pipes for reader in pair if reader is not None]
    # CPU and files are read from /proc and the disk: every few seconds, often enough for a short window
    look_every_s = min(5.0, quiet_s / 4)
    started = progress_at = looked_at = turned_at = time.monotonic()
    output_seen = sum(reader.size for reader in readers)
    cpu_seen = cpu_mark = _tree_cpu_s(processes)
    files_seen = _signature(watch)
    while True:
        running = [process for process in processes if process.poll() is None]
        reading = [reader for reader in readers if reader.thread.is_alive()]
        if not running and not reading:
            return [tuple(reader.text() if reader is not None else None for reader in pair) for pair in pipes]
        if running:
            try:
                running[0].wait(timeout=POLL_S)
            except subprocess.TimeoutExpired:
                pass
        else:  # ended, yet a pipe is still open: a child it left holds it
            reading[0].thread.join(POLL_S)
        now = time.monotonic()
        if now - turned_at > ABSENT_S:  # the waiter was away (ABSENT_S): that time is neither quiet nor spent
            started, progress_at = started + (now - turned_at), progress_at + (now - turned_at)
        turned_at = now
        if (output := sum(reader.size for reader in readers)) != output_seen:
            output_seen, progress_at = output, now
        if running and now - looked_at >= look_every_s:
            cpu, looked_at = _tree_cpu_s(processes), now
            if cpu >= cpu_mark + cpu_step_s:
                cpu_mark, progress_at = cpu, now
            cpu_mark, cpu_seen = min(cpu_mark, cpu), max(cpu_seen, cpu)  # a child that ended takes its CPU along
            if watch and (files := _signature(watch)) != files_seen:
                files_seen, progress_at = files, now
        if now - progress_at > quiet_s:
            changes = "no output, no change in what it writes" if watch else "no output"
            why = f"no progress ({changes}, under {cpu_step_s:g} s of CPU) for {quiet_s:g} s"
        elif now - started > ceiling_s:
            why = f"still running at the ceiling of {ceiling_s:g} s"
        else:
            continue
        for process in running:
            _end_tree(process.pid)
        for process in processes:
            process.wait()
        for reader in readers:
            reader.thread.join(POLL_S)
        progress = f"{now - started:.0f} s in all, {cpu_seen:.1f} CPU s used, {output_seen} characters written"
        raise AssertionError(f"{why} ({progress}); killed:\n{_last_words(processes, pipes, watch)}")


def _last_words(processes: Sequence[subprocess.Popen], pipes: list, watch: list[Path]) -> str:
    """Each command with the tail of what it wrote: to its pipes, and to the files watched."""
    said = []
    for process, pair in zip(processes, pipes):
        said.append(f"$ {_command(process)} (exit {process.returncode})")
        for name, reader in zip(("stdout", "stderr"), pair):
            if reader is not None:
                said.append(f"--- its {name}, the last {TAIL_CHARS} characters:\n{_tail(reader.text())}")
    for path in watch:
        if path.is_file():
            said.append(f"--- {path}, the last {TAIL_CHARS} characters:\n{_tail(path.read_bytes()[-4 * TAIL_CHARS :])}")
    return "\n".join(said)


def _feed(stdin, input) -> None:
    try:
        if input:
            stdin.write(input)
        stdin.close()
    except (BrokenPipeError, OSError, ValueError):  # it ended without reading it all, as communicate allows
        pass


def _command(process: subprocess.Popen) -> str:
    args = process.args
    return shlex.join(map(str, args)) if isinstance(args, (list, tuple)) else str(args)


def finish(process: subprocess.Popen, *, input: str | bytes | None = None, **limits) -> tuple:
    """finish_all for one process: its (stdout, stderr), as process.communicate() without a wall-clock limit;
    `limits` go to finish_all (watch, quiet_s, ceiling_s, cpu_step_s)."""
    return finish_all([process], input=input, **limits)[0]


def run_to_end(
    argv: Sequence[object],
    *,
    input: str | bytes | None = None,
    capture_output: bool = True,
    text: bool = True,
    check: bool = False,
    watch: Iterable[Path] = (),
    quiet_s: float = QUIET_S,
    ceiling_s: float = CEILING_S,
    cpu_step_s: float = CPU_STEP_S,
    **popen,
) -> subprocess.CompletedProcess:
    """subprocess.run(argv, capture_output=True, text=True) bounded by progress instead of a wall-clock timeout
    (finish_all says when it gives up); `popen` goes to subprocess.Popen (cwd, env, ...)."""
    argv = [str(part) for part in argv]
    if capture_output:
        popen.setdefault("stdout", subprocess.PIPE)
        popen.setdefault("stderr", subprocess.PIPE)
    if input is not None:
        popen["stdin"] = subprocess.PIPE
    process = subprocess.Popen(argv, text=text, **popen)
    out, err = finish_all(
        [process], input=input, watch=watch, quiet_s=quiet_s, ceiling_s=ceiling_s, cpu_step_s=cpu_step_s
    )[0]
    if check and process.returncode != 0:
        raise subprocess.CalledProcessError(process.returncode, argv, out, err)
    return subprocess.CompletedProcess(argv, process.returncode, out, err)
