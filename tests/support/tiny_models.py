"""The tiny models the suite trains, built into one cache that outlives a test run: the CPU profiles' model (and
its tool-calling variant) as tests/conftest.py's fixtures ask for them, each built once, in a child process, under
a lock that all of pytest-xdist's workers share.

Run as a script, it builds the CPU profiles' model before the suite starts: `make test` does that beside the
installs that need only one core, so that no worker waits the build out with a core idle.
"""

from __future__ import annotations

import fcntl
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CPU_DEFAULT = REPO / "profiles" / "cpu-tiny-8gen.yaml"
# The cache, kept across test runs: a build is reused wherever its key (task, seed, shape, warm-start settings)
# matches, so only the first run of a clone pays for it. GRPO_TEST_CACHE moves it.
TEST_MODEL_CACHE = Path(os.environ.get("GRPO_TEST_CACHE") or REPO / ".cache" / "test-models")
# Touched when the session's models are ready: a model folder newer than it was built by a run
READY_MARK = ".session-ready"
BASE = "import sys; from tiny_model.build import ensure_tiny; print(ensure_tiny('arithmetic', seed=int(sys.argv[1])))"
BASE_LOCK = ".build.lock"
TOOLS = (
    "import sys; from tiny_model.tool_variant import ensure_tiny_tools; "
    "print(ensure_tiny_tools('arithmetic', seed=int(sys.argv[1])))"
)
# its own lock, so that the workers that only need the base model do not wait for this build
TOOLS_LOCK = ".build-tools.lock"


def cpu_seed() -> int:
    """The seed of the CPU profiles, which is also the seed their tiny model is built with."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from profiles.load import load_profile

    return load_profile(CPU_DEFAULT).seed


def build_under_lock(code: str, seed: int, root: Path, lock_name: str) -> Path:
    """Run `code` (which prints the folder it built or found) in a child process, as train.py builds a model,
    holding `root/lock_name`: one build for all the suite's processes, the others wait, then find it built. The
    calling process imports no torch for it. The build (its warm start included: under a minute on an idle
    2-core machine, several times that on a busy one) is bounded by its progress, not by wall time."""
    from support.waiting import run_to_end

    root.mkdir(parents=True, exist_ok=True)
    with open(root / lock_name, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        result = run_to_end(
            [sys.executable, "-c", code, str(seed)], cwd=REPO, env={**os.environ, "GRPO_TRAIN_CACHE": str(root)}
        )
    if result.returncode != 0:
        raise RuntimeError(f"building a tiny model failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}")
    return Path(result.stdout.strip().splitlines()[-1])


def build_base(seed: int) -> Path:
    """The CPU profiles' tiny model in TEST_MODEL_CACHE, built or found, with READY_MARK touched after it."""
    folder = build_under_lock(BASE, seed, TEST_MODEL_CACHE, BASE_LOCK)
    (TEST_MODEL_CACHE / READY_MARK).touch()
    return folder


def main() -> int:
    # run as a script, from tests/support: the repository and tests/ importable, as under pytest
    sys.path[:0] = [str(REPO), str(REPO / "tests")]
    print(f"the CPU profiles' tiny model: {build_base(cpu_seed())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
