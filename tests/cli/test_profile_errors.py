"""Profiles refused on the command line as a user meets them: the file, the key, the fix and exit 2, before anything loads."""

import os

import pytest

from contract.errors import EXIT_BAD_INPUT
from support.cli import train_py as train
from support.profile_data import write


def test_an_empty_profile_exits_2_naming_the_file(tmp_path):
    path = write(tmp_path, "")
    result = train("--profile", str(path), "--dry-run")
    assert result.returncode == EXIT_BAD_INPUT
    assert str(path) in result.stderr and "the file is empty" in result.stderr


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_a_device_file_is_refused_at_once():
    result = train("--profile", "/dev/zero", "--dry-run")
    assert result.returncode == EXIT_BAD_INPUT and "not a regular file" in result.stderr


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs fifos")
def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    # a read that blocks shows no progress (no output, no CPU): the runner fails the test, naming the command
    result = train("--profile", str(fifo), "--dry-run")
    assert result.returncode == EXIT_BAD_INPUT and "not a regular file" in result.stderr


@pytest.mark.parametrize("flag", ["nan", "inf", "-inf", "1e308", "0", "-4"])
def test_gpu_memory_that_is_not_a_card_exits_2(flag):
    result = train("--auto", "--dry-run", "--gpu-memory", flag)
    assert result.returncode == EXIT_BAD_INPUT, result.stderr
    assert "--gpu-memory" in result.stderr and "Traceback" not in result.stderr


def test_a_tool_without_a_docstring_exits_2_at_the_profile_check(tmp_path):
    (tmp_path / "t.py").write_text("def bare(word: str) -> str:\n    return word\n", encoding="utf-8")
    path = write(tmp_path, "dataset: arithmetic\ntools: [t.py:bare]\n")
    result = train("profiles", "check", str(path))
    assert result.returncode == EXIT_BAD_INPUT, result.stderr
    assert "key 'tools'" in result.stderr and "tool bare (t.py:bare, line 1) has no docstring" in result.stderr
    assert "fix:" in result.stderr and "Traceback" not in result.stderr
