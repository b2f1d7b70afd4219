"""`gpu-check`: the measurement kit for a card (benchmarks/gpu_check.py): every shipped rung's worst-case
probe and a timed step on this GPU, its table written under benchmarks/gpu/. The options after `gpu-check` are
the kit's own (`python train.py gpu-check --help`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SUMMARY = "measure this card: every rung's probe and a timed step, a table under benchmarks/gpu/"
EXAMPLES = ("python train.py gpu-check --budget-s 540",)
KIT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"
PASS_THROUGH = True  # everything after the command name goes to the kit as it is


def add_arguments(parser) -> None:
    parser.add_argument("kit_args", nargs="*", metavar="KIT_OPTION", help="the kit's own options")


def run(args) -> int:
    from contract.errors import UsageError

    if not KIT.is_file():
        raise UsageError(
            f"gpu-check: the kit {KIT} is not here (fix: run from a clone of grpo-train, or the "
            "image, which carries benchmarks/gpu_check.py)"
        )
    return subprocess.call([sys.executable, str(KIT), *args.kit_args])
