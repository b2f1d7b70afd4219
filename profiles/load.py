"""HOW a profile is read: YAML files (guarded against surprises), `--set` overrides, and the schema's refusals
turned into errors that name the file, the key and the fix. The keys themselves live in profiles.fields.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml

from contract.errors import ProfileError, UsageError
from profiles.aliases import RecipeProblems, alias_of, translate
from profiles.keys import DEFAULT_REWARDS, DEFAULT_TARGET_MODULES, VLLM_LORA_RANKS, KeyProblem, suggest
from profiles.recipe_reading import TRL_DEFAULT
from profiles.schema import AUTO, KEYS, Profile, profile_from_dict
from profiles.trl_defaults import differences

__all__ = [
    "DEFAULT_REWARDS",
    "DEFAULT_TARGET_MODULES",
    "KEYS",
    "MAX_PROFILE_BYTES",
    "VLLM_LORA_RANKS",
    "Profile",
    "load_profile",
    "load_profiles",
    "parse_overrides",
    "profile_from_dict",
    "read_profile_data",
    "set_keys",
]

# A profile is a few dozen lines; anything far larger is a wrong path, not a profile.
MAX_PROFILE_BYTES = 1 << 20

# ---------------------------------------------------------------------------------------------------
# YAML without its silent surprises: repeated keys (the last one wins), 010 read as octal 8, 1:30 as 90,
# yes/no/on/off read as booleans


class YamlSurprise(Exception):
    def __init__(self, reason: str, key: str | None = None, line: int | None = None):
        super().__init__(reason)
        self.reason, self.key, self.line = reason, key, line


def _int_surprise(text: str) -> str | None:
    digits = text.replace("_", "").lstrip("+-")
    if ":" in digits:
        return f"{text} is a YAML 1.1 base-60 number ({text} reads as minutes:seconds)"
    if re.fullmatch(r"0[0-9]+", digits):
        return f"{text} has a leading zero, which YAML 1.1 reads as an octal number"
    if len(digits) > 100:
        return f"a whole number of {len(digits)} digits"
    return None


def _bool_surprise(text: str) -> str | None:
    if text.lower() in ("true", "false"):
        return None
    return f"{text} is YAML 1.1's spelling of {'false' if text.lower() in ('no', 'n', 'off') else 'true'}"


_SURPRISES = {"tag:yaml.org,2002:int": _int_surprise, "tag:yaml.org,2002:bool": _bool_surprise}


# libyaml's parser where it is installed (several times faster); the checks below work on its nodes alike
try:
    from yaml import CSafeLoader as _BaseLoader
except ImportError:
    from yaml import SafeLoader as _BaseLoader


class _ProfileLoader(_BaseLoader):
    def construct_yaml_int(self, node):
        self._refuse_surprise(node)
        return super().construct_yaml_int(node)

    def construct_yaml_bool(self, node):
        self._refuse_surprise(node)
        return super().construct_yaml_bool(node)

    @staticmethod
    def _refuse_surprise(node, key: str | None = None) -> None:
        check = _SURPRISES.get(node.tag) if isinstance(node, yaml.ScalarNode) else None
        surprise = check(node.value) if check else None
        if surprise:
            raise YamlSurprise(surprise, key, node.start_mark.line + 1)

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *base` then a key of its own overrides on purpose
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            self._refuse_surprise(value_node, str(key))
            try:
                first = seen.get(key)
            except TypeError:
                continue  # an unhashable key; the mapping constructor refuses it with its own message
            if first is not None:
                raise YamlSurprise(
                    f"'{key}' is given more than once (lines {first} and {line}); YAML would keep "
                    "only the last, silently",
                    str(key),
                )
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


_ProfileLoader.add_constructor("tag:yaml.org,2002:int", _ProfileLoader.construct_yaml_int)
_ProfileLoader.add_constructor("tag:yaml.org,2002:bool", _ProfileLoader.construct_yaml_bool)


def _surprise_fix(surprise: YamlSurprise) -> str:
    if "aliases expanded" in surprise.reason or "refers to a value that holds it" in surprise.reason:
        return "write the values out without aliases (&name / *name)"
    if "nested more than" in surprise.reason:
        return "a profile's values are flat, or one mapping deep (rewards: {accuracy: 2.0})"
    if "more than once" in surprise.reason:
        return "keep one of them"
    if "spelling of" in surprise.reason:
        return "write true or false, or quote it if it is text"
    return "write the number in plain decimal digits, or quote it if it is text"


# A profile nests two levels (rewards: {name: weight}) and holds a few dozen values. Aliases may repeat a
# value, and nine levels of them (the "billion laughs") expand 1 KB of text into billions of values, each level
# nesting deeper: both are refused from the parser's events, before any value is built.
MAX_YAML_DEPTH = 32
MAX_YAML_VALUES = 10_000
MAX_YAML_CHARS = 4 * MAX_PROFILE_BYTES


def check_yaml_size(text: str) -> None:
    """YamlSurprise when the document, with its aliases expanded, would nest deeper than MAX_YAML_DEPTH or hold
    more than MAX_YAML_VALUES values or MAX_YAML_CHARS characters of text; costs one pass of the parser (no
    recursion, nothing expanded)."""
    sizes: dict[str, tuple[int, int]] = {}  # anchor -> (values, characters) it expands to
    open_counts: list[list] = []  # per open collection: [values, characters, anchor]
    values = chars = 0
    for event in yaml.parse(text, Loader=_BaseLoader):
        line = event.start_mark.line + 1 if event.start_mark else None
        if isinstance(event, yaml.CollectionStartEvent):
            if len(open_counts) >= MAX_YAML_DEPTH:
                raise YamlSurprise(f"values nested more than {MAX_YAML_DEPTH} levels deep (line {line})")
            open_counts.append([1, 0, event.anchor])
            added = (1, 0)
        elif isinstance(event, yaml.CollectionEndEvent):
            done = open_counts.pop()
            if done[2]:
                sizes[done[2]] = (done[0], done[1])
            if open_counts:
                open_counts[-1][0] += done[0]
                open_counts[-1][1] += done[1]
            continue
        elif isinstance(event, yaml.ScalarEvent):
            added = (1, len(event.value))
            if event.anchor:
                sizes[event.anchor] = added
        elif isinstance(event, yaml.AliasEvent):
            if any(entry[2] == event.anchor for entry in open_counts):
                raise YamlSurprise(f"alias *{event.anchor} refers to a value that holds it (line {line})")
            added = sizes.get(event.anchor, (1, 0))
        else:
            continue
        values += added[0]
        chars += added[1]
        if open_counts and added is not None and not isinstance(event, yaml.CollectionStartEvent):
            open_counts[-1][0] += added[0]
            open_counts[-1][1] += added[1]
        if values > MAX_YAML_VALUES:
            raise YamlSurprise(
                f"with its aliases expanded the YAML holds more than {MAX_YAML_VALUES} values "
                f"(line {line}); a profile holds a few dozen"
            )
        if chars > MAX_YAML_CHARS:
            raise YamlSurprise(
                f"with its aliases expanded the YAML holds more than {MAX_YAML_CHARS >> 20} MiB of text (line {line})"
            )


def read_yaml(text: str, source: str) -> Any:
    """YAML through the guarded loader (safe_load's classes); errors name the source and where."""
    try:
        check_yaml_size(text)
        return yaml.load(text, Loader=_ProfileLoader)  # noqa: S506 - a SafeLoader subclass
    except YamlSurprise as exc:
        where = f" (line {exc.line})" if exc.line else ""
        raise ProfileError(source, exc.key, exc.reason + where, _surprise_fix(exc)) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
        raise ProfileError(source, None, f"YAML syntax error at {where}: {exc.problem or exc}") from None
    except yaml.YAMLError as exc:
        raise ProfileError(source, None, f"YAML error: {exc}") from None


def _read_text(path: Path) -> str:
    """The file's text; refuses at once what is not a small regular file (a device or fifo never blocks)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise UsageError(
            f"{path}: profile not found (fix: give an existing .yaml file, e.g. profiles/*.yaml)"
        ) from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read profile: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ProfileError(str(path), None, "not a regular file", "give a profile .yaml file")
        data = handle.read(MAX_PROFILE_BYTES + 1)
    if len(data) > MAX_PROFILE_BYTES:
        raise ProfileError(
            str(path),
            None,
            f"the file is larger than {MAX_PROFILE_BYTES // 1024} KiB; a profile is a few dozen lines",
            "give a profile .yaml file",
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProfileError(str(path), None, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None


# ---------------------------------------------------------------------------------------------------
# Files and overrides


def parse_overrides(pairs: list[str] | tuple[str, ...], context: dict | None = None) -> dict[str, Any]:
    """`--set KEY=VALUE` pairs into a dict; values are read as YAML (true, 2, 0.5, {accuracy: 2.0}). `context`:
    the mapping of the file they change, as written, for TRL's names that need another key (profiles.aliases).
    A null is refused where it would mean the schema's default rather than the profile's value."""
    out: dict[str, Any] = {}
    for pair in pairs or ():
        if "=" not in pair:
            raise UsageError(f"--set {pair!r}: expected KEY=VALUE (e.g. --set lora_rank=32)")
        key, _, raw = pair.partition("=")
        key = key.strip()
        if key not in KEYS and alias_of(key) is None:
            raise ProfileError(
                "--set", key, "unknown key", suggest(key, KEYS) or "run `python train.py --help` for the keys"
            )
        if not raw.strip():
            raise ProfileError(
                "--set",
                key,
                "empty value",
                f"give a value (--set {key}=VALUE), or leave the --set out to keep the profile's",
            )
        try:
            check_yaml_size(raw)
            out[key] = yaml.load(raw, Loader=_ProfileLoader)  # noqa: S506 - a SafeLoader subclass
        except YamlSurprise as exc:
            raise ProfileError("--set", key, exc.reason, _surprise_fix(exc)) from None
        except yaml.YAMLError:
            out[key] = raw  # text that is not YAML stays text
        if out[key] is None and raw.strip() not in ("null", "Null", "NULL", "~"):
            out[key] = raw  # YAML reads text led by '#' (a regex such as '#### (.+)') as a comment: nothing
    _refuse_empty_values(out, "--set", null_fix="give a value, or leave the --set out to keep the profile's")
    return translate(out, "--set", context)[0]  # TRL's and open-r1's names too (profiles.aliases)


def set_keys(pairs: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """The project's keys a list of `--set KEY=VALUE` names, with their values as written (TRL's names read as
    the key they rename; what needs the file's other keys to convert is not converted): what the planner asks
    of the --set before any file is read."""
    out: dict[str, Any] = {}
    for pair in pairs or ():
        key, _, raw = pair.partition("=")
        key = key.strip()
        alias = alias_of(key)
        ours = key if alias is None else alias.ours
        if ours is None:
            continue
        try:
            out[ours] = yaml.load(raw, Loader=_ProfileLoader)  # noqa: S506 - a SafeLoader subclass
        except (YamlSurprise, yaml.YAMLError):
            out[ours] = raw
    return out


def _refuse_empty_values(data: dict, source: str, null_fix: str | None = None) -> None:
    """`max_steps:` with nothing after it reads as null, which would silently mean the default (250): refused,
    except for text keys whose default is empty anyway (`hub_model_id:` means none) and keys whose default is
    off (`min_p:`). TRL's names (`lora_r:`) are judged by the key they set."""
    for key, value in data.items():
        key = str(key)
        alias = alias_of(key)
        ours = key if alias is None or alias.kind != "renamed" else alias.ours
        if value is not None or ours not in Profile.model_fields or ours in ("source", "readings"):
            continue
        if alias is not None and alias.convert is not None:
            try:  # a TRL name whose null means something of its own (no limit) says what
                alias.convert(None, data)
            except KeyProblem as problem:
                raise ProfileError(source, key, problem.reason, problem.fix) from None
            except Exception:  # noqa: BLE001 - a converter that reads no null: the plain refusal below
                pass
        default = Profile.model_fields[ours].get_default(call_default_factory=True)
        if default == "" or default is None:  # empty means none: `delta:` is off, as by default
            continue
        if null_fix is not None:
            raise ProfileError(
                source, key, f"null would mean the schema's default ({default!r}), not the profile's value", null_fix
            )
        fix = (
            'write system_prompt: "" for no system turn, or remove the line for the default'
            if key == "system_prompt"
            else f"give a value, or remove the line to keep the default ({default!r})"
        )
        raise ProfileError(source, key, "empty value", fix)


def read_profile_data(path: str | Path, readings: list | None = None, written: dict | None = None) -> dict:
    """A profile file's mapping in the project's names, checked as YAML (not yet against the schema);
    `written` receives the mapping as the file writes it (TRL's names kept), for a --set that needs it."""
    path = Path(path)
    data = read_yaml(_read_text(path), str(path))
    if data is None:  # no bytes, or only comments and blank lines
        raise ProfileError(
            str(path), None, "the file is empty", "write the profile's keys, e.g. copy one from profiles/ and edit it"
        )
    if not isinstance(data, dict):
        raise ProfileError(str(path), None, "a profile must be a mapping of keys to values")
    _refuse_empty_values(data, str(path))  # before the names are read: a key left empty is never dropped unseen
    if written is not None:
        written.update(data)
    data, read = translate(data, str(path))  # TRL's and open-r1's key names (profiles.aliases)
    if readings is not None:  # how each key was read, for `profiles check` and the run's note
        readings.extend(read)
    return data


def load_profile(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Profile:
    """Read, validate and override one profile file. Errors name the file (or --set) and the key."""
    path = Path(path)
    readings: list = []
    written: dict = {}
    try:
        data = read_profile_data(path, readings, written)
    except RecipeProblems as exc:
        raise _with_schema_problem(exc, str(path)) from None
    changes = parse_overrides(overrides, written)
    readings = [r for r in readings if not (r.kind == TRL_DEFAULT and r.ours in changes)]  # the --set says it
    try:
        profile = profile_from_dict(data, str(path))
    except ProfileError:
        if not changes:
            raise
        # The --set changes what the file gets wrong (a saved profile whose reward file has since gone, given
        # new rewards; a recipe's batch made whole groups by --set num_gpus=7): the file with the change is
        # what runs, so that is what is checked.
        profile = profile_from_dict({**data, **changes}, f"{path} with --set")
        profile.readings = readings + differences(profile, {**written, **changes})
        return profile
    if changes:
        auto = {key: AUTO for key in profile.derived if key not in changes}  # still the plan's to derive
        profile = profile_from_dict({**profile.to_dict(), **auto, **changes}, f"{path} with --set")
    profile.readings = readings + differences(profile, {**written, **changes})
    return profile


def _with_schema_problem(error: RecipeProblems, source: str) -> RecipeProblems:
    """A recipe's refused keys, and the schema's first refusal of the keys that did read, in one message: the
    whole list of what to change in one pass. A refusal of a key that a refused one would have set is left out."""
    touched = {key for key in (p.key for p in error.problems) if key}
    touched |= {alias.ours for key in touched if (alias := alias_of(key)) is not None and alias.ours}
    try:
        profile_from_dict(error.partial, source)
    except ProfileError as more:
        if more.key is not None and more.key not in touched:
            return RecipeProblems(source, [*error.problems, more])
    except Exception:  # noqa: BLE001 - the refusals already found are the answer
        pass
    return error


def load_profiles(
    directory: str | Path,
    overrides: list[str] | tuple[str, ...] = (),
    device: str | None = None,
    refused: list[str] | None = None,
) -> list[Profile]:
    """Every *.yaml in a folder (hidden files skipped: editor backups, locks), in ladder order.

    device: the kind this machine trains on ("cpu" without a GPU). Only its profiles take the overrides and
    are checked with them; the others load as written, for the plan to leave out, so that a --set meant for
    the CPU ladder is not refused for a GPU profile that could never run here.
    refused: where given, a rung of `device` whose own written keys conflict with the overrides while another
    rung takes them is left out and the reason added here (`--set fast_inference=false` and a rung that serves
    vLLM from a node of its own); a value of the --set a rung refuses (the key named is one the user set), or a
    --set every rung refuses, still raises."""
    directory = Path(directory)
    if not directory.is_dir():
        raise UsageError(f"{directory}: profiles folder not found (fix: --profiles-dir DIR)")
    files = [
        f for pattern in ("*.yaml", "*.yml") for f in sorted(directory.glob(pattern)) if not f.name.startswith(".")
    ]
    if not files:
        raise UsageError(f"{directory}: no *.yaml profiles in this folder")
    profiles = []
    if device is not None and overrides:
        # the overrides are applied rung by rung in ladder order, so that a --set every rung refuses is
        # reported for the rung `train` tries first, not for the file that sorts first by name
        written = sorted(
            ((load_profile(path), path) for path in files), key=lambda item: (item[0].ladder, item[0].name)
        )
        refusals: list[ProfileError] = []
        users_keys = set(set_keys(overrides))
        for as_written, path in written:
            if as_written.device != device:
                profiles.append(as_written)
                continue
            try:
                profiles.append(load_profile(path, overrides))
            except ProfileError as exc:
                if refused is None or exc.key is None or exc.key in users_keys:
                    raise
                refusals.append(exc)
        if refusals and not any(p.device == device for p in profiles):
            raise refusals[0]
        if refused is not None:
            refused.extend(
                f"{exc.source}: key '{exc.key}': {exc.reason}: left out of the ladder (the --set holds for the "
                "other rungs)"
                for exc in refusals
            )
    else:
        profiles = [load_profile(path, overrides) for path in files]
    names: dict[str, str] = {}
    for p in profiles:
        if p.name in names:
            raise ProfileError(
                p.source, "name", f"'{p.name}' is also the name of {names[p.name]}", "give each profile a unique name"
            )
        names[p.name] = p.source
    return sorted(profiles, key=lambda p: (p.ladder, p.name))
