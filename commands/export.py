"""`export RUN_OR_ATTEMPT`: the trained adapter as a model others can run, as Unsloth's notebooks end. A merged
16-bit model (on CPU and GPU alike; a 4-bit run merged into its 16-bit base, which is downloaded), and with
`--gguf TYPE` one GGUF file through llama.cpp's converter where it is present. Writes into ATTEMPT/export/ (or
--out DIR): merged/, <profile>-<TYPE>.gguf and export.json, the record of what was done. `--best` exports the model
of the best held-out evaluation during training (best-adapter/) instead, into ATTEMPT/export-best/."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from commands import options
from contract.errors import EXIT_FAILURE, EXIT_OK, UsageError

SUMMARY = "the trained model merged at 16 bits, and as GGUF through llama.cpp where present"
EXAMPLES = (
    "python train.py export outputs/latest",
    "python train.py export outputs/latest --gguf q8_0",
    "python train.py export outputs/latest --best",
    "python train.py export outputs/run-.../attempt-02-cpu-tiny-4gen --out my-model --check 5",
)
EXPORT_DIR = "export"
EXPORT_BEST_DIR = "export-best"  # --best: beside the final model's export, never over it


def add_arguments(parser) -> None:
    from trainer.export import GGUF_TYPES

    parser.add_argument(
        "run_dir",
        metavar="RUN_OR_ATTEMPT",
        help="a run folder (its final attempt), outputs/latest, an attempt folder or RUN/final",
    )
    parser.add_argument(
        "--out",
        metavar="DIR",
        help=f"where to write (default: the attempt's {EXPORT_DIR}/ folder, {EXPORT_BEST_DIR}/ with --best)",
    )
    from commands.sample import add_best

    add_best(parser)
    parser.add_argument(
        "--dtype",
        choices=("auto", "float16", "bfloat16"),
        default="auto",
        help="the merged model's 16-bit type (auto: the base's own where it is 16-bit, else float16)",
    )
    parser.add_argument(
        "--gguf",
        metavar="TYPE",
        choices=GGUF_TYPES,
        type=str.lower,
        help=f"also one GGUF file of this type ({', '.join(GGUF_TYPES)}) through llama.cpp's converter",
    )
    parser.add_argument(
        "--gguf-pre-tokenizer",
        metavar="NAME",
        default="",
        help="for a tokenizer llama.cpp does not recognise (a model's own new one, such as the tiny "
        "model's), write this pre-tokenizer into the GGUF (e.g. default)",
    )
    parser.add_argument(
        "--check",
        metavar="N",
        type=int,
        default=0,
        help="answer the first N test questions with the adapter and with the merged model "
        "loaded back by transformers, side by side",
    )
    options.add_set(parser)
    options.add_json(parser, "the export record")


def run(args) -> int:
    import signal

    from contract.errors import EXIT_INTERRUPTED

    # SIGTERM (docker stop, a scheduler) stops the export as Ctrl-C does: said, exit 130, nothing half-written
    def stop(signum, frame):
        raise KeyboardInterrupt

    before = signal.signal(signal.SIGTERM, stop)
    try:
        return _export(args)
    except KeyboardInterrupt:
        print(
            "export interrupted: nothing is left half-written (merged/ is moved into place only whole)",
            file=sys.stderr,
            flush=True,
        )
        return EXIT_INTERRUPTED
    finally:
        signal.signal(signal.SIGTERM, before)


def _export(args) -> int:
    from commands.sample import best_of, find_target, profile_of
    from contract import attempt as contract
    from contract.failure import DISK_FULL, TOO_LARGE, write_failure_text, write_problem
    from launcher.run.folder import check_output_dir
    from trainer.export import HOW_TO_GET, find_converter, quantizer_for

    if args.check < 0:
        raise UsageError(f"--check {args.check}: give a number of questions >= 0")
    target = find_target(args.run_dir)
    if args.best:
        target = best_of(target, lambda text: print(text, file=sys.stderr, flush=True))
    profile = profile_of(target, args.overrides).profile  # exporting scores nothing: no reward code runs
    converter = None
    if args.gguf:  # before the heavy work: say plainly where it is not, and how to get it
        converter, where = find_converter()
        if converter is None:
            raise UsageError(
                f"--gguf: llama.cpp's convert_hf_to_gguf.py is not on this machine (looked in: "
                f"{where}) (fix: {HOW_TO_GET}; or export without --gguf for the merged model)"
            )
        quantizer_for(args.gguf, converter)  # llama-quantize, where the type needs it
    kept = target.adapter_dir.name == contract.BEST_ADAPTER_DIR
    out = Path(args.out).expanduser() if args.out else target.attempt_dir / (EXPORT_BEST_DIR if kept else EXPORT_DIR)
    check_output_dir(out, option="--out" if args.out else "export into")  # before any model loads
    from tiny_model.source import base_model_path
    from trainer.export import ConversionError, compare_answers, merge, to_gguf, write_record

    def say(text: str) -> None:  # with --json, stdout holds the record alone
        print(text, file=sys.stderr if args.json else sys.stdout, flush=True)

    base = profile.model if not profile.uses_lora else base_model_path(profile, target.adapter_dir)
    say(f"exporting {target.adapter_dir} (profile '{profile.name}', base {base}) to {out}")
    from profiles.rules import remote_code_notice

    notice = remote_code_notice(profile)
    if notice:
        say(f"note: {notice}")
    record: dict[str, Any] = {
        "adapter": str(target.adapter_dir),
        "attempt": str(target.attempt_dir),
        "profile": profile.name,
    }
    outcome = contract.Outcome.read(target.attempt_dir / contract.OUTCOME_FILE)
    if outcome is not None:
        record["attempt_status"] = {"status": outcome.status, "steps": outcome.steps}
        if outcome.status != contract.OK:
            say(
                f"note: {target.attempt_dir.name} ended {outcome.status} after {outcome.steps} steps: this is "
                "its adapter as saved then, not a finished run's"
            )
    try:
        record["merged"] = merge(profile, target.adapter_dir, base, out / "merged", args.dtype, say)
    except Exception as exc:  # the disk refused (safetensors' writer raises its own error type, not OSError)
        if not write_problem(exc, out):
            raise
        print(
            f"error: {write_failure_text(exc, out, option='--out')}; no merged/ was left half-written", file=sys.stderr
        )
        return EXIT_FAILURE
    merged = record["merged"]
    say(
        f"merged: {merged['folder']} ({merged['dtype']}, {merged['parameters']:,} parameters, "
        f"{merged['bytes'] / 2**20:.1f} MiB, on {merged['device']})"
    )
    if converter is not None:
        try:
            record["gguf"] = to_gguf(
                out / "merged",
                out / f"{profile.name}-{args.gguf.upper()}.gguf",
                args.gguf,
                converter,
                say,
                args.gguf_pre_tokenizer,
            )
        except ConversionError as exc:
            write_record(out, record)  # the merged model stands; the record says so
            if write_problem(exc, out) in (DISK_FULL, TOO_LARGE):  # the disk refused the GGUF file
                print(
                    f"error: {write_failure_text(exc, out, option='--out')}; no GGUF file was kept (the merged model "
                    f"is in {record['merged']['folder']})",
                    file=sys.stderr,
                )
            else:
                print(f"error: {exc}\n(the merged model is in {record['merged']['folder']})", file=sys.stderr)
            return EXIT_FAILURE
        gguf = record["gguf"]
        for note in gguf["notes"]:
            say(note)
        if gguf.get("read_back_error"):
            write_record(out, record)
            print(
                f"error: {gguf['file']} was written but cannot be read back by the gguf package "
                f"({gguf['read_back_error']}); do not use it (fix: update llama.cpp's converter and its "
                "gguf-py, then export again)",
                file=sys.stderr,
            )
            return EXIT_FAILURE
        header = gguf["header"]
        say(
            f"gguf: {gguf['file']} ({gguf['bytes'] / 2**20:.1f} MiB)"
            + (
                f"; read back: {header['architecture']}, {header['tensors']} tensors of "
                f"{', '.join(header['tensor_types'])}"
                if header
                else "; the gguf package is not installed here to read it back (pip install gguf)"
            )
        )
    if args.check:
        from trainer.sample import rows_to_answer

        rows = rows_to_answer(profile, None, args.check)
        record["check"] = compare_answers(profile, target.adapter_dir, base, out / "merged", rows)
        check = record["check"]
        say(f"the merged model answers as the adapter did on {check['same']} of {check['total']} questions")
    write_record(out, record)
    if args.json:
        print(json.dumps(record, indent=2))
    else:
        say(f"record: {out / 'export.json'}")
    return EXIT_OK
