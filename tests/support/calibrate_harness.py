"""`calibrate` as the command runs it, on two CPU rungs, with tests/support/fake_child.py standing in for each probe
process (FAKE_CHILD_PLAN says what each does), so that a test can signal it, fill its disk, or fail its probes
as a user's machine would. Usage: calibrate_harness.py OUTPUT_DIR; exits with the command's status."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from fake_runs import CPU_SETTINGS, FAKE_CHILD  # noqa: E402

from commands.calibrate import run_calibration  # noqa: E402
from launcher.card.detect import Machine  # noqa: E402
from launcher.plan.choose import make_plan  # noqa: E402
from launcher.plan.request import PlanRequest
from profiles.load import profile_from_dict  # noqa: E402

BASE = dict(
    **CPU_SETTINGS,
    max_steps=4,
    save_steps=2,
    eval_samples=0,
    gradient_accumulation_steps=1,
)


def rungs():
    return [
        profile_from_dict(
            dict(BASE, name="a", ladder=1, num_generations=8, max_completion_length=128, per_device_train_batch_size=8),
            "<harness a>",
        ),
        profile_from_dict(
            dict(BASE, name="b", ladder=2, num_generations=4, max_completion_length=64, per_device_train_batch_size=4),
            "<harness b>",
        ),
    ]


def main() -> int:
    from contract.errors import UsageError

    machine = Machine(gpus=[], message="test machine: no GPU", host_ram_gib=24.0, host_free_gib=20.0)
    plan = make_plan(PlanRequest(rungs(), machine))
    try:
        return run_calibration(plan, output_dir=Path(sys.argv[1]), child_command=FAKE_CHILD)
    except UsageError as exc:  # as train.py reports it
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # a signal after the command's handlers are gone: train.py's answer
        return 130


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # as train.py: a signal in the last moments still exits 130
        sys.exit(130)
