"""HOW a file is written so that a crash or a full disk never leaves half of one: whole-file replacement,
whole-line appends, and the one line that says which disk is full and by how much."""

from __future__ import annotations

import errno
import os
from pathlib import Path


def dangling_link(path: Path) -> str | None:
    """Why `path`, or a folder above it, is a symbolic link that leads nowhere (a loop, or a missing target),
    else None. Path.exists() says False for both, so a caller would go on to create the file there and fail
    with a traceback (FileExistsError, a symlink-loop RuntimeError)."""
    path = Path(os.path.abspath(path))
    for candidate in (path, *path.parents):
        if os.path.islink(candidate) and not os.path.exists(candidate):
            try:
                os.stat(candidate)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    return f"{candidate} is a symbolic link that loops back on itself"
            return f"{candidate} is a symbolic link to {os.readlink(candidate)}, which does not exist"
    return None


def write_atomic(path: Path, data: str | bytes) -> Path:
    """Write to a temporary name beside the file, flush it to disk, then rename it over the file: a reader
    (or a resume after a crash) sees the old content or the new, never a part."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    raw = data.encode("utf-8") if isinstance(data, str) else data
    try:
        with open(tmp, "wb") as handle:
            handle.write(raw)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def append_line(path: Path, line: str) -> None:
    """Append one whole line (one write, flushed to disk). On a full disk nothing is appended: a partial
    write is cut back, so the file never ends in half a record."""
    raw = (line.rstrip("\n") + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        start = os.fstat(fd).st_size
        try:
            written = 0
            while written < len(raw):
                written += os.write(fd, raw[written:])
            os.fsync(fd)
        except OSError:
            os.ftruncate(fd, start)
            if start == 0:  # this call created it: leave no empty file behind
                Path(path).unlink(missing_ok=True)
            raise
    finally:
        os.close(fd)


def disk_error_text(exc: OSError, folder: Path, needed_bytes: int | None = None) -> str:
    """One line for a failed write: which disk, how much is free, how much more was needed when known."""
    import errno
    import shutil

    folder = Path(folder)
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent

    def size(n: float) -> str:
        return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{max(n / 1024, 0.1 if n else 0):.1f} KiB"

    try:
        free = shutil.disk_usage(probe).free
        free_text = f"{size(free)} free"
    except OSError:
        free, free_text = None, "free space unknown"
    mount = probe.resolve()
    while not os.path.ismount(mount) and mount != mount.parent:
        mount = mount.parent
    reason = os.strerror(exc.errno) if exc.errno else str(exc)
    text = f"cannot write to {folder}: {reason} (disk {mount}, {free_text}"
    if needed_bytes and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        text += f", about {size(needed_bytes)} needed"
    return text + ")"
