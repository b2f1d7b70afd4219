"""`refit`: what a gpu-check table says the models' constants should be. Refits the step-time model's
constants to the waves and steps the card timed, holds the estimator's terms against the memory it read, and
prints the errors before and after on the table and on the published step times. Nothing is written: adopt a
figure by editing launcher/plan/speed.py or launcher/memory/parts.py, with the table as its evidence."""

from __future__ import annotations

import json
from pathlib import Path

SUMMARY = "refit the step-time model and the estimator's terms to a gpu-check table; errors before and after"
EXAMPLES = (
    "python train.py refit benchmarks/gpu/nvidia-h100-80gb-hbm3.json",
    "python train.py refit TABLE.json --path unsloth --constants KERNEL_LAUNCH_S",
)


def add_arguments(parser) -> None:
    parser.add_argument("table", type=Path, help="a <card>.json that gpu-check wrote")
    parser.add_argument(
        "--constants",
        nargs="+",
        metavar="NAME",
        help="fit only these (default: every fitted constant of launcher/plan/speed.py)",
    )
    parser.add_argument(
        "--path",
        choices=("unsloth", "trl+peft", "all"),
        default="all",
        help="fit the waves and steps of this trainer path only (default all)",
    )
    parser.add_argument("--json", action="store_true", help="print the whole result as JSON")


def _errors(summary) -> str:
    if not summary:
        return "-"
    return (
        f"median {summary['median_factor']:.2f}x off (signed {summary['median_ratio']:.2f}), rms "
        f"{summary['rms_factor']:.2f}x, worst {summary['worst_factor']:.2f}x, n={summary['n']}"
    )


def run(args) -> int:
    from contract.errors import UsageError
    from measure.cases import PLAIN, UNSLOTH
    from measure.refit import TableError, refit

    paths = (UNSLOTH, PLAIN) if args.path == "all" else (args.path,)
    try:
        result = refit(args.table, tuple(args.constants) if args.constants else None, paths)
    except TableError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"refit on {result['table']} ({result['card']}): {result['entries']} timed waves and steps")
    for item in result["left_out"]:
        print(f"  left out: {item['case']} {item['kind']} at {item['tokens']} tokens: {item['why']}")
    print("constants (before -> after):")
    for name, pair in result["constants"].items():
        mark = (
            ""
            if name in result["fitted"]
            else "  (kept: no timed wave or step here depends on it)"
            if name in result["unconstrained"]
            else "  (kept)"
        )
        print(f"  {name:28} {pair['before']:.6g} -> {pair['after']:.6g}{mark}")
    print("errors on the table, predicted / measured (before -> after):")
    for key in result["table_errors"]["before"]:
        print(f"  {key:22} {_errors(result['table_errors']['before'][key])}")
        print(f"  {'':22} {_errors(result['table_errors']['after'][key])}")
    published = result["published_errors"]
    if published["before"]:
        print("errors on the published step times (before -> after):")
        for key in ("all", "clean"):
            print(f"  {key:22} {_errors(published['before'][key])}")
            print(f"  {'':22} {_errors(published['after'][key])}")
    if result["memory"]:
        print("memory, measured / estimated by component (median over the probes):")
        for term in result["memory"]:
            note = f"  ({term['note']})" if term["note"] else ""
            print(
                f"  {term['path']:9} {term['component']:11} x{term['median_measured_over_estimate']:.2f} "
                f"(range {term['range'][0]:.2f}-{term['range'][1]:.2f}, {term['probes']} probes; "
                f"{' + '.join(term['terms'])}){note}"
            )
    for note in result["notes"]:
        print(f"note: {note}")
    return 0
