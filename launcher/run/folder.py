"""WHERE a run lives: the output folder checked before anything starts, the run folder created or found
again, its lock (one supervisor at a time), damaged checkpoints set aside rather than deleted, and the stable
paths to script against: OUTPUT_DIR/latest -> the newest run folder, RUN_DIR/final -> the attempt whose adapter
is the run's result."""

from __future__ import annotations

import errno
import os
from datetime import datetime
from pathlib import Path

from contract.attempt import ATTEMPTS_FILE, PLAN_FILE
from contract.errors import UsageError
from contract.safe_write import dangling_link, write_atomic
from contract.shell import quoted

LOCK_FILE = "run.lock"
DAMAGED_SUFFIX = ".damaged"
# Kernel file systems: a path under them is never a place for a run's files.
_PSEUDO_ROOTS = (Path("/proc"), Path("/sys"), Path("/dev"))


def check_output_dir(path: Path, must_exist: bool = False, option: str = "--output-dir") -> None:
    """Refuse an --output-dir that cannot hold run folders: a file, a path under a file, a kernel pseudo
    file system, a read-only mount, a folder without write permission, or a run folder (or a folder in one).
    UsageError names the path and why. `option`: another folder to write into (export --out), which may lie
    in a run."""
    path = Path(path)
    absolute = Path(os.path.abspath(path))
    link = dangling_link(path)
    if link:
        raise UsageError(f"{option} {path}: {link} (fix: remove or repair the link, or give another folder)")
    for root in _PSEUDO_ROOTS:
        if absolute == root or root in absolute.parents:
            raise UsageError(
                f"{option} {path}: lies under {root}, a kernel file system, not a disk "
                "(fix: choose a folder on a disk, e.g. --output-dir outputs)"
            )
    if path.exists() and not path.is_dir():
        raise UsageError(f"{option} {path}: is a file, not a folder (fix: give a folder's path)")
    run = enclosing_run(path) if option == "--output-dir" else None
    if run is not None:
        # a run folder holds attempts; runs nested in it would be found by neither --resume nor `latest`
        raise UsageError(
            f"{option} {path}: is inside the run folder {run} (fix: give the folder that holds the runs, "
            f"--output-dir {quoted(run.parent)}, or `python train.py train --resume {quoted(run)}` to continue "
            "that run)"
        )
    existing = absolute
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise UsageError(
            f"{option} {path}: lies under {existing}, which is a file, not a folder (fix: give a folder's path)"
        )
    if must_exist and existing != absolute:
        raise UsageError(f"--resume: {option} {path} does not exist (fix: give the folder that holds the run-* folder)")
    try:
        read_only = bool(os.statvfs(existing).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    if read_only:
        raise UsageError(f"{option} {path}: {existing} is on a read-only mount (fix: choose a writable folder)")
    if not os.access(existing, os.W_OK | os.X_OK):
        from contract.failure import NO_PERMISSION, write_fix

        # its owner, and how to give it to this user (in the image: as `docker run` options)
        raise UsageError(
            f"{option} {path}: cannot write to {existing}: no permission {write_fix(NO_PERMISSION, existing)}"
        )


def is_run_folder(path: Path) -> bool:
    """Whether `path` is a run folder: run-* holding what a supervisor writes first (its plan, its attempts or
    its lock)."""
    path = Path(path)
    return (
        path.name.startswith("run-")
        and path.is_dir()
        and any((path / name).exists() for name in (PLAN_FILE, ATTEMPTS_FILE, LOCK_FILE))
    )


def enclosing_run(path: Path) -> Path | None:
    """The run folder `path` is, or lies in (`outputs/latest` and `RUN/final` followed), else None."""
    resolved = Path(os.path.abspath(stable_target(Path(path))))
    for candidate in (resolved, *resolved.parents):
        if is_run_folder(candidate):
            return candidate
    return None


def new_run_dir(output_dir: Path) -> Path:
    output_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    for n in range(1, 1000):
        path = output_dir / (f"run-{stamp}" if n == 1 else f"run-{stamp}-{n}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise UsageError(f"{output_dir}: cannot create a new run folder (fix: choose another --output-dir)")


def latest_run_dir(output_dir: Path) -> Path:
    pointed = follow(Path(output_dir) / LATEST)
    if pointed is not None and pointed.is_dir() and pointed.name.startswith("run-"):
        return pointed  # the run `latest` names: the newest started, or the one --resume RUN took up
    runs = sorted((p for p in output_dir.glob("run-*") if p.is_dir()), key=lambda p: (p.stat().st_mtime, p.name))
    if not runs:
        raise UsageError(
            f"--resume: no run-* folder in {output_dir} (fix: start a run with `python train.py train`, or give "
            "the --output-dir that holds it)"
        )
    return runs[-1]


def _holds(pid: int, lock: Path) -> bool:
    """Whether process `pid` is the supervisor that wrote `lock`: alive, started before the lock was written
    (a process started later got a reused pid), and running train.py / grpo-train. What /proc cannot tell
    (another system) counts as holding."""
    if not _alive(pid):
        return False
    try:
        written = lock.stat().st_mtime
    except OSError:
        written = None
    started = _start_time(pid)
    if started is not None and written is not None and started > written + 1.0:
        return False
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return True
    return not command or b"train.py" in command or b"grpo-train" in command


def _start_time(pid: int) -> float | None:
    """When process `pid` started (seconds since the epoch), from /proc; None where it cannot be read."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22, after the command name in parentheses
        boot = next(
            float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime ")
        )
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


class RunLock:
    """RUN_DIR/run.lock holding the supervisor's pid while it runs the folder: a second `--resume` of the same
    run is refused while the first trains; a lock left by a process that has died is taken over."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / LOCK_FILE
        self.held = False

    def acquire(self) -> RunLock:
        for _try in range(3):
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                owner = self._owner()
                if owner is not None and owner != os.getpid() and _holds(owner, self.path):
                    raise UsageError(
                        f"{self.path.parent}: this run is in use by process {owner} (its "
                        f"{LOCK_FILE}); a second supervisor would train over the first (fix: wait "
                        f"for it to end, or stop it: kill -INT {owner})"
                    ) from None
                self.path.unlink(missing_ok=True)  # stale: its owner has died
                continue
            try:
                os.write(fd, f"{os.getpid()}\n".encode())
            finally:
                os.close(fd)
            self.held = True
            return self
        raise UsageError(f"{self.path}: cannot take the run's lock (fix: remove the file if no run is active)")

    def _owner(self) -> int | None:
        try:
            return int(self.path.read_text(encoding="utf-8").split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def live_owner(self) -> int | None:
        """The pid of the supervisor that holds this run now, else None (no lock, or a stale one)."""
        owner = self._owner()
        return owner if owner is not None and _holds(owner, self.path) else None

    def release(self) -> None:
        if self.held and self._owner() == os.getpid():
            self.path.unlink(missing_ok=True)
        self.held = False


def set_aside(folder: Path) -> Path | None:
    """Rename a checkpoint that cannot be resumed from to checkpoint-N.damaged (-2, -3... when taken): it is
    kept for a person to look at and never picked again. None when it could not be renamed."""
    folder = Path(folder)
    for n in range(1, 100):
        target = folder.with_name(folder.name + DAMAGED_SUFFIX + ("" if n == 1 else f"-{n}"))
        if target.exists():
            continue
        try:
            folder.rename(target)
        except OSError as exc:
            if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
                continue
            return None
        return target
    return None


# ---------------------------------------------------------------------------------------------------
# Stable paths: `latest` in the output folder, `final` in a run folder

LATEST = "latest"  # OUTPUT_DIR/latest -> run-<stamp>, the run started (or taken up by --resume) last
FINAL = "final"  # RUN_DIR/final -> attempt-NN-<profile>, the attempt that finished ok: the run's adapter
# errno values of a file system that cannot hold symbolic links (FAT, some network and FUSE mounts)
_NO_LINKS = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}


def point(link: Path, target: Path) -> str | None:
    """Make `link` name `target` (by a relative path, so that a moved output folder keeps working), replacing
    what it named before in one rename: a reader sees the old target or the new, never none. Where the file
    system has no links, `link` is a plain file holding that relative path (follow reads both). None when
    done; else why not, in one line (a pointer is never worth failing a run for)."""
    link, target = Path(link), Path(target)
    relative = os.path.relpath(os.path.abspath(target), os.path.abspath(link.parent))
    if link.is_dir() and not link.is_symlink():
        return f"{link} is a folder of its own, not a link: not replaced (remove it to get {link.name} back)"
    tmp = link.with_name(f".{link.name}.tmp-{os.getpid()}")
    try:
        tmp.unlink(missing_ok=True)
        os.symlink(relative, tmp, target_is_directory=True)
    except OSError as exc:
        if exc.errno not in _NO_LINKS:
            return f"cannot point {link} at {target.name}: {exc.strerror or exc}"
        try:
            write_atomic(link, relative + "\n")  # the file system has no links: the path, in a plain file
        except OSError as error:
            return f"cannot write {link}: {error.strerror or error}"
        return None
    try:
        os.replace(tmp, link)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        return f"cannot point {link} at {target.name}: {exc.strerror or exc}"
    return None


def follow(path: Path) -> Path | None:
    """The folder a stable path names: a link resolved, or the plain-file stand-in read (relative to its
    folder); None when `path` is neither (absent, or a folder of its own)."""
    path = Path(path)
    if path.is_symlink():
        return Path(os.path.normpath(path.parent / os.readlink(path)))
    if path.is_file() and path.name in (LATEST, FINAL):
        try:
            text = path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            return None
        if text and "\n" not in text:
            return Path(os.path.normpath(path.parent / text))
    return None


def stable_target(given: Path) -> Path:
    """`given` with a stable path in it (`outputs/latest`, `.../final`, `outputs/latest/final`) replaced by
    the folder it names, part by part; any other path as it is."""
    given = Path(given)
    resolved = Path(given.anchor) if given.is_absolute() else Path()
    for part in given.parts[1:] if given.is_absolute() else given.parts:
        resolved = resolved / part
        if part in (LATEST, FINAL):
            pointed = follow(resolved)
            if pointed is not None:
                resolved = pointed
    return resolved


def point_latest(output_dir: Path, run_dir: Path) -> str | None:
    return point(Path(output_dir) / LATEST, run_dir)


def point_final(run_dir: Path, attempt_dir: Path) -> str | None:
    return point(Path(run_dir) / FINAL, attempt_dir)


def run_folder_of(given: Path) -> Path:
    """The run folder that `train --resume RUN` names: a run folder, `OUTPUT_DIR/latest`, a run's `final` or one
    of its attempt folders (their run). UsageError when it is none of them."""
    path = stable_target(Path(given).expanduser())
    if path.name.startswith("attempt-"):
        path = path.parent
    if not path.is_dir() or not path.name.startswith("run-"):
        raise UsageError(
            f"--resume {given}: not a run folder (fix: give outputs/latest, a run-* folder, or "
            "--resume alone for the newest run in --output-dir)"
        )
    return path
