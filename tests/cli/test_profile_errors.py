"""Profiles refused on the command line as a user meets them: the file, the key, the fix and exit 2, before anything loads."""

import os

import pytest

from contract.errors import EXIT_BAD_INPUT
from support.cli import train_py as train
from support.profile_data import write


@pytest.mark.slow
def test_an_empty_profile_exits_2_naming_the_file(tmp_path):
    path = write(tmp_path, "")
    result = train("--profile", str(path), "--dry-run")
    assert result.returncode == EXIT_BAD_INPUT
    assert str(path) in result.stderr and "the file is empty" in result.stderr


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_a_device_file_is_refused_at_once():
    result = train("--profile", "/dev/zero", "--dry-run")
    assert result.returncode == EXIT_BAD_INPUT and "not a regular file" in result.stderr


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs fifos")
def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    # a read that blocks shows no progress (no output, no CPU): the runner fails the test, naming the command
    result = train("--profile", str(fifo), "--dry-run")
    assert result.returncode == EXIT_BAD_INPUT and "not a regular file" in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("flag", ["nan", "inf", "-inf", "1e308", "0", "-4"])
def test_gpu_memory_that_is_not_a_card_exits_2(flag):
    result = train("--auto", "--dry-run", "--gpu-memory", flag)
    assert result.returncode == EXIT_BAD_INPUT, result.stderr
    assert "--gpu-memory" in result.stderr and "Traceback" not in result.stderr
