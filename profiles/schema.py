"""WHAT a profile is: the one model of its keys (profiles.fields) and the rules that tie them together
(profiles.cross_keys), the keys listed by what they are to the rest of the project, and plain data read into
it.

Every default, range and help line lives in the field definitions of profiles.fields, their value types in
profiles.field_types; `--help`, the error messages and profiles/schema.json (profiles.help) are generated from
them. `profile_from_dict` turns the schema's refusals into errors that name the source, the key and the fix;
reading files and `--set` overrides live in profiles.load.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import ConfigDict, Field, ValidationError, model_validator
from pydantic.json_schema import SkipJsonSchema

from contract.errors import ProfileError
from profiles.cross_keys import check_cross_keys
from profiles.field_types import AUTO
from profiles.fields import DERIVED, LEVER, MEMORY, SHAPE, TAGS, ProfileFields, extra_of
from profiles.keys import KeyProblem, safe_name, shown, suggest


class Profile(ProfileFields):
    model_config = ConfigDict(
        extra="forbid",
        title="grpo-train profile",
        json_schema_extra={"$schema": "https://json-schema.org/draft/2020-12/schema"},
    )

    # not a YAML key: the file the profile was read from
    source: SkipJsonSchema[str] = Field("", exclude=True)
    # how the file's keys in TRL's or open-r1's names were read (profiles.aliases.Reading); empty for our own
    readings: SkipJsonSchema[list] = Field(default_factory=list, exclude=True)
    # the keys written `auto`: the plan derives them for the card (launcher.plan.derive.derive_rungs)
    derived: SkipJsonSchema[tuple] = Field(default=(), exclude=True)

    # ------------------------------------------------------------------------------------------------
    @property
    def effective_batch(self) -> int:
        """Completions per optimizer step in one training process."""
        return self.per_device_train_batch_size * self.gradient_accumulation_steps

    @property
    def completions_per_step(self) -> int:
        """Completions per optimizer step over every training process."""
        return self.effective_batch * self.num_gpus

    @property
    def generation_batch(self) -> int:
        """Completions one training process generates at once: its share of TRL's generation_batch_size,
        per_device_train_batch_size x steps_per_generation (a batch serving several optimizer steps is generated
        in one call)."""
        return self.effective_batch * self.updates_per_generation

    @property
    def updates_per_generation(self) -> int:
        """Optimizer steps one generation batch serves (steps_per_generation over gradient_accumulation_steps)."""
        return max(1, self.steps_per_generation // self.gradient_accumulation_steps)

    @property
    def uses_lora(self) -> bool:
        return self.lora_rank > 0

    @property
    def uses_vllm_server(self) -> bool:
        return self.fast_inference and self.vllm_mode == "server"

    @property
    def distributed(self) -> bool:
        """True when this profile trains through accelerate (plain TRL + PEFT) instead of the single-device
        Unsloth path: more than one training process, or generation on a separate vLLM server."""
        return self.num_gpus > 1 or self.uses_vllm_server

    @property
    def gpus_needed(self) -> int:
        """Every GPU the profile occupies: the training GPUs plus, in server mode, the vLLM server's."""
        if self.device == "cpu":
            return 0
        return self.num_gpus + (self.vllm_server_gpus if self.uses_vllm_server else 0)

    def to_dict(self) -> dict:
        """The YAML keys and their values (not `source`)."""
        return self.model_dump()

    def replace(self, **changes: Any) -> Profile:
        """A validated copy with some keys changed (used by the supervisor's shrink)."""
        return profile_from_dict({**self.to_dict(), **changes}, self.source or "<profile>")

    def to_yaml(self) -> str:
        import yaml

        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    # ------------------------------------------------------------------------------------------------
    # Rules that involve more than one key, in the order they are reported (profiles.cross_keys). Each names the
    # key to change.

    @model_validator(mode="after")
    def _keys_agree(self) -> Profile:
        check_cross_keys(self)
        return self


KEYS = tuple(name for name in Profile.model_fields if name not in ("source", "readings", "derived"))


def keys_tagged(tag: str) -> tuple[str, ...]:
    """The keys carrying `tag` (one of TAGS), in the schema's order."""
    if tag not in TAGS:
        raise ValueError(f"unknown tag {tag!r}")
    return tuple(name for name in KEYS if tag in extra_of(Profile.model_fields[name])["tags"])


def keys_in(section: str) -> tuple[str, ...]:
    """The keys of one section of the schema (as `profiles keys` groups them), in the schema's order."""
    return tuple(name for name in KEYS if extra_of(Profile.model_fields[name])["section"] == section)


