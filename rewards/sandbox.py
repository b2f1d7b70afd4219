"""Running untrusted Python: one program, one input, in a process of its own under limits, and what it printed.

A completion's program runs in a fresh Python (started isolated, without site-packages, with an empty
environment) inside a scratch folder that is removed afterwards whatever happens. Before the program runs, the
child lowers its own resource limits (CPU seconds, address space, file size, processes, open files, no core
dumps) and installs an audit hook that ends it at once on anything a stdin/stdout program has no business
doing: a socket, a subprocess, os.system, exec, fork, kill, ctypes, writing outside the scratch folder, reading
outside it and the standard library, changing permissions or links, or adding another audit hook
(rewards.sandbox_guard). The parent enforces the wall-clock limit and the output cap and kills the whole
process group at the end.

This is a guard against programs that misbehave by accident or by a model's habit, not a security boundary
against a determined attacker: docs/code-rewards.md says what it does not protect against. rewards.piston runs
the same programs on a remote Piston server instead.
"""

from __future__ import annotations

import contextlib
import functools
import os
import selectors
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import NamedTuple

from rewards.sandbox_guard import BOOTSTRAP, REFUSED_EXIT

MIB = 1024 * 1024

# How a run ended
OK = "ok"  # exited with status 0
ERROR = "error"  # a non-zero exit: an exception, a syntax error, sys.exit(1)
MEMORY = "memory"  # MemoryError: the address-space limit
TIMEOUT = "timeout"  # the wall-clock limit (sleeping, waiting on input, or too slow)
CPU = "cpu"  # the CPU-time limit (SIGXCPU)
FILE_SIZE = "file size"  # a file grew past the file-size limit (SIGXFSZ)
OUTPUT = "output"  # printed more than the output cap
REFUSED = "refused"  # the guard stopped something forbidden
KILLED = "killed"  # ended by another signal
UNAVAILABLE = "unavailable"  # the program could not be run at all (a sandbox or remote failure)

SCRATCH_PREFIX = "grpo-sandbox-"


@dataclass(frozen=True)
class Limits:
    """What one run of one program may use.

    wall_s: seconds from start to end, sleeping included; cpu_s: CPU seconds (whole seconds, the kernel's
    unit); memory_bytes: address space; output_bytes: what it may print to stdout; file_bytes: the largest
    file it may write; write_opens: how many times it may open a file for writing (so disk use stays under
    write_opens * file_bytes); open_files: descriptors open at once; processes: the process limit of the
    child's user (0: neither processes nor threads, where the kernel applies it: not for root).
    """

    wall_s: float = 5.0
    cpu_s: int = 3
    memory_bytes: int = 512 * MIB
    output_bytes: int = 64 * 1024
    file_bytes: int = 8 * MIB
    write_opens: int = 16
    open_files: int = 32
    processes: int = 0

    def __post_init__(self) -> None:
        for key in ("wall_s", "cpu_s", "memory_bytes", "output_bytes", "file_bytes", "open_files"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"rewards.sandbox.Limits: {key} must be a positive number, got {value!r}")
        for key in ("write_opens", "processes"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"rewards.sandbox.Limits: {key} must be a whole number >= 0, got {value!r}")


class Run(NamedTuple):
    """One run's stdout (decoded, at most output_bytes of it), how it ended, and a short reason."""

    stdout: str
    status: str
    detail: str = ""


@functools.cache
def _python_roots() -> tuple[str, ...]:
    """The folders of the Python installation a program may read: the standard library and its extensions."""
    roots = {os.path.realpath(os.path.dirname(os.__file__))}
    dynload = sysconfig.get_config_var("DESTSHARED")
    if isinstance(dynload, str) and dynload:
        roots.add(os.path.realpath(dynload))
    return tuple(sorted(roots))


@functools.cache
def _interpreter() -> str:
    # The base interpreter, not a virtualenv's launcher: the child needs no site-packages of the project.
    return os.path.realpath(sys.executable)


