"""WHAT a failed attempt was, in the one reading both sides of the process boundary share: out of memory,
an architecture the stack cannot load, a machine of a multi-node run lost, a disk that refused a write (full,
read-only, or not ours), or anything else. The attempt classifies its own exception this way and the supervisor reads a child's text and
exit status the same way, so a status never depends on which side saw the failure.

The OOM reader itself (figures, site) is contract.oom; the advice on what to change is launcher.oom.explain.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import subprocess
from pathlib import Path

from contract.oom import line_of, read_oom
from contract.shell import quoted

OOM, UNSUPPORTED, ERROR, NODE = "oom", "unsupported", "error", "node"  # contract.attempt's statuses

# ---------------------------------------------------------------------------------------------------
# Out of memory, and an exception that says so


def is_oom_exception(exc: BaseException) -> bool:
    """True for torch.OutOfMemoryError (by name: no torch import here) and RuntimeErrors that say OOM."""
    for cls in type(exc).__mro__:
        if cls.__name__ == "OutOfMemoryError":
            return True
    if isinstance(exc, MemoryError):
        return True
    text = str(exc)
    return read_oom(text) is not None and isinstance(exc, (RuntimeError, ValueError))


# ---------------------------------------------------------------------------------------------------
# Not a memory problem: an architecture the stack cannot load

_UNSUPPORTED = [
    re.compile(r"Model architectures? \[?'?([\w.]+)'?\]? (?:are|is) not supported"),
    re.compile(r"does not recognize this architecture"),
    re.compile(r"Unrecognized (?:model|configuration class)"),
    re.compile(r"Unsloth:? [^\n]{0,120}not supported yet"),
    re.compile(r"model type `([\w-]+)` but Transformers does not recognize"),
    re.compile(r"UnsupportedArchitecture|unsupported architecture", re.IGNORECASE),
    re.compile(r"vLLM[^\n]{0,80}\bnot supported\b", re.IGNORECASE),
    # vLLM's refusal of float16 for Gemma 2/3 and GLM-4, met below compute capability 8.0 (T4, V100)
    re.compile(r"The model type '?[\w-]+'? does not support float16"),
    # Unsloth's vLLM start-up for an architecture it cannot serve (seen with Gemma 3, unsloth #2107)
    re.compile(r"has no attribute 'vllm_engine'"),
]


def read_unsupported(text: str) -> str | None:
    """The line saying the model's architecture cannot be loaded by vLLM/transformers/Unsloth, else None."""
    for pattern in _UNSUPPORTED:
        if m := pattern.search(text or ""):
            return line_of(text, m.start())
    return None


# ---------------------------------------------------------------------------------------------------
# Not a memory problem either: a machine of a multi-node run was lost (its processes, or the network to it).
# A peer's collective fails when the other end goes away (gloo: the TCP pair; NCCL: its remote error or the
# watchdog), and torch elastic's c10d rendezvous gives up when a machine does not come back within its timeout.

_NODE_LOST = [
    re.compile(r"RendezvousTimeoutError|RendezvousClosedError|RendezvousConnectionError"),
    re.compile(r"gloo/transport/tcp/[\w.]+:\d+\] [^\n]{0,80}(?:Connection (?:reset|closed) by peer|Broken pipe)"),
    re.compile(r"Gloo connectFullMesh failed"),
    re.compile(r"ncclRemoteError|remote process exited or there was a network error"),
    re.compile(r"NCCL communicator was aborted|Watchdog caught collective operation timeout"),
    re.compile(r"DistNetworkError"),
    re.compile(r"a machine of the run is lost"),  # trainer.ranks.check_in: ranks that never came
]


def read_node_failure(text: str) -> str | None:
    """The line saying a machine of the run went away (a peer's connection, the rendezvous), else None."""
    for pattern in _NODE_LOST:
        if m := pattern.search(text or ""):
            return line_of(text, m.start())
    return None


def classify_failure(text: str, returncode: int | None = None) -> str:
    """'oom', 'unsupported', 'node' or 'error' for a failed attempt's text (and exit status when known). An OOM
    comes first: a rank that ran out of memory takes its peers' connections down with it."""
    if read_oom(text, returncode) is not None:
        return OOM
    if read_unsupported(text):
        return UNSUPPORTED
    if read_node_failure(text):
        return NODE
    return ERROR


# ---------------------------------------------------------------------------------------------------
# A child killed by SIGKILL: the kernel's OOM killer, or someone's `kill -9`? Only the kernel can say.


