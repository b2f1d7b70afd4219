"""`profiles`: the shipped ladder and what a profile may say. `list` the rungs, `show NAME` one of them,
`copy NAME DEST` a rung to edit for your card (in Docker: into a mounted folder, no `docker cp`), `check FILE...`
validate profiles as a run would (and say how TRL / open-r1 key names were read), `keys` every profile key with
its type, default and range, `aliases` the table of TRL's and open-r1's names."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

from commands import options
from contract.errors import EXIT_BAD_INPUT, EXIT_OK, UsageError

SUMMARY = "list, show, copy and check profiles; every profile key (`profiles keys`)"
EXAMPLES = (
    "python train.py profiles list",
    "python train.py profiles copy gpu-24gb-llama3.1-8b my-card.yaml",
    "python train.py profiles check my-card.yaml",
    "python train.py profiles keys",
)


def _add_profiles_dir(parser, default) -> None:
    parser.add_argument(
        "--profiles-dir",
        metavar="DIR",
        type=options.folder_path,
        default=default,
        help="the folder of profiles to list, show and copy from (default: the shipped profiles/)",
    )


def add_arguments(parser) -> None:
    _add_profiles_dir(parser, str(options.DEFAULT_PROFILES_DIR))
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="every profile of the folder, in ladder order")
    options.add_json(listing, "the profiles")
    show = actions.add_parser("show", help="one profile's YAML as written")
    show.add_argument("name", metavar="NAME", help="a profile's name (its file's stem) or a YAML path")
    for action in (listing, show):  # before or after the action alike (`profiles list --profiles-dir X`)
        _add_profiles_dir(action, argparse.SUPPRESS)
    copy = actions.add_parser("copy", help="copy a profile to edit it (a file path, or a folder to put it in)")
    copy.add_argument("name", metavar="NAME", help="a profile's name or a YAML path")
    copy.add_argument("dest", metavar="DEST", help="the new file, or an existing folder")
    copy.add_argument("--force", action="store_true", help="replace DEST if it exists")
    _add_profiles_dir(copy, argparse.SUPPRESS)
    check = actions.add_parser("check", help="validate profile files as a run would (exit 2 at the first bad one)")
    check.add_argument("files", metavar="FILE", nargs="+")
    options.add_set(check)
    options.add_json(check, "each file's verdict")
    actions.add_parser("aliases", help="how TRL's and open-r1's key names are read (the table, as Markdown)")
    keys = actions.add_parser("keys", help="every profile key: type, default, range and meaning")
    keys.add_argument("--markdown", action="store_true", help="as the Markdown table of docs/profile-keys.md")


def run(args) -> int:
    return {"list": _list, "show": _show, "copy": _copy, "check": _check, "keys": _keys, "aliases": _aliases}[
        args.action
    ](args)


def find(name: str, folder: str | Path) -> Path:
    """A profile file by path, or by name (file stem) in the folder; UsageError naming the known ones."""
    path = Path(name).expanduser()
    if path.suffix in (".yaml", ".yml") and path.is_file():
        return path
    folder = Path(folder)
    for candidate in (folder / f"{name}.yaml", folder / f"{name}.yml"):
        if candidate.is_file():
            return candidate
    known = sorted(p.stem for p in folder.glob("*.yaml") if not p.name.startswith("."))
    from profiles.keys import suggest

    hint = suggest(name, known)
    raise UsageError(
        f"no profile {name!r} in {folder} ({hint + '; ' if hint else ''}known: {', '.join(known)}) "
        "(fix: `python train.py profiles list`)"
    )


def _list(args) -> int:
    import json

    from profiles.load import load_profiles

    rows: list[dict[str, Any]] = [
        {
            "name": p.name,
            "ladder": p.ladder,
            "model": p.model,
            "device": p.device,
            "gpus": p.gpus_needed,
            "file": Path(p.source).name,
            "description": p.description,
        }
        for p in load_profiles(args.profiles_dir)
    ]
    if args.json:
        print(json.dumps({"folder": str(args.profiles_dir), "profiles": rows}, indent=2))
        return EXIT_OK
    from rich.table import Table

    from commands.console import make_console

    table = Table(title=f"profiles in {args.profiles_dir} (lower rung = tried first)")
    for column in ("rung", "name", "model", "device", "GPUs", "for"):
        table.add_column(column, overflow="fold")
    for r in rows:
        table.add_row(str(r["ladder"]), r["name"], r["model"], r["device"], str(r["gpus"]), r["description"])
    make_console().print(table)
    return EXIT_OK


def _show(args) -> int:
    sys.stdout.write(find(args.name, args.profiles_dir).read_text(encoding="utf-8"))
    return EXIT_OK


def _copy(args) -> int:
    source = find(args.name, args.profiles_dir)
    dest = Path(args.dest).expanduser()
    if dest.is_dir():
        dest = dest / source.name
    if dest.exists() and not args.force:
        raise UsageError(f"profiles copy: {dest} exists (fix: another name, or --force to replace it)")
    if not dest.parent.is_dir():
        raise UsageError(f"profiles copy: {dest.parent} is not a folder (fix: create it first)")
    text = source.read_text(encoding="utf-8")
    schema = Path(__file__).resolve().parents[1] / "profiles" / "schema.json"
    # the copy points editors at the schema wherever it now lives
    text = text.replace(
        "# yaml-language-server: $schema=schema.json", f"# yaml-language-server: $schema={schema.as_uri()}"
    )
    if dest.stem != source.stem:
        # the copy is a profile of its own: its source's name would clash with the source in one ladder
        from profiles.keys import safe_name

        text = re.sub(r"(?m)^name:.*$", f"name: {safe_name(dest.stem)}", text)
    try:
        dest.write_text(text, encoding="utf-8")
    except OSError as exc:
        from contract.failure import write_failure_text

        raise UsageError(f"profiles copy: {write_failure_text(exc, dest.parent, option='destination')}") from None
    from contract.shell import command_line

    print(
        f"copied {source.name} to {dest}; edit it, then "
        f"`{command_line('python', 'train.py', 'profiles', 'check', dest)}` and "
        f"`{command_line('python', 'train.py', 'train', '--profile', dest)}`"
    )
    return EXIT_OK


def _check(args) -> int:
    import json

    from contract.errors import ProfileError
    from profiles.aliases import RecipeProblems, problems_of
    from profiles.keys import shown
    from profiles.load import load_profile
    from profiles.recipe_reading import DIFFERS, TRL_DEFAULT, WRITTEN_KINDS
    from profiles.rules import tracker_refusal
    from profiles.schema import LOSS_KEYS

    verdicts, code = [], EXIT_OK
    for name in args.files:
        try:
            profile = load_profile(name, args.overrides)
        except ProfileError as exc:
            found = problems_of(exc)
            tracker = _tracker_problem(name, exc)  # every problem in one pass: the tracker's too
            if tracker and all(p.key != "report_to" for p in found):
                reason, _, fix = tracker.removesuffix(")").partition(" (fix: ")
                exc = RecipeProblems(exc.source, [*found, ProfileError(exc.source, "report_to", reason, fix)])
            problems = [{"key": p.key, "reason": p.reason, "fix": p.fix} for p in problems_of(exc)]
            verdicts.append({"file": name, "ok": False, "error": str(exc), "problems": problems})
            code = EXIT_BAD_INPUT
            continue
        except UsageError as exc:
            verdicts.append({"file": name, "ok": False, "error": str(exc)})
            code = EXIT_BAD_INPUT
            continue
        refusal = tracker_refusal([profile])  # `train` refuses it too, before its run folder exists
        if refusal:
            verdicts.append({"file": name, "ok": False, "error": refusal})
            code = EXIT_BAD_INPUT
            continue
        readings = [reading.to_json() for reading in profile.readings if reading.kind in WRITTEN_KINDS]
        verdicts.append(
            {
                "file": name,
                "ok": True,
                "name": profile.name,
                "model": profile.model,
                "device": profile.device,
                "ladder": profile.ladder,
                "spelling": "TRL / open-r1 names" if readings else "grpo-train",
                "read": readings,
                "trl_defaults": [r.to_json() for r in profile.readings if r.kind == TRL_DEFAULT],
                "differs_from_trl": [r.to_json() for r in profile.readings if r.kind == DIFFERS],
                "loss": {key: getattr(profile, key) for key in LOSS_KEYS},
            }
        )
    if args.json:
        print(json.dumps({"files": verdicts}, indent=2))
        return code
    for v in verdicts:
        if v["ok"]:
            print(f"ok: {v['file']}: profile '{v['name']}' ({v['model']} on {v['device']}, rung {v['ladder']})")
            if v["read"]:
                print(f"  read as a TRL / open-r1 configuration ({len(v['read'])} of its keys in their names):")
                for reading in v["read"]:
                    print("    " + _reading_text(reading))
            if v["trl_defaults"]:
                print("  left out, so read as TRL's defaults (what TRL would train):")
                for reading in v["trl_defaults"]:
                    ours = "" if reading["as"] == reading["key"] else f", as {reading['as']} {shown(reading['value'])}"
                    print(f"    {reading['key']}: {shown(reading['trl'])}{ours} ({reading['note']})")
            if v["differs_from_trl"]:
                print("  left out, and not what TRL would run (the project's value runs; write the key to choose):")
                for reading in v["differs_from_trl"]:
                    print(
                        f"    {reading['key']}: {shown(reading['value'])} here, TRL {shown(reading['trl'])} "
                        f"({reading['note']})"
                    )
        else:
            print(f"error: {v['error']}", file=sys.stderr)
    return code


def _tracker_problem(name: str, error) -> str | None:
    """Why the report_to of a file that did not load cannot start here (None when it can, or is unreadable):
    read from the keys that did read, else from the file's own mapping."""
    from types import SimpleNamespace

    from contract.errors import ProfileError
    from profiles.load import read_profile_data
    from profiles.rules import missing_tracker

    data = getattr(error, "partial", None)
    if not data:
        try:
            data = read_profile_data(name)
        except (ProfileError, UsageError, OSError):
            return None
    tracker = data.get("report_to")
    return missing_tracker(SimpleNamespace(report_to=tracker)) if isinstance(tracker, str) else None


# The GRPO loss keys `check` states for each file (what the recipe will train with)


def _reading_text(reading: dict) -> str:
    from profiles.aliases import RENAMED
    from profiles.keys import shown

    if reading["kind"] == RENAMED:
        note = f" ({reading['note']})" if reading["note"] else ""
        value = reading["value"]
        return f"{reading['key']} -> {reading['as']}: {value if isinstance(value, dict) else shown(value)}{note}"
    return f"{reading['key']}: not used: {reading['note']}"


def _aliases(args) -> int:
    from profiles.aliases import aliases_markdown

    sys.stdout.write(aliases_markdown())
    return EXIT_OK


def _keys(args) -> int:
    from profiles.help import keys_markdown, schema_help

    sys.stdout.write(keys_markdown() if args.markdown else schema_help() + "\n")
    return EXIT_OK
