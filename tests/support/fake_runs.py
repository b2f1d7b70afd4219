"""What the tests that run the supervisor against the fake attempt share: the fake attempt's command line and
the settings of a small CPU profile, to which each test adds its own steps and shapes."""

from __future__ import annotations

import sys
from pathlib import Path

FAKE_CHILD = [sys.executable, str(Path(__file__).resolve().parent / "fake_child.py")]

CPU_SETTINGS = dict(
    device="cpu",
    model="tiny",
    fast_inference=False,
    load_in_4bit=False,
    optim="adamw_torch",
    dataset="arithmetic",
    max_seq_length=256,
    max_prompt_length=128,
)
