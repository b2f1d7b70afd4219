"""HOW a file a user names is read without waiting forever: opened without blocking (a FIFO with no writer
would hold the open), refused unless it is a regular file (/dev/zero never ends), and read up to a bound,
from its end when it is longer (a log's last lines are where an error is)."""

from __future__ import annotations

import os
import stat
from pathlib import Path


class NotRegularFile(OSError):
    """The path names a device, a FIFO, a socket or a folder: nothing that a read would finish."""


def read_tail(path: str | Path, limit: int) -> tuple[bytes, int]:
    """(at most the last `limit` bytes of the file, its whole size). FileNotFoundError and other OSErrors as
    os.open raises them; NotRegularFile for anything but a regular file."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            kind = (
                "a folder"
                if stat.S_ISDIR(info.st_mode)
                else "a FIFO"
                if stat.S_ISFIFO(info.st_mode)
                else "a device"
                if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode)
                else "not a regular file"
            )
            raise NotRegularFile(f"{path} is {kind}, not a regular file")
        if info.st_size > limit:
            handle.seek(info.st_size - limit)
        return handle.read(limit), info.st_size


def after_first_line(data: bytes) -> bytes:
    """A tail read from the middle of a file, from its first whole line on."""
    newline = data.find(b"\n")
    return data[newline + 1 :] if newline >= 0 else b""