def oom_kill_count() -> int | None:
    """The kernel's count of OOM kills in this process's memory cgroup (cgroup v2 memory.events, or v1
    memory.oom_control), None where neither can be read."""
    candidates: list[Path] = []
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _id, controllers, group = line.split(":", 2)
            if controllers == "":
                candidates.append(Path("/sys/fs/cgroup") / group.lstrip("/") / "memory.events")
            elif "memory" in controllers.split(","):
                candidates.append(Path("/sys/fs/cgroup/memory") / group.lstrip("/") / "memory.oom_control")
    except (OSError, ValueError):
        pass
    candidates += [Path("/sys/fs/cgroup/memory.events"), Path("/sys/fs/cgroup/memory/memory.oom_control")]
    for path in candidates:
        try:
            for line in path.read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill" and value.strip().isdigit():
                    return int(value)
        except OSError:
            continue
    return None


def _dmesg_names(pid: int) -> bool | None:
    """Whether the kernel log names `pid` as killed for memory; None where the log cannot be read."""
    try:
        done = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0 or not done.stdout:
        return None
    return re.search(rf"(Killed process {pid}\b|oom-kill:.*\bpid={pid}\b)", done.stdout) is not None


def killed_by_kernel_oom(pid: int | None, count_before: int | None) -> bool | None:
    """After a child died of SIGKILL: True when the kernel says it killed for memory (its cgroup's OOM-kill
    count rose during the attempt, or its log names the pid), False when it says not, None when unknown."""
    after = oom_kill_count()
    if count_before is not None and after is not None:
        if after > count_before:
            return True
    if pid is not None:
        named = _dmesg_names(pid)
        if named is not None:
            return named
    if count_before is not None and after is not None:
        return False
    return None


# ---------------------------------------------------------------------------------------------------
# A write refused by the file system: full, read-only, a folder this user may not write, or a file larger than
# the file system (FAT32: 4 GiB) or this process (`ulimit -f`) allows

DISK_FULL, READ_ONLY, NO_PERMISSION, TOO_LARGE = "full", "read-only", "permission", "too large"
_ERRNO_PROBLEM = {
    errno.ENOSPC: DISK_FULL,
    errno.EDQUOT: DISK_FULL,
    errno.EROFS: READ_ONLY,
    errno.EACCES: NO_PERMISSION,
    errno.EPERM: NO_PERMISSION,
    errno.EFBIG: TOO_LARGE,
}
_TEXT_PROBLEM = (
    ("No space left on device", DISK_FULL),
    ("StorageFull", DISK_FULL),
    ("Disk quota exceeded", DISK_FULL),
    ("Read-only file system", READ_ONLY),
    ("Permission denied", NO_PERMISSION),
    ("File too large", TOO_LARGE),
    ("FileTooLarge", TOO_LARGE),
)
# A Rust writer (safetensors) words an OSError as "... (os error 27)", without an errno attribute
_OS_ERROR_NUMBER = re.compile(r"\(os error (\d+)\)")
_FAT = ("vfat", "msdos", "fat", "umsdos")  # every file under 4 GiB (exFAT has no such limit)
MOUNTS = Path("/proc/self/mounts")
# torch.save's zip writer words a full disk as its own failure, without the errno
_TORCH_WRITER_TEXTS = ("PytorchStreamWriter failed writing", "inline_container.cc", "file write failed")
# Below this much free space a failed torch.save is the disk's doing
_NEARLY_FULL_BYTES = 64 * 2**20


def write_problem(exc: BaseException, folder: Path | None = None) -> str | None:
    """DISK_FULL, READ_ONLY, NO_PERMISSION or TOO_LARGE when `exc` is a refused write (by its errno, the errno a
    Rust writer quotes, its words, or torch's writer failing on a nearly full disk under `folder`), else None."""
    if isinstance(exc, OSError) and exc.errno in _ERRNO_PROBLEM:
        return _ERRNO_PROBLEM[exc.errno]
    text = str(exc)
    number = _OS_ERROR_NUMBER.search(text)
    if number and int(number.group(1)) in _ERRNO_PROBLEM:
        return _ERRNO_PROBLEM[int(number.group(1))]
    for words, problem in _TEXT_PROBLEM:
        if words in text:
            return problem
    if folder is None or not any(t in text for t in _TORCH_WRITER_TEXTS):
        return None
    try:
        return DISK_FULL if shutil.disk_usage(folder).free < _NEARLY_FULL_BYTES else None
    except OSError:
        return None


def _owner_text(path: Path) -> str:
    """'owned by uid N' for the nearest existing folder at or above `path`, with this process's uid."""
    probe = Path(path)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        owner = probe.stat().st_uid
    except OSError:
        return f"you are uid {os.getuid()}"
    return f"{probe} is owned by uid {owner}, you are uid {os.getuid()}"


def in_image() -> bool:
    """Whether this process runs in the grpo-train image (its Dockerfile sets GRPO_TRAIN_IMAGE=1)."""
    from contract.environment import ENV_IMAGE

    return os.environ.get(ENV_IMAGE, "") == "1"


