"""The commands of `python train.py <command>` (also `grpo-train <command>`, `docker run grpo-train <command>`):
one module per command; each adds its own options, calls the domain, prints, and returns its exit status. The
domain is imported inside each command's `run`, so that planning never loads torch.

A module is a command by having SUMMARY, EXAMPLES, `add_arguments(parser)` and `run(args) -> int`; HIDDEN
ones (the supervisor's per-attempt command) stay out of the help. The flags of the single-command interface
are translated to one command each by commands.legacy."""

from __future__ import annotations

import argparse
import importlib
import sys

# name -> module, in the order the help lists them
COMMANDS = {
    "train": "commands.train",
    "serve": "commands.serve",
    "plan": "commands.plan",
    "cards": "commands.cards",
    "fit": "commands.fit",
    "calibrate": "commands.calibrate",
    "ledger": "commands.ledger",
    "explain-oom": "commands.explain_oom",
    "sample": "commands.sample",
    "export": "commands.export",
    "profiles": "commands.profiles",
    "gpu-check": "commands.gpu_check",
    "refit": "commands.refit",
    "attempt": "commands.attempt",
}
PROG = "train.py"


def module_of(name: str):
    return importlib.import_module(COMMANDS[name])


def top_help() -> str:
    """One screen: what the tool is, its commands, a few examples, the exit statuses."""
    lines = [
        f"usage: python {PROG} <command> [options]   (also: grpo-train <command>, "
        "docker run --gpus all grpo-train <command>)",
        "",
        "GRPO fine-tuning (Unsloth + vLLM + TRL) that plans the configuration that learns most per hour on",
        "your GPU, trains it, and falls back instead of crashing on CUDA out-of-memory.",
        "",
        "commands:",
    ]
    for name in COMMANDS:
        module = module_of(name)
        if getattr(module, "HIDDEN", False):
            continue
        lines.append(f"  {name:<12} {module.SUMMARY}")
    lines += [
        "",
        "examples:",
        f"  python {PROG} plan                          what would run on this machine (instant, no torch)",
        f"  python {PROG} train                         plan, then train; options alone also mean train",
        f"  python {PROG} plan --gpu-memory 24          what a 24 GiB card would run",
        f"  python {PROG} fit Qwen/Qwen2.5-7B-Instruct  the best profile of any model for this card",
        f"  python {PROG} export outputs/latest --gguf q8_0   merged 16-bit model and a GGUF file",
        "",
        "exit status: 0 done, 2 bad input, 3 nothing fits or every attempt ran out of memory, 130 stopped, 1 other",
        f"`python {PROG} COMMAND --help` shows a command's options; `python {PROG} profiles keys` every",
        "profile key. The old flags (--auto, --dry-run, --fit-table, ...) still work: docs/interfaces.md.",
    ]
    return "\n".join(lines) + "\n"


def parser_for(name: str) -> argparse.ArgumentParser:
    module = module_of(name)
    examples = getattr(module, "EXAMPLES", ())
    parser = argparse.ArgumentParser(
        prog=f"{PROG} {name}",
        description=(module.__doc__ or "").strip().split("\n\n")[0],
        epilog=("examples:\n" + "\n".join(f"  {e}" for e in examples)) if examples else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    module.add_arguments(parser)
    return parser


def command_first(argv: list[str]) -> list[str]:
    """`--json plan` as `plan --json`: a command named after options (not as an option's value) moves to the
    front; a command line without one is returned as it is (the old flags, commands.legacy)."""
    from commands.legacy import TABLE

    index = 0
    while index < len(argv):
        token = argv[index]
        if token in COMMANDS:
            return [token, *argv[:index], *argv[index + 1 :]]
        flag, eq, _ = token.partition("=")
        old = TABLE.get(flag)
        index += 2 if old is not None and old.takes_value and not eq else 1
    return argv


def _drop_stdout() -> None:
    """Send what is left for stdout to /dev/null, so that the flush at exit does not fail again."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def main(argv: list[str] | None = None) -> int:
    """Run one command line; its exit status."""
    from contract.errors import EXIT_BAD_INPUT, EXIT_INTERRUPTED, UsageError

    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if not argv:
            sys.stderr.write(top_help())
            raise UsageError("give a command (e.g. `python train.py train`)")
        if argv[0] in ("-h", "--help", "help"):
            if len(argv) == 1:
                sys.stdout.write(top_help())
                return 0
            if argv[1] in COMMANDS:  # `help plan`, `-h plan`: that command's help
                argv = [argv[1], "--help"]
        if argv[0] not in COMMANDS and argv[0].startswith("-"):
            argv = command_first(argv)
        if argv[0] not in COMMANDS:
            if not argv[0].startswith("-"):
                from profiles.keys import suggest

                hint = suggest(argv[0], [c for c in COMMANDS if c != "attempt"])
                raise UsageError(
                    f"{argv[0]!r} is not a command{f' ({hint})' if hint else ''} (fix: `python "
                    f"{PROG} --help` lists the commands)"
                )
            from commands.legacy import translate

            argv = translate(argv)
        name, rest = argv[0], argv[1:]
        try:
            args = parser_for(name).parse_args(rest)
        except SystemExit as exc:  # argparse has printed its message (or the help)
            return int(exc.code or 0)
        code = module_of(name).run(args)
        sys.stdout.flush()  # here, where a reader that went away can be told from a failure
        return code
    except BrokenPipeError:
        # the reader stopped early (`ledger --json | head -3`): what it read is what it wanted
        _drop_stdout()
        return 0
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:  # Ctrl-C before the run's own handlers are in place: nothing to save yet
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
