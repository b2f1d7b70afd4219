"""`gpu-check`: measure this card against the estimate and the step-time model, within a time budget, with
nothing to download. The shipped rungs' architectures (random weights from the catalogue's facts), each probed
in a process of its own: Unsloth's path, then plain TRL + PEFT; memory read per component; a generation wave
and a training step timed at two completion lengths, beside the prediction at that shape. The table,
<card>.md and .json in --out-dir, is rewritten after every probe. Without a GPU: the tiny architecture on the
CPU, and an injected out-of-memory read and fallen back from. docs/gpu.md gives the one call for a GPU
machine without network."""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SUMMARY = "measure this card: memory by component and timed steps against the models, a table in --out-dir"
EXAMPLES = (
    "python train.py gpu-check --budget-s 540",
    'python train.py gpu-check --out-dir "$OUT" --models Qwen2.5-0.5B',
    "bash scripts/gpu-kit.sh OUT_DIR          (the one call on a GPU machine without network: docs/gpu.md)",
)
OUT_DIR = REPO / "benchmarks" / "gpu"
IMAGE_OUT_DIR = REPO / "outputs" / "gpu-check"  # in the image: the folder users mount (docs/gpu.md)


def default_out_dir() -> Path:
    """benchmarks/gpu/ in a clone (the tables are committed there); outputs/gpu-check/ in the image, whose
    project folders belong to root while outputs/ is the user's mount."""
    import os

    from contract.environment import ENV_IMAGE

    return IMAGE_OUT_DIR if os.environ.get(ENV_IMAGE) else OUT_DIR


LONGEST_S = 24 * 3600.0  # no option asks for more than a day


def _seconds(low: float):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
        if not math.isfinite(value) or not low <= value <= LONGEST_S:
            raise argparse.ArgumentTypeError(
                f"{text} is outside {low:g} to {LONGEST_S:g} seconds (fix: give a finite number of seconds in "
                "that range)"
            )
        return value

    parse.__name__ = "seconds"
    return parse


def add_arguments(parser) -> None:
    from measure.kit import BUDGET_S, MIN_BUDGET_S, MIN_PROBE_S, PROBE_TIMEOUT_S

    parser.add_argument(
        "--budget-s",
        type=_seconds(MIN_BUDGET_S),
        default=BUDGET_S,
        help=f"everything, the last table included, ends within this many seconds (at least {MIN_BUDGET_S:g}: the "
        "libraries' import check, one probe and the finish; default %(default)g)",
    )
    parser.add_argument(
        "--probe-timeout-s",
        type=_seconds(MIN_PROBE_S),  # in less a probe could not even import its libraries
        help=f"stop one probe's process after this many seconds (at least {MIN_PROBE_S:g}; default "
        f"{PROBE_TIMEOUT_S:g}, or --budget-s where that is shorter)",
    )
    parser.add_argument(
        "--out-dir",
        type=Path,
        help="where <card>.md and .json go (default benchmarks/gpu/ in a clone, outputs/gpu-check/ in the image)",
    )
    parser.add_argument(
        "--models",
        nargs="+",
        metavar="NAME",
        help="catalogue architectures whose name contains one of these, each in 16-bit and 4-bit, instead of "
        "the shipped rungs' four",
    )
    parser.add_argument(
        "--work-dir", type=Path, help="keep the probes' folders here (default: a temporary folder, removed at the end)"
    )
    parser.add_argument(
        "--fresh", action="store_true", help="start the table over instead of continuing this card's in --out-dir"
    )
    parser.add_argument("--probe-child", metavar="ATTEMPT_DIR", help=argparse.SUPPRESS)


def writable_folder(option: str, path: Path) -> Path:
    """`path` as a folder this process can write, created if missing; UsageError naming `option` otherwise."""
    from contract.errors import UsageError
    from contract.failure import write_fix, write_problem

    path = path.expanduser()
    if path.exists() and not path.is_dir():
        raise UsageError(f"{option} {path}: this is a file, not a folder (fix: give a folder, or move the file)")
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".write-test-"):
            pass
    except OSError as exc:
        raise UsageError(
            f"{option} {path}: cannot write there ({exc.strerror or exc}) {write_fix(write_problem(exc, path), path, option)}"
        ) from None
    return path.resolve()


def check_options(args) -> None:
    """Every option checked before anything heavy loads: UsageError (exit 2) naming the option and the fix."""
    from contract.errors import UsageError
    from measure.kit import PROBE_TIMEOUT_S

    if args.probe_timeout_s is None:  # the default gives way to a shorter budget; one asked for does not
        args.probe_timeout_s = min(PROBE_TIMEOUT_S, args.budget_s)
    if args.probe_timeout_s > args.budget_s:
        raise UsageError(
            f"--probe-timeout-s {args.probe_timeout_s:g} is longer than --budget-s {args.budget_s:g} "
            "(fix: give a probe timeout within the budget)"
        )
    if args.models:
        from profiles.catalog import CATALOGUE, TINY

        names = [a.name for a in (*CATALOGUE, TINY)]
        unknown = [m for m in args.models if not any(m.lower() in n.lower() for n in names)]
        if unknown:
            raise UsageError(
                f"--models {' '.join(unknown)}: no catalogue architecture has that in its name (fix: one of "
                f"{', '.join(n.rpartition('/')[2] for n in names)})"
            )
    args.out_dir = writable_folder("--out-dir", args.out_dir or default_out_dir())
    if args.work_dir is not None:
        args.work_dir = writable_folder("--work-dir", args.work_dir)
        if args.work_dir == args.out_dir:
            raise UsageError(
                f"--work-dir {args.work_dir} is --out-dir too (fix: give the probes' folders a place of their own)"
            )


def run_probe_child(attempt_dir: str) -> int:
    """The kit's child: one probe-only attempt of the profile in `attempt_dir`, measured after its probe."""
    from commands.attempt import attempt_estimate, model_to_load
    from contract.attempt import PROFILE_FILE
    from measure.cases import GPU_TIMED_LENGTHS
    from measure.child import probe_child
    from profiles.load import load_profile

    folder = Path(attempt_dir)
    profile = load_profile(folder / PROFILE_FILE)
    return probe_child(folder, profile, model_to_load, attempt_estimate(profile), GPU_TIMED_LENGTHS)


def run(args) -> int:
    if args.probe_child:
        return run_probe_child(args.probe_child)
    check_options(args)
    from measure.kit import KitOptions, run_kit

    code, _report = run_kit(
        KitOptions(
            out_dir=args.out_dir,
            budget_s=args.budget_s,
            probe_timeout_s=args.probe_timeout_s,
            models=args.models,
            work_dir=args.work_dir,
            fresh=args.fresh,
            probe_command=[sys.executable, str(REPO / "train.py"), "gpu-check", "--probe-child"],
        )
    )
    return code
