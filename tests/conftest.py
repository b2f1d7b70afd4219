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
