"""The one way tests run the command line as a user does: `python train.py ARGS` in a fresh process, from the
repository, with a wide terminal (tests assert on JSON and files, but a human reading a failure wants whole
lines) and without the multi-machine variables of the surrounding shell."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TRAIN_PY = REPO / "train.py"


def train_py(
    *args: str, env: dict | None = None, cwd: Path | str = REPO, timeout: float = 120, **extra_env: str
) -> subprocess.CompletedProcess:
    """Run `python train.py ARGS`; its CompletedProcess (text). `env` replaces the environment, `extra_env`
    adds to it."""
    environ = dict(os.environ if env is None else env, COLUMNS="400", **extra_env)
    environ.pop("GRPO_NUM_MACHINES", None)
    return subprocess.run(
        [sys.executable, str(TRAIN_PY), *args], capture_output=True, text=True, cwd=cwd, env=environ, timeout=timeout
    )
