"""A full disk loses nothing: every file of a run is written whole or not at all, and the run ends with exit 1
and one line naming the disk (no traceback, no empty attempts.jsonl or trainer state poisoning a resume)."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from contract.attempt import checkpoint_problem
from contract.safe_write import append_line, disk_error_text, write_atomic
from support.cli import train_py


def fill(folder: Path) -> None:
    """Fill the disk under `folder` to the last byte."""
    with open(folder / "filler", "wb", buffering=0) as handle:
        for size in (65536, 4096, 512, 1):
            try:
                while True:
                    handle.write(b"\0" * size)
            except OSError:
                pass


def test_append_line_on_a_full_disk_leaves_no_part_and_no_empty_file(small_disk):
    fill(small_disk)
    with pytest.raises(OSError) as failed:
        append_line(small_disk / "attempts.jsonl", json.dumps({"attempt": 1, "text": "x" * 20000}))
    assert failed.value.errno == errno.ENOSPC
    assert not (small_disk / "attempts.jsonl").exists()


def test_write_atomic_on_a_full_disk_keeps_the_old_content(small_disk):
    (small_disk / "plan.json").write_text('{"old": true}')
    fill(small_disk)
    with pytest.raises(OSError):
        write_atomic(small_disk / "plan.json", "x" * 200000)
    assert json.loads((small_disk / "plan.json").read_text()) == {"old": True}
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler", "plan.json"]  # no temporary left


def test_disk_error_text_names_the_disk_and_the_space(small_disk):
    text = disk_error_text(OSError(errno.ENOSPC, "No space left on device"), small_disk / "run", 3 * 2**20)
    assert f"cannot write to {small_disk / 'run'}: No space left on device (disk {small_disk}" in text
    assert " free" in text and "about 3.0 MiB needed" in text


def _fill(folder, leave_bytes: int) -> None:
    import shutil

    free = shutil.disk_usage(folder).free
    (folder / "filler").write_bytes(b"\0" * max(0, free - leave_bytes))


def test_append_line_on_a_full_disk_leaves_whole_lines(small_disk):
    path = small_disk / "attempts.jsonl"
    append_line(path, json.dumps({"attempt": 1}))
    _fill(small_disk, 0)
    with pytest.raises(OSError) as info:
        append_line(path, json.dumps({"attempt": 2, "pad": "x" * 20000}))
    assert info.value.errno in (28, 122)
    assert path.read_text() == '{"attempt": 1}\n'  # nothing half-written
    text = disk_error_text(info.value, small_disk, needed_bytes=3 * 2**20)
    assert "No space left on device" in text and str(small_disk) in text and "3.0 MiB needed" in text


def test_write_atomic_keeps_the_old_file_when_the_disk_is_full(small_disk):
    path = small_disk / "summary.json"
    write_atomic(path, '{"old": true}')
    _fill(small_disk, 0)
    with pytest.raises(OSError):
        write_atomic(path, "y" * 200_000)
    assert path.read_text() == '{"old": true}'
    assert [p.name for p in small_disk.iterdir() if p.name.startswith(".")] == []  # no temporary file left


def test_e2e_full_disk_ends_with_one_line_and_nothing_poisoned(small_disk, tmp_path, tiny_cache):
    env = {k: v for k, v in os.environ.items() if k not in ("FAKE_CHILD_PLAN", "GRPO_INJECT_OOM")}
    env["GRPO_TRAIN_CACHE"] = str(tiny_cache)  # the session's tiny model, off the small disk
    done = train_py(
        "--auto",
        "--set",
        "max_steps=4",
        "--set",
        "save_steps=2",
        "--set",
        "eval_samples=0",
        "--set",
        "train_samples=16",
        "--output-dir",
        str(small_disk),
        env=env,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 1, output[-4000:]
    assert "Traceback" not in output, output[-4000:]
    lines = [line for line in output.splitlines() if "No space left on device" in line]
    assert lines and any(f"(disk {small_disk}" in line for line in lines), output[-4000:]
    for run_dir in small_disk.glob("run-*"):
        attempts = run_dir / "attempts.jsonl"
        if attempts.exists():  # whole lines, or no file at all
            assert attempts.stat().st_size > 0
            for line in attempts.read_text().splitlines():
                json.loads(line)
        for state in run_dir.glob("attempt-*/checkpoint-*/trainer_state.json"):
            if state.stat().st_size == 0:  # an empty state is never taken for a checkpoint
                assert checkpoint_problem(state.parent) is not None
        for name in ("plan.json", "attempt-*/profile.yaml", "attempt-*/metrics.jsonl", "attempt-*/outcome.json"):
            for path in run_dir.glob(name):
                assert path.stat().st_size > 0, path