def _rlimits(limits: Limits) -> list[tuple[str, int, int]]:
    cpu = max(1, int(limits.cpu_s))
    return [
        # soft: SIGXCPU, which ends the program; hard a second later: SIGKILL, should it catch SIGXCPU
        ("RLIMIT_CPU", cpu, cpu + 1),
        ("RLIMIT_AS", int(limits.memory_bytes), int(limits.memory_bytes)),
        ("RLIMIT_FSIZE", int(limits.file_bytes), int(limits.file_bytes)),
        ("RLIMIT_NPROC", limits.processes, limits.processes),
        ("RLIMIT_NOFILE", int(limits.open_files), int(limits.open_files)),
        ("RLIMIT_CORE", 0, 0),
    ]


def _environment(scratch: str) -> dict[str, str]:
    # Nothing of the parent's: no tokens, no proxies, no PYTHON* settings
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": scratch,
        "TMPDIR": scratch,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
    }


def _remove(folder: str) -> None:
    """Remove the scratch folder whatever the program left in it (it cannot change permissions, but a
    folder it emptied of write permission would otherwise stay)."""

    def retry(func: Callable, path: str, _exc: object) -> None:
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(path), 0o700)
            os.chmod(path, 0o700)
            func(path)

    shutil.rmtree(folder, onerror=retry)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _wait_exited(pid: int, deadline: float) -> bool:
    """Wait until the child has exited, without reaping it (so its process group id stays its own while the
    group is killed); False when the deadline passed first."""
    pidfd = -1
    with contextlib.suppress(OSError, AttributeError):  # a pidfd needs Linux 5.3; polling otherwise
        pidfd = os.pidfd_open(pid)
    try:
        pause = 0.0005
        while True:
            try:
                info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return True
            if info is not None:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if pidfd >= 0:
                with selectors.DefaultSelector() as selector:
                    selector.register(pidfd, selectors.EVENT_READ)
                    selector.select(timeout=left)
            else:
                time.sleep(min(pause, left))
                pause = min(pause * 2, 0.01)
    finally:
        if pidfd >= 0:
            os.close(pidfd)


def _read_capped(proc: subprocess.Popen, limits: Limits, deadline: float) -> tuple[bytes, bytes, str | None]:
    """stdout (up to the cap), the head of stderr, and TIMEOUT or OUTPUT when reading stopped early."""
    assert proc.stdout is not None and proc.stderr is not None
    out, err = bytearray(), bytearray()
    keep_err = 4096
    with selectors.DefaultSelector() as selector:
        for stream in (proc.stdout, proc.stderr):
            os.set_blocking(stream.fileno(), False)
            selector.register(stream, selectors.EVENT_READ)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return bytes(out), bytes(err), TIMEOUT
            for key, _ in selector.select(timeout=left):
                try:
                    chunk = os.read(key.fd, 65536)
                except BlockingIOError:
                    continue
                if not chunk:
                    selector.unregister(key.fileobj)
                    continue
                if key.fileobj is proc.stdout:
                    out += chunk
                    if len(out) > limits.output_bytes:
                        return bytes(out[: limits.output_bytes]), bytes(err), OUTPUT
                elif len(err) < keep_err:
                    err += chunk[: keep_err - len(err)]
    return bytes(out), bytes(err), None


def _status(returncode: int, stderr: str) -> tuple[str, str]:
    if returncode == 0:
        return OK, ""
    if returncode == REFUSED_EXIT and "sandbox: refused" in stderr:
        return REFUSED, stderr.rpartition("sandbox: refused ")[2].strip()[:200]
    if returncode < 0:
        number = -returncode
        if number == signal.SIGXCPU:
            return CPU, "signal SIGXCPU"
        if number == signal.SIGXFSZ:
            return FILE_SIZE, "signal SIGXFSZ"
        with contextlib.suppress(ValueError):
            return KILLED, f"signal {signal.Signals(number).name}"
        return KILLED, f"signal {number}"
    last = stderr.strip().splitlines()[-1][:200] if stderr.strip() else f"exit status {returncode}"
    if "MemoryError" in stderr:
        return MEMORY, last
    if "File too large" in stderr:  # Python ignores SIGXFSZ, so the write past the limit fails with EFBIG
        return FILE_SIZE, last
    return ERROR, last


