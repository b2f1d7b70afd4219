"""The flags of the single-command interface, each translated to one command: `python train.py --auto` is
`python train.py train`, `--dry-run` is `plan`, `--fit-table` is `cards`, and so on. Old spellings keep working
with the same exit codes; a spelling whose flags ask for two different commands exits 2 naming both.

TABLE is the translation, as data: old flag -> (the command it asks for, or None when it only modifies one;
its spelling in the command, or None when the command itself says it; whether it takes a value)."""

from __future__ import annotations

from dataclasses import dataclass

from contract.errors import UsageError

POSITIONAL = "<positional>"  # the flag's value becomes the command's positional argument


@dataclass(frozen=True)
class OldFlag:
    command: str | None  # the command this flag asks for; None: an option of whichever command runs
    spelling: str | None  # the option in the command (POSITIONAL: its argument; None: dropped)
    takes_value: bool = False
    only_with: str | None = None  # an option of this command alone: with another, exit 2 (it would be ignored)


TABLE: dict[str, OldFlag] = {
    # what to run
    "--auto": OldFlag("train", None),
    "--profile": OldFlag(None, "--profile", True),
    "--resume": OldFlag("train", "--resume"),
    "--fresh-attempt": OldFlag("train", "--fresh-attempt"),
    "--dry-run": OldFlag("plan", None),
    "--fit-table": OldFlag("cards", None),
    "--fit": OldFlag("fit", None),
    "--calibrate": OldFlag("calibrate", None),
    "--random-weights": OldFlag(None, "--random-weights", only_with="calibrate"),
    "--ledger": OldFlag("ledger", None),
    "--forget": OldFlag("ledger", "--forget", True),
    "--explain-oom": OldFlag("explain-oom", POSITIONAL, True),
    "--sample": OldFlag("sample", POSITIONAL, True),
    "--prompt": OldFlag(None, "--prompt", True, only_with="sample"),
    "--from-test": OldFlag(None, "--from-test", True, only_with="sample"),
    "--run-rewards": OldFlag(None, "--run-rewards", only_with="sample"),
    "--attempt-dir": OldFlag("attempt", "--attempt-dir", True),
    "--resume-from": OldFlag(None, "--resume-from", True, only_with="attempt"),
    # options several commands share
    "--set": OldFlag(None, "--set", True),
    "--profiles-dir": OldFlag(None, "--profiles-dir", True),
    "--output-dir": OldFlag(None, "--output-dir", True),
    "--json": OldFlag(None, "--json"),
    "--gpu-memory": OldFlag(None, "--gpu-memory", True),
    "--gpu-name": OldFlag(None, "--gpu-name", True),
    "--gpus": OldFlag(None, "--gpus", True),
    "--ignore-ledger": OldFlag(None, "--ignore-ledger"),
    "--nodes": OldFlag(None, "--nodes", True, only_with="plan"),
    "--gpus-per-node": OldFlag(None, "--gpus-per-node", True, only_with="plan"),
    # newer than the old interface, taken before the command like the rest: `--hours 2` alone is `train --hours 2`
    "--hours": OldFlag(None, "--hours", True),
    "--help": OldFlag(None, "--help"),
    "-h": OldFlag(None, "--help"),
}

# Flags of one command that contradict each other (the old interface refused them; so does the translation).
CONTRADICTIONS = (("--auto", "--profile"), ("--resume", "--profile"))

# A flag that only modifies the command of another: `--dry-run` with `--calibrate` is `calibrate --dry-run`
# (alone, or with --auto / --profile / --resume, it is `plan`).
MODIFIES = {("--dry-run", "calibrate"): "--dry-run"}

# The run's own flags, which the old interface took beside --dry-run and did not use: the plan of that run
# is the plan (`--auto --dry-run --output-dir X`, `--resume --fresh-attempt --dry-run`). A plan writes nothing.
NOT_USED_BY = {"plan": ("--resume", "--fresh-attempt", "--output-dir")}


def _split(argv: list[str]) -> list[tuple[str, str | None]]:
    """The old command line as (flag, value) pairs, `--flag=value` and `--flag value` alike."""
    pairs: list[tuple[str, str | None]] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        flag, eq, inline = token.partition("=")
        if flag not in TABLE:
            from profiles.keys import suggest

            hint = suggest(flag, TABLE) if flag.startswith("-") else None
            what = "an unknown flag" if flag.startswith("-") else "not a command"
            raise UsageError(
                f"{token!r} is {what}{f' ({hint})' if hint else ''} (fix: `python train.py --help` lists the commands)"
            )
        old = TABLE[flag]
        if old.takes_value:
            if eq:
                value = inline
            elif i + 1 < len(argv):
                i += 1
                value = argv[i]
            else:
                raise UsageError(f"{flag} needs a value")
            pairs.append((flag, value))
        else:
            if eq:
                raise UsageError(f"{flag} takes no value")
            pairs.append((flag, None))
        i += 1
    return pairs


def translate(argv: list[str]) -> list[str]:
    """The command line of one command for an old spelling (a list of flags); UsageError (exit 2) when its
    flags ask for two different commands, naming both."""
    pairs = _split(argv)
    given = {flag for flag, _ in pairs}
    for first, second in CONTRADICTIONS:
        if first in given and second in given:
            raise UsageError(f"{first} and {second} ask for two different things; give one of them")
    asked: dict[str, str] = {}  # command -> the first flag that asked for it
    for flag, _ in pairs:
        command = TABLE[flag].command
        if command is not None:
            asked.setdefault(command, flag)
    commands = set(asked)
    if "calibrate" in commands and "plan" in commands and asked["plan"] == "--dry-run":
        commands.discard("plan")  # `--calibrate --dry-run`: calibrate's own dry run
    if "plan" in commands and "train" in commands:
        commands.discard("train")  # `--auto --dry-run`, `--resume --dry-run`: the plan of that run
    if not commands:
        commands = {"attempt"} if any(f == "--attempt-dir" for f, _ in pairs) else {"train"}
    if len(commands) > 1:
        first, second = [c for c in asked if c in commands][:2]  # in the order the flags came
        raise UsageError(
            f"{asked[first]} asks for `{first}` and {asked[second]} for "
            f"`{second}`: one command at a time (fix: `python train.py {first} ...` or "
            f"`python train.py {second} ...`)"
        )
    command = commands.pop()
    for flag, _ in pairs:
        home = TABLE[flag].only_with
        if home is not None and home != command:
            starter = next((f for f, old in TABLE.items() if old.command == home), home)
            raise UsageError(
                f"{flag} only applies to {starter} (the `{home}` command); this command line asks "
                f"for `{command}`, which would ignore it"
            )
    out = [command]
    positional = None
    models = []
    for flag, value in pairs:
        old = TABLE[flag]
        if flag in NOT_USED_BY.get(command, ()):
            continue
        spelling = MODIFIES.get((flag, command), old.spelling)
        if command == "fit" and flag == "--set" and value is not None and value.partition("=")[0].strip() == "model":
            models.append(value.partition("=")[2].strip())  # `--fit --set model=X`: `fit X`
            continue
        if spelling is None:
            continue
        if spelling == POSITIONAL:
            positional = value
            continue
        out.append(spelling)
        if value is not None:
            out.append(value)
    if command == "fit":
        if not models:
            raise UsageError(
                "--fit needs the model to fit (fix: `python train.py fit ORG/NAME`, or --fit --set model=ORG/NAME)"
            )
        positional = models[-1]
    if positional is not None:
        out.insert(1, positional)
    return out