MEMORY_KEYS = keys_tagged(MEMORY)
DERIVED_KEYS = keys_tagged(DERIVED)
LEVER_KEYS = keys_tagged(LEVER)
SHAPE_KEYS = keys_tagged(SHAPE)
# The GRPO loss's settings: its own section, and the KL weight, which sits with the optimiser (it costs memory)
LOSS_KEYS = (*keys_in("loss"), "beta")


def floor_of(key: str) -> int:
    """The least whole value a key takes (its `ge`), 0 where it sets none."""
    return next((int(rule.ge) for rule in Profile.model_fields[key].metadata if hasattr(rule, "ge")), 0)


def _whole(value) -> int | None:
    """A value written as a whole number (not a bool), else None (the schema reports what it is)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _written(values: dict, key: str) -> int | None:
    """A whole-number key as written, else its default."""
    return _whole(values.get(key, Profile.model_fields[key].default))


def _completion_placeholder(values: dict) -> int:
    """max_completion_length's placeholder: the schema's default, within the room a pinned max_seq_length leaves
    after the prompt and no shorter than a pinned expected_completion_length, so that the rules between them
    judge only what was written; KeyProblem, naming the written keys, where they leave it no value."""
    cap = Profile.model_fields["max_completion_length"].default
    prompt, expected = _written(values, "max_prompt_length"), _whole(values.get("expected_completion_length"))
    seq = _whole(values.get("max_seq_length"))
    if seq is None or prompt is None:
        return cap if expected is None else max(cap, expected)
    room = seq - prompt
    if room < 1 or (expected is not None and expected > room):
        need = prompt + max(1, expected or 0)
        beyond = f", less than expected_completion_length {expected}" if expected and expected > room else ""
        raise KeyProblem(
            f"max_completion_length is auto, and max_seq_length {seq} - max_prompt_length {prompt} leaves "
            f"{max(room, 0)} tokens for a completion{beyond}",
            f"raise max_seq_length to at least {need} (or write it auto), or shorten max_prompt_length"
            + (" or expected_completion_length" if beyond else ""),
            "max_seq_length",
        )
    cap = min(cap, room)
    return cap if expected is None else max(cap, expected)


def auto_placeholders(values: dict, derived) -> dict:
    """Values for the keys written `auto` until the plan derives them, chosen so that the rules tying them to
    the keys written stand, and never enforced against them: whole groups per step (one group a micro-batch
    where the batch is auto, the fewest micro-batches a step that make whole groups of the batch written), the
    completion cap within the sequence written and no shorter than the expected length written, the sequence
    as long as prompt and completion, nothing expected beyond the cap, standby off, the run length the plan's.
    KeyProblem where the keys written leave a placeholder no value (its rule's refusal, in their numbers)."""
    defaults = {name: Profile.model_fields[name].get_default(call_default_factory=True) for name in derived}
    out = dict(defaults)
    generations = _written(values, "num_generations")
    if "per_device_train_batch_size" in out:
        out["per_device_train_batch_size"] = generations if generations and generations > 0 else 1
    if "gradient_accumulation_steps" in out:
        batch = _written(values, "per_device_train_batch_size") if "per_device_train_batch_size" not in out else None
        gpus = _written(values, "num_gpus")
        accumulation = 1
        if generations is not None and batch is not None and gpus is not None and min(generations, batch, gpus) > 0:
            # the fewest micro-batches a step whose completions make whole groups (TRL's generation batch)
            accumulation = generations // math.gcd(generations, batch * gpus)
        out["gradient_accumulation_steps"] = accumulation
    if "expected_completion_length" in out:
        out["expected_completion_length"] = 0
    if "vllm_standby" in out:
        out["vllm_standby"] = False
    if "fast_inference" in out:
        out["fast_inference"] = values.get("device", "cuda") != "cpu"
    if "vllm_max_num_seqs" in out:
        out["vllm_max_num_seqs"] = 0
    if "max_steps" in out:
        out["max_steps"] = 0
    if "max_completion_length" in out:
        out["max_completion_length"] = _completion_placeholder(values)
    if "max_seq_length" in out:
        prompt = values.get("max_prompt_length", Profile.model_fields["max_prompt_length"].default)
        completion = values.get("max_completion_length", out.get("max_completion_length"))
        completion = completion or Profile.model_fields["max_completion_length"].default
        if isinstance(prompt, int) and isinstance(completion, int):
            # never below the key's own floor, which a short prompt and completion would take it under
            out["max_seq_length"] = max(floor_of("max_seq_length"), prompt + completion)
    return out


def shape_of(settings: Any) -> tuple:
    """The model and LoRA shape of a profile (or of an attempts.jsonl `settings` dict): a checkpoint resumes
    only into an attempt of the same shape."""
    get = settings.get if isinstance(settings, dict) else (lambda key: getattr(settings, key, None))
    return tuple(tuple(get(k) or ()) if k == "target_modules" else get(k) for k in SHAPE_KEYS)


def choices_of(key: str) -> tuple:
    """The allowed values of a key that is a choice (empty for the others)."""
    annotation = Profile.model_fields[key].annotation
    return get_args(annotation) if get_origin(annotation) is Literal else ()


# ---------------------------------------------------------------------------------------------------
# The schema's refusals as ProfileError


def _problem(error: Mapping[str, Any]) -> tuple[str | None, str, str | None]:
    """(key, reason, fix) from one of pydantic's error records."""
    key = str(error["loc"][0]) if error["loc"] else None
    kind, value, ctx = error["type"], error.get("input"), error.get("ctx") or {}
    if isinstance(ctx.get("error"), KeyProblem):
        problem = ctx["error"]
        return problem.key or key, problem.reason, problem.fix
    for limit, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
        if limit in ctx and kind.startswith(("greater_than", "less_than")):
            return key, f"{shown(value)} must be {sign} {ctx[limit]}", None
    if kind.startswith("bool"):
        return key, f"expected true or false, got {shown(value)}", None
    if kind == "literal_error" and key:
        choices = choices_of(key)
        return key, f"{shown(value)} is not one of {', '.join(map(str, choices))}", suggest(str(value), choices)
    if kind.startswith("string_") and key == "name":
        return (
            key,
            f"{shown(value)} is not a safe folder name",
            "use up to 64 letters, digits, '.', '_' or '-', not starting with '.'",
        )
    if kind == "string_type":
        return key, f"expected text, got {shown(value)}", None
    if kind == "extra_forbidden":
        return key, "unknown key", suggest(str(key), KEYS) or "run `python train.py --help` for the list of keys"
    return key, error["msg"], None


_ADAPTERS: dict[str, Any] = {}


def check_value(key: str, value: Any, source: str = "--set") -> Any:
    """One key's value as the schema reads it (its type, its range), alone: ProfileError naming the source and
    the key when the schema refuses it. Rules that tie several keys together are checked on a whole profile."""
    from pydantic import TypeAdapter

    if key not in KEYS:
        raise ProfileError(
            source, key, "unknown key", suggest(key, KEYS) or "run `python train.py --help` for the list of keys"
        )
    adapter = _ADAPTERS.get(key)
    if adapter is None:
        info = Profile.model_fields[key]
        # a type built at run time, which TypeAdapter takes as any other
        kind: Any = Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
        adapter = _ADAPTERS[key] = TypeAdapter(kind)
    try:
        return adapter.validate_python(value)
    except ValidationError as exc:
        error = dict(exc.errors()[0])
        error["loc"] = (key,)
        found, reason, fix = _problem(error)
        raise ProfileError(source, found or key, reason, fix) from None


def profile_from_dict(data: Any, source: str) -> Profile:
    """Validate plain data (a YAML mapping) into a Profile; raise ProfileError naming the key."""
    if not isinstance(data, dict):
        raise ProfileError(source, None, f"expected a mapping of keys to values, got {type(data).__name__}")
    values: dict[str, Any] = {}
    derived = []
    for key, value in data.items():
        key = str(key)
        if key not in KEYS:
            raise ProfileError(
                source, key, "unknown key", suggest(key, KEYS) or "run `python train.py --help` for the list of keys"
            )
        if isinstance(value, str) and value.strip().lower() == AUTO and key in DERIVED_KEYS:
            derived.append(key)  # the plan derives it; a placeholder below keeps the rules of the others
            continue
        if value is not None:  # an empty value keeps the default
            values[key] = value
    if derived:
        try:
            values.update(auto_placeholders(values, derived))
        except KeyProblem as problem:
            raise ProfileError(source, problem.key, problem.reason, problem.fix) from None
    if not values.get("name"):
        # made up here, so made safe here: a file named `modèle 2.yaml` is the profile `modele-2`
        values["name"] = safe_name(Path(source).stem) if source and not source.startswith("<") else "profile"
    try:
        return Profile.model_validate({**values, "source": source, "derived": tuple(derived)})
    except ValidationError as exc:
        key, reason, fix = _problem(exc.errors()[0])
        raise ProfileError(source, key, reason, fix) from None
