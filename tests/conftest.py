"""Shared fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

# GSM8K lies next to the repository (../shared/data/gsm8k); it is never copied into it.
GSM8K_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "gsm8k"


@pytest.fixture(scope="session")
def gsm8k_dir() -> Path:
    """The folder holding GSM8K's train.jsonl and test.jsonl; the test is skipped when it is absent."""
    if not all((GSM8K_DIR / f"{split}.jsonl").is_file() for split in ("train", "test")):
        pytest.skip("GSM8K data not found at ../shared/data/gsm8k (train.jsonl, test.jsonl) next to the repository")
    return GSM8K_DIR


@pytest.fixture
def small_disk(tmp_path):
    """A folder on its own 1 MiB tmpfs, to fill up (needs the right to mount: skipped where it is refused)."""
    import shutil
    import subprocess

    folder = tmp_path / "disk"
    folder.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no `mount` command: cannot make a small disk")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({done.stderr.strip() or done.returncode})")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


@pytest.fixture(autouse=True)
def own_ledger(tmp_path, monkeypatch):
    """Each test measures into a ledger of its own: an injected OOM in one test never reaches the plan of
    another, nor the ledger of the machine the tests run on."""
    monkeypatch.setenv("GRPO_TRAIN_LEDGER", str(tmp_path / "ledger.jsonl"))
