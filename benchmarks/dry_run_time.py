"""How long `python train.py plan` takes, whole process, and which heavy modules it imports.

    python benchmarks/dry_run_time.py [--runs 10]

Target: <= 0.5 s wall on a 2-core machine, with no torch, unsloth, trl or transformers imported.
The CPU time (user + system) of each run is printed too: on a busy machine it moves far less than the wall.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "unsloth", "trl", "transformers", "vllm", "datasets")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--gpu-memory", default="24", help="plan for a what-if card of this size (GiB)")
    parser.add_argument("--model", help="plan this model (--set model=M): the fit solver derives its configurations")
    args = parser.parse_args()

    command = [sys.executable, str(REPO / "train.py"), "plan", "--gpu-memory", args.gpu_memory]
    if args.model:
        command += ["--set", f"model={args.model}"]
    walls, cpus = [], []
    for _ in range(args.runs):
        before = os.times()
        started = time.perf_counter()
        subprocess.run(command, cwd=REPO, check=True, capture_output=True)
        walls.append(time.perf_counter() - started)
        after = os.times()
        cpus.append(after.children_user - before.children_user + after.children_system - before.children_system)

    argv = command[2:]
    probe = (
        "import sys, io, contextlib, time; sys.argv=['train.py']; started = time.process_time(); import train\n"
        "import launcher.plan.choose, launcher.plan.derive, commands.plan, profiles.load, rich.table\n"
        "imported = time.process_time()\n"
        f"with contextlib.redirect_stdout(io.StringIO()): train.main({argv!r})\n"
        "done = time.process_time()\n"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))\n"
        "print(f'{imported - started:.3f} {done - imported:.3f}')"
    )
    out = (
        subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True)
        .stdout.strip()
        .splitlines()
    )
    heavy = out[0] if len(out) > 1 else ""
    imports_s, planning_s = out[-1].split()
    print(
        f"dry-run wall over {args.runs} runs: median {statistics.median(walls):.3f} s, "
        f"min {min(walls):.3f} s, max {max(walls):.3f} s (target <= 0.5 s)"
    )
    print(f"dry-run CPU time (user + system): median {statistics.median(cpus):.3f} s, min {min(cpus):.3f} s")
    print(
        f"of one run's CPU time: imports {imports_s} s, the plan itself (profiles, derive, judge, print) {planning_s} s"
    )
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        print("note: PYTHONDONTWRITEBYTECODE is set: every run compiles the project's modules afresh")
    print(f"heavy modules imported: {heavy or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
