"""HOW a file or a folder is written so that a crash or a full disk never leaves half of one: whole-file
replacement, whole folders put in place by renames, whole-line appends, and the one line that says which disk
is full and by how much."""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable
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


def fsync_path(path: Path, directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def flushed_files(folder: Path, but: str = "") -> dict[str, int]:
    """Flush every file under `folder` (but the one named `but`) to disk: {relative path: size}, what a marker
    records so that a reader can tell the folder whole (each file there, at that size)."""
    files = {}
    for path in sorted(p for p in Path(folder).rglob("*") if p.is_file() and p.name != but):
        fsync_path(path)
        files[path.relative_to(folder).as_posix()] = path.stat().st_size
    return files


def publish_folder(
    folder: Path,
    write: Callable[[Path], None],
    seal: Callable[[Path, dict[str, int]], None] | None = None,
    shared: bool = False,
) -> None:
    """Put `folder` in place whole or not at all: `write(staged)` fills a hidden folder beside it, every file is
    flushed to disk, `seal(staged, sizes)` writes what marks it whole (last), and the staged folder takes the
    earlier one's place by two renames. A kill or a full disk at any point leaves the earlier folder or this one,
    each whole (between the renames under its hidden name, which staged_leftovers finds); never half a folder
    under the real name. `shared`: other processes may publish the same folder at once (a cache): the first
    one in place stands (its readers keep their files), and no other's staged folder is touched."""
    folder = Path(folder)
    staged, earlier = _hidden(folder, "partial"), _hidden(folder, "earlier")
    shutil.rmtree(staged, ignore_errors=True)
    try:
        staged.mkdir(parents=True)
        write(staged)
        sizes = flushed_files(staged)
        if seal is not None:
            seal(staged, sizes)
        fsync_path(staged, directory=True)
        if folder.exists() and not shared:
            os.replace(folder, earlier)
        try:
            os.replace(staged, folder)
        except OSError:
            if not (shared and folder.is_dir()):
                raise  # else another process's came first, and stands
        fsync_path(folder.parent, directory=True)
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    for leftover in [] if shared else staged_leftovers(folder):  # this one's earlier folder, a killed one's
        shutil.rmtree(leftover, ignore_errors=True)


def remove_folder(folder: Path) -> None:
    """Remove a published folder, renamed away first so that no half-deleted folder keeps the real name, and
    the hidden folders a killed process left beside it."""
    folder = Path(folder)
    if folder.exists():
        gone = _hidden(folder, "earlier")
        os.replace(folder, gone)
        shutil.rmtree(gone, ignore_errors=True)
    for leftover in staged_leftovers(folder):
        shutil.rmtree(leftover, ignore_errors=True)


def staged_leftovers(folder: Path) -> list[Path]:
    """The hidden folders a process killed while publishing `folder` left beside it: staged (newest first,
    then the one it was replacing)."""
    staged = sorted(folder.parent.glob(f".{folder.name}.partial-*"))
    earlier = sorted(folder.parent.glob(f".{folder.name}.earlier-*"))
    return [p for p in staged + earlier if p.is_dir()]


def _hidden(folder: Path, kind: str) -> Path:
    return folder.with_name(f".{folder.name}.{kind}-{os.getpid()}")


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