def run_program(program: str, stdin: str = "", limits: Limits | None = None, *, scratch_root: str | None = None) -> Run:
    """Run one Python program on stdin under limits in a fresh scratch folder; never raises.

    scratch_root: where the scratch folder is made (the system's temporary folder by default).
    """
    limits = limits or Limits()
    try:
        scratch = os.path.realpath(tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=scratch_root))
    except OSError as error:
        return Run("", UNAVAILABLE, f"cannot make a scratch folder: {error}")
    try:
        return _run_in(scratch, program, stdin, limits)
    except Exception as error:  # the sandbox itself failed (no memory, no descriptors): the program scores 0
        return Run("", UNAVAILABLE, f"{type(error).__name__}: {error}")
    finally:
        _remove(scratch)


def _run_in(scratch: str, program: str, stdin: str, limits: Limits) -> Run:
    program_path = os.path.join(scratch, "main.py")
    with open(program_path, "w", encoding="utf-8", errors="replace") as handle:
        handle.write(program)
    stdin_path = os.path.join(scratch, "stdin.txt")
    with open(stdin_path, "w", encoding="utf-8", errors="replace") as handle:
        handle.write(stdin)
    rlimits = ";".join(f"{name}={soft}={hard}" for name, soft, hard in _rlimits(limits))
    argv = [_interpreter(), "-I", "-S", "-B", "-c", BOOTSTRAP, program_path, scratch, str(limits.write_opens), rlimits]
    argv += list(_python_roots())
    deadline = time.monotonic() + limits.wall_s
    with open(stdin_path, "rb") as stdin_file:
        proc = subprocess.Popen(
            argv,
            stdin=stdin_file,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=scratch,
            env=_environment(scratch),
            start_new_session=True,
            close_fds=True,
        )
    try:
        out, err, stopped = _read_capped(proc, limits, deadline)
        if stopped is None and not _wait_exited(proc.pid, deadline):
            stopped = TIMEOUT
    finally:
        # The whole group, whatever happened: nothing the program started outlives it
        _kill_group(proc.pid)
        proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    stdout = out.decode("utf-8", errors="replace")
    if stopped == TIMEOUT:
        return Run(stdout, TIMEOUT, f"ran past {limits.wall_s:g} s")
    if stopped == OUTPUT:
        return Run(stdout, OUTPUT, f"printed more than {limits.output_bytes} bytes")
    status, detail = _status(proc.returncode, err.decode("utf-8", errors="replace"))
    return Run(stdout, status, detail)


Runner = Callable[..., Run]


def run_many(
    jobs: Sequence[tuple[str, str]],
    limits: Limits | None = None,
    *,
    runner: Runner | None = None,
    workers: int | None = None,
    scratch_root: str | None = None,
) -> list[Run]:
    """Run (program, stdin) pairs in parallel, one process each, os.cpu_count() at a time by default; the
    results in the order of jobs."""
    limits = limits or Limits()
    run = runner or run_program
    kwargs = {"scratch_root": scratch_root} if runner is None else {}

    def one(job: tuple[str, str]) -> Run:
        try:
            return run(job[0], job[1], limits, **kwargs)
        except Exception as error:
            return Run("", UNAVAILABLE, f"{type(error).__name__}: {error}")

    if not jobs:
        return []
    count = max(1, min(len(jobs), workers or os.cpu_count() or 1))
    if count == 1:
        return [one(job) for job in jobs]
    with ThreadPoolExecutor(max_workers=count, thread_name_prefix="sandbox") as pool:
        return list(pool.map(one, jobs))