def _mount_of(path: Path) -> tuple[str, str] | None:
    """(mount point, file system type) of the nearest existing folder at or above `path`, from /proc/self/mounts;
    None where it cannot be read."""
    probe = Path(os.path.abspath(path))
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        real = os.path.realpath(probe)
        lines = MOUNTS.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    best: tuple[str, str] | None = None
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        # the kernel writes a space, tab, newline or backslash in a mount point as an octal escape
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[1])
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= len(best[0])):
            best = (point, fields[2])
    return best


def _file_size_rlimit() -> int | None:
    """The most bytes this process may write to one file (`ulimit -f`), None when unlimited or unknown."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    except (ImportError, OSError, ValueError, AttributeError):
        return None
    return None if soft == resource.RLIM_INFINITY or soft < 0 else soft


def size_limit_text(folder: Path) -> str:
    """Which limit refused a file this large under `folder`: FAT's 4 GiB, this process's `ulimit -f`, or the
    file system's own limit or a quota, naming the file system and its mount point where they can be read."""
    mount = _mount_of(folder)
    where = f"{mount[1]} at {mount[0]}" if mount else "its file system"
    rlimit = _file_size_rlimit()
    if mount and mount[1].lower() in _FAT:
        return f"{where} is FAT, which keeps every file under 4 GiB"
    if rlimit is not None:
        return f"this process may write files of at most {rlimit / 2**20:.1f} MiB (`ulimit -f`), on {where}"
    return f"{where} refuses a file this large (a size limit of its own, or a quota)"


def write_fix(problem: str | None, folder: Path, option: str = "--output-dir") -> str:
    """The fix for a refused write, in parentheses: a permission problem names the folder's owner and how to
    give it to this user (in the image: as `docker run` options, since the folder is a mount whose owner is
    fixed on the host); a full or read-only disk asks for space or another folder (`option` names where that
    folder is given); a file too large, a file system without the limit."""
    if problem == NO_PERMISSION:
        if in_image():
            return (
                f"({_owner_text(folder)}) (fix: on the host, create the folder you mount there yourself before "
                "`docker run` (`mkdir -p outputs`: a folder Docker creates belongs to root), or give it to "
                "yourself with `sudo chown -R $(id -u):$(id -g) HOST_FOLDER`, and run with `--user "
                '"$(id -u):$(id -g)"`; for the caches use a named volume, `-v grpo-train-cache:/home/app/.cache`)'
            )
        return (
            f"({_owner_text(folder)}) (fix: give that folder to this user, e.g. `sudo chown -R $(id -u):$(id -g) "
            f"{quoted(folder)}`, or, in Docker, run with `--user $(id -u):$(id -g)` and mount folders this user owns)"
        )
    if problem == READ_ONLY:
        return f"(fix: choose a writable {option})"
    if problem == TOO_LARGE:
        limited = " (or lift this shell's limit: `ulimit -f unlimited`)" if _file_size_rlimit() is not None else ""
        return (
            f"(fix: give {option} a folder on a file system without a 4 GiB file limit (ext4, XFS, NTFS or exFAT; "
            f"not FAT32){limited})"
        )
    if problem == DISK_FULL:
        return f"(fix: free disk space, or choose a writable {option})"
    return (
        f"(fix: choose a writable {option})"  # not a disk's limit: the place itself refuses (a missing parent, /proc)
    )


def write_failure_text(
    exc: BaseException, folder: Path, needed_bytes: int | None = None, option: str = "--output-dir"
) -> str:
    """One line for a refused write: which folder and why; a full disk names the disk and its free space
    (contract.safe_write.disk_error_text), a permission problem the folder's owner, a file too large the limit
    that refused it; then the fix (`option`: where the user gives the folder)."""
    from contract.safe_write import disk_error_text

    where = Path(getattr(exc, "filename", None) or folder)
    problem = write_problem(exc, folder)
    if problem == TOO_LARGE:
        limit = size_limit_text(where)
        return f"cannot write to {where}: {os.strerror(errno.EFBIG)} ({limit}) {write_fix(problem, where, option)}"
    if problem == DISK_FULL and isinstance(exc, OSError) and exc.errno:
        return f"{disk_error_text(exc, where, needed_bytes)} {write_fix(problem, where, option)}"
    if isinstance(exc, OSError) and exc.errno:
        what = os.strerror(exc.errno)
    else:
        said = next((w for w, _ in _TEXT_PROBLEM if w in str(exc)), None)
        what = said or f"{os.strerror(errno.ENOSPC)} ({line_of(str(exc), 0)})"
        problem = problem or (None if said else DISK_FULL)  # a writer's words without an errno: a full disk
    return f"cannot write to {where}: {what} {write_fix(problem, where, option)}"
