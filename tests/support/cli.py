"""The one way tests start the command line as a user does: `python train.py ARGS` in a fresh process, from the
repository, with a wide terminal (tests assert on JSON and files, but a human reading a failure wants whole
lines) and without the multi-machine variables of the surrounding shell. tests/conftest.py refuses a train.py
started from anywhere else, so what every such test runs is set here once."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from support.waiting import run_to_end

REPO = Path(__file__).resolve().parents[2]
TRAIN_PY = REPO / "train.py"


def train_py_argv(*args: object, python: str | None = None, script: str | Path = TRAIN_PY) -> list[str]:
    """`python train.py ARGS` as an argument list (for a wrapper such as a job script to run later)."""
    return [python or sys.executable, str(script), *map(str, args)]


def train_py_env(env: dict | None = None, **extra_env: str) -> dict[str, str]:
    """The environment a test's train.py runs in: `env` as given, or this process's without the multi-machine
    variable of the surrounding shell; then `extra_env` added."""
    if env is None:
        environ = dict(os.environ)
        environ.pop("GRPO_NUM_MACHINES", None)
    else:
        environ = dict(env)
    return {**environ, "COLUMNS": "400", **extra_env}


def train_py(
    *args: object,
    env: dict | None = None,
    cwd: Path | str = REPO,
    timeout: float | None = None,
    input: str | None = None,
    python: str | None = None,
    script: str | Path = TRAIN_PY,
    prefix: Sequence[str] = (),
    **extra_env: str,
) -> subprocess.CompletedProcess:
    """Run `python train.py ARGS` to its end; its CompletedProcess (text). `env` replaces the environment,
    `extra_env` adds to it; `prefix` goes before the interpreter (a wrapper that switches the user, say);
    `python` and `script` name another interpreter or another copy of train.py (a moved checkout).

    The run is bounded by its progress (support.waiting.run_to_end), never by wall time: `timeout` is accepted
    from callers written when it was a limit, and ignored."""
    del timeout
    return run_to_end(
        [*prefix, *train_py_argv(*args, python=python, script=script)],
        cwd=cwd,
        env=train_py_env(env, **extra_env),
        input=input,
    )


def start_train_py(
    *args: object,
    env: dict | None = None,
    cwd: Path | str = REPO,
    python: str | None = None,
    script: str | Path = TRAIN_PY,
    prefix: Sequence[str] = (),
    extra_env: dict[str, str] | None = None,
    **popen: object,
) -> subprocess.Popen:
    """Start `python train.py ARGS` and return at once (a test that stops, kills or watches it); `popen` goes to
    subprocess.Popen (stdout, stderr, text, start_new_session, ...)."""
    return subprocess.Popen(  # type: ignore[call-overload]
        [*prefix, *train_py_argv(*args, python=python, script=script)],
        cwd=cwd,
        env=train_py_env(env, **(extra_env or {})),
        **popen,
    )


# Variables a test sets to inject a failure or force a path; a run meant to go as a user's goes without them.
INJECTED = ("GRPO_INJECT_OOM", "GRPO_TRAIN_NO_UNSLOTH", "GRPO_ATTEMPT_ESTIMATE_GIB")


def cpu_run_env(model_cache: Path | str, **extra_env: str) -> dict[str, str]:
    """The environment of a test's CPU training run, as a user's would be: this process's without INJECTED,
    `model_cache` as the model cache (the session's tiny models, built before any run), unbuffered output;
    then `extra_env`."""
    environ = {key: value for key, value in os.environ.items() if key not in INJECTED}
    return {**environ, "GRPO_TRAIN_CACHE": str(model_cache), "PYTHONUNBUFFERED": "1", **extra_env}


def tiny_model_folder(seed: int, long_answers: bool = False) -> str:
    """The folder, under a model cache, of the arithmetic tiny model a CPU profile at `seed` trains (`long_answers`:
    of its variant `tiny-long`)."""
    from tiny_model.build import build_key, tiny_shape

    return f"tiny-{build_key('arithmetic', seed, tiny_shape(), long_answers)}"


def short_cpu_run(tmp_path: Path, sets: list[str], profile: Path | None = None) -> tuple:
    """A two-step CPU run of `profile` (the CPU default) in `tmp_path` with its own cache and the `--set`s, as a
    user starts it: (the finished process, the final attempt's metrics.jsonl rows)."""
    import json

    env = dict(os.environ, GRPO_TRAIN_CACHE=str(tmp_path / "cache"), PYTHONUNBUFFERED="1", CUDA_VISIBLE_DEVICES="")
    for name in ("GRPO_INJECT_OOM", "GRPO_TRAIN_NO_UNSLOTH", "GRPO_ATTEMPT_ESTIMATE_GIB", "HF_TOKEN"):
        env.pop(name, None)
    base = ["length_probe=0", "max_steps=2", "save_steps=2", "eval_samples=2", "train_samples=16"]
    args = [item for pair in [*base, *sets] for item in ("--set", pair)]
    cpu = profile or REPO / "profiles" / "cpu-tiny-8gen.yaml"
    result = train_py("--profile", str(cpu), *args, "--output-dir", "outputs", cwd=tmp_path, env=env)
    if result.returncode != 0:
        return result, []
    attempt_dir = (next(Path(tmp_path / "outputs").glob("run-*")) / "final").resolve()
    text = (attempt_dir / "metrics.jsonl").read_text()
    return result, [json.loads(line) for line in text.splitlines() if line.strip()]
