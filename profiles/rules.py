"""The longer cross-key rules of a profile: scale-out keys against each other, rewards and dataset that exist.

Called in turn by profiles.cross_keys (check_cross_keys); each refusal is a KeyProblem naming the key to change.
"""

from __future__ import annotations

import re
from pathlib import Path

from profiles.keys import (
    CISPO_EPSILON_HIGH,
    DATASETS,
    DELTA_LOSS_TYPES,
    NO_EPSILON_HIGH_LOSS_TYPES,
    KeyProblem,
    shown,
    suggest,
)

# org/name, or a bare name (TRL's too): the hub creates it in the token's account
_HUB_REPO = re.compile(r"^([A-Za-z0-9][\w.-]*/)?[A-Za-z0-9][\w.-]*$")


def check_scale_out(p) -> None:
    """The scale-out keys against each other and against the single-device Unsloth path."""
    if p.zero_stage and p.num_gpus == 1:
        raise KeyProblem(
            f"ZeRO stage {p.zero_stage} shards model states over the data-parallel GPUs, and "
            "num_gpus is 1: there is nothing to shard over",
            "set num_gpus above 1, or zero_stage: 0",
            "zero_stage",
        )
    if p.device == "cpu":
        if p.zero_stage:
            raise KeyProblem(
                "DeepSpeed ZeRO needs GPUs; several cpu processes train with plain DDP (gloo)",
                "set zero_stage: 0 on a cpu profile",
                "zero_stage",
            )
        if p.vllm_mode == "server":
            raise KeyProblem("a vLLM server needs GPUs", "set vllm_mode: colocate on a cpu profile", "vllm_mode")
    if p.vllm_mode == "server" and not p.fast_inference:
        raise KeyProblem(
            "server mode generates with vLLM, which is off (fast_inference: false)",
            "set fast_inference: true, or vllm_mode: colocate",
            "vllm_mode",
        )
    if p.distributed:
        if p.vllm_standby:
            raise KeyProblem(
                "standby is Unsloth's, and Unsloth trains on one GPU; this profile trains through "
                "accelerate (num_gpus > 1 or a vLLM server)",
                "set vllm_standby: false",
                "vllm_standby",
            )
        if p.gradient_checkpointing == "unsloth":
            raise KeyProblem(
                "'unsloth' (checkpoints offloaded to RAM) needs the single-GPU Unsloth path; this "
                "profile trains through accelerate",
                "use gradient_checkpointing: true",
                "gradient_checkpointing",
            )
    if p.vllm_tensor_parallel > 1:
        _check_tensor_parallel(p)


def check_loss_settings(p) -> None:
    """The GRPO loss keys against each other: combinations that contradict the method they name, and values
    TRL would take silently and not use. TRL 1.15 itself only warns about these (luspo at token level, vespo
    at sequence level) or ignores them (delta outside its clipping branch)."""
    if p.loss_type == "luspo" and p.importance_sampling_level != "sequence":
        raise KeyProblem(
            "luspo is a sequence-level loss (LUSPO scales GSPO's sequence ratio by its length)",
            "set importance_sampling_level: sequence",
            "importance_sampling_level",
        )
    if p.loss_type == "vespo" and p.importance_sampling_level != "token":
        raise KeyProblem(
            "vespo computes its sequence-level weights itself from per-token ratios",
            "set importance_sampling_level: token",
            "importance_sampling_level",
        )
    if p.delta is not None:
        if p.loss_type not in DELTA_LOSS_TYPES:
            raise KeyProblem(
                f"delta caps the clipped ratio of {', '.join(DELTA_LOSS_TYPES)}; {p.loss_type} "
                "has no such ratio and TRL would ignore it",
                "remove delta",
                "delta",
            )
        if p.delta <= 1 + p.epsilon:
            raise KeyProblem(
                f"delta ({p.delta:g}) must exceed 1 + epsilon ({1 + p.epsilon:g}), or it would cut "
                "ratios the ordinary clipping keeps",
                f"use delta above {1 + p.epsilon:g} (e.g. 4)",
                "delta",
            )
    if p.loss_type == "cispo":
        if p.epsilon_high is None:
            p.epsilon_high = CISPO_EPSILON_HIGH  # TRL would cap at epsilon (0.2): every weight below 1
        elif p.epsilon_high < 1:
            raise KeyProblem(
                f"with cispo, epsilon_high ({p.epsilon_high:g}) caps the importance weight itself: below 1, "
                "every weight is capped below 1 and the whole loss is scaled down",
                f"use epsilon_high: {CISPO_EPSILON_HIGH:g} (TRL's recommendation for cispo), or leave it empty",
                "epsilon_high",
            )
    if p.epsilon_high is not None and p.loss_type in NO_EPSILON_HIGH_LOSS_TYPES:
        raise KeyProblem(
            f"{p.loss_type} does not clip the ratio, and TRL would ignore epsilon_high ({p.epsilon_high:g})",
            "remove epsilon_high",
            "epsilon_high",
        )
    if p.epsilon_high is not None and p.loss_type != "cispo" and p.epsilon_high < p.epsilon:
        raise KeyProblem(
            f"epsilon_high ({p.epsilon_high:g}) below epsilon ({p.epsilon:g}) clips increases harder than decreases",
            "use epsilon_high >= epsilon, or leave it empty (= epsilon)",
            "epsilon_high",
        )


def _check_tensor_parallel(p) -> None:
    tp = p.vllm_tensor_parallel
    if not p.fast_inference:
        raise KeyProblem(
            "tensor parallelism applies to vLLM, which is off", "set vllm_tensor_parallel: 1", "vllm_tensor_parallel"
        )
    if p.uses_vllm_server and p.vllm_server_gpus % tp:
        raise KeyProblem(
            f"vllm_server_gpus ({p.vllm_server_gpus}) is not a multiple of vllm_tensor_parallel "
            f"({tp}): each server copy needs whole GPUs",
            f"use vllm_server_gpus: {tp * max(1, p.vllm_server_gpus // tp)}",
            "vllm_tensor_parallel",
        )
    if not p.uses_vllm_server and p.num_gpus % tp:
        raise KeyProblem(
            f"num_gpus ({p.num_gpus}) is not a multiple of vllm_tensor_parallel ({tp}): colocated "
            "vLLM splits the model over groups of training GPUs",
            "use a divisor of num_gpus, or vllm_mode: server",
            "vllm_tensor_parallel",
        )


def _base_dir(p) -> Path | None:
    """The profile's folder, where its relative paths are looked for first (then the current directory)."""
    if not p.source or p.source.startswith("<") or p.source.startswith("--set"):
        return None
    return Path(p.source).expanduser().parent


def _reward_entry(text: str, base: Path | None, key: str) -> str:
    """A `rewards` (or `correctness`) entry checked without importing anything heavy; a file entry comes back
    with its file's absolute path, and a reward model's folder (`model:FOLDER`) as an absolute one, so that the
    attempt and `sample` find it from any folder."""
    import importlib.util

    from rewards import REWARDS
    from usercode.entry import check_spec, is_user_code, parse_spec

    if isinstance(text, str) and text.startswith("model:"):  # a reward model (rewards.model), loaded in the attempt
        from rewards.model import MODEL_PREFIX, looks_like_hub_id, model_name

        fix = (
            "give model:FOLDER, a folder holding a saved sequence-classification model and its tokenizer "
            "(save_pretrained), or model:ORG/NAME, a hub id in the local Hugging Face cache"
        )
        if key != "rewards":
            raise KeyProblem(
                f"'{text}' is a reward model: it scores, it does not say whether an answer is right",
                "name a reward that gives 1.0 for a right answer (accuracy, math, or your own function)",
                key,
            )
        name = text[len(MODEL_PREFIX) :].strip()
        if not name:
            raise KeyProblem(f"'{text}' names no model", fix, key)
        path = Path(name).expanduser()
        candidates = [path] if path.is_absolute() else [*([base / path] if base else []), Path.cwd() / path]
        folder = next((c for c in candidates if c.is_dir()), None)
        if folder is not None:
            if not (folder / "config.json").is_file():
                raise KeyProblem(f"'{text}': the folder {folder.resolve()} holds no config.json", fix, key)
            return f"{MODEL_PREFIX}{folder.resolve()}"
        if looks_like_hub_id(model_name(text)):
            return text
        raise KeyProblem(f"'{text}': no folder {candidates[0]}, nor a hub id org/name", fix, key)
    if text in REWARDS:
        if text == "math" and importlib.util.find_spec("math_verify") is None:
            raise KeyProblem(
                "the math reward needs the math-verify package, which is not installed",
                "pip install math-verify, or remove math",
                key,
            )
        return text
    if not is_user_code(text):
        raise KeyProblem(
            f"unknown reward '{text}'; known: {', '.join(REWARDS)}, or path/to/file.py:function, "
            "or package.module:function",
            suggest(text, REWARDS),
            key,
        )
    try:
        spec = parse_spec(text, base_dir=base)
        check_spec(spec)
    except ValueError as exc:
        raise KeyProblem(str(exc), None, key) from None
    return f"{spec.path.resolve()}:{spec.function}" if spec.path is not None else text


def _check_rewards(p, base: Path | None) -> None:
    from rewards.model import is_model_reward, reward_name
    from usercode.entry import is_user_code

    resolved = {}
    for name, weight in p.rewards.items():
        resolved[_reward_entry(name, base, "rewards")] = weight
    logged: dict[str, str] = {}
    for entry in resolved:  # TRL logs each reward under its function's name: two of one name would merge
        if is_model_reward(entry):
            shown_as = reward_name(entry)
        else:
            shown_as = entry.rpartition(":")[2] if is_user_code(entry) else entry
        if shown_as in logged:
            raise KeyProblem(
                f"'{entry}' and '{logged[shown_as]}' would both be logged as rewards/{shown_as}",
                "rename one of the functions",
                "rewards",
            )
        logged[shown_as] = entry
    p.rewards = resolved
    p.correctness = _reward_entry(p.correctness, base, "correctness")


def _check_dataset(p, base: Path | None) -> None:
    from tasks.data_spec import SUFFIX_BUILDERS, source_kind

    if p.dataset in DATASETS:
        for key, value in (
            ("dataset_config", p.dataset_config),
            ("question_field", p.question_field),
            ("answer_field", p.answer_field),
            ("answer_pattern", p.answer_pattern),
            ("train_split", p.train_split != "train"),
            ("test_split", p.test_split != "test"),
        ):
            if value:
                raise KeyProblem(
                    f"applies to your own data; {p.dataset} knows its own columns and splits",
                    f"remove {key}, or set dataset to your file, folder or hub id",
                    key,
                )
        return
    if p.question_field and p.question_field == p.answer_field:
        raise KeyProblem(
            f"'{p.question_field}' is both question_field and answer_field: the model would be shown "
            "its own gold answer",
            "name two different columns",
            "answer_field",
        )
    given = Path(p.dataset).expanduser()
    if not given.is_absolute() and base is not None and (base / given).exists():
        given = base / given
    try:
        kind = source_kind(str(given))
    except Exception as exc:  # tasks.data_spec's UsageError: its text names the path and the fix
        raise KeyProblem(str(exc), None, "dataset") from None
    if kind == "folder" and not any(f.suffix.lower() in SUFFIX_BUILDERS for f in given.iterdir()):
        raise KeyProblem(
            f"folder {given} holds no {', '.join(SUFFIX_BUILDERS)} files",
            "give a folder with train.<ext> (and test.<ext>) files, or one file",
            "dataset",
        )
    if kind == "hub":
        return
    p.dataset = str(given.resolve())
    if p.dataset_config:
        raise KeyProblem(
            "dataset_config applies to hub datasets, not local files", "remove dataset_config", "dataset_config"
        )


def _check_answer_pattern(p) -> None:
    if not p.answer_pattern:
        return
    try:
        groups = re.compile(p.answer_pattern).groups
    except re.error as exc:
        raise KeyProblem(
            f"{shown(p.answer_pattern)} is not a regular expression ({exc})", None, "answer_pattern"
        ) from None
    if groups < 1:
        raise KeyProblem(
            f"{shown(p.answer_pattern)} has no group around the gold answer",
            "put the answer in a group, e.g. '#### (.+)'",
            "answer_pattern",
        )


# Families whose decoder blocks name their linear layers as Llama does (the catalogue's module_shapes).
_LLAMA_NAMED = ("llama", "qwen2", "qwen3", "mistral", "gemma3", "gemma3_text")


def check_target_modules(p) -> None:
    """For a model the catalogue knows offline, every LoRA target must be one of its linear layers: PEFT
    refuses an unknown name only after the model has loaded, and the estimate would count it as nothing."""
    from profiles.catalog import CATALOGUE, TINY, catalogue_key, is_tiny

    key = catalogue_key(p.model)
    arch = TINY if is_tiny(p.model) else next((a for a in CATALOGUE if catalogue_key(a.name) == key), None)
    if arch is None or arch.family not in _LLAMA_NAMED:
        return  # its layer names are read from its own config at load time
    layers = list(arch.module_shapes())
    unknown = [name for name in p.target_modules if name not in layers]
    if unknown:
        hint = suggest(unknown[0], layers)
        what = "is not a linear layer" if len(unknown) == 1 else "are not linear layers"
        raise KeyProblem(
            f"{', '.join(map(repr, unknown))} {what} of {p.model} (its layers: {', '.join(layers)})",
            (hint + "; " if hint else "") + "list names from its layers",
            "target_modules",
        )


def check_layout(p) -> None:
    """The format rewards must score the layout the system prompt asks for: a prompt that asks for
    <think>/<answer> scored by the <reasoning> rewards (or the other way round) gives every answer 0 format
    reward, whatever the model writes."""
    from rewards.format import FORMAT_LAYOUTS
    from rewards.parse import asked_layout

    asked = asked_layout(p.system_prompt)
    if asked is None:
        return
    other = [name for name in p.rewards if FORMAT_LAYOUTS.get(name, asked) != asked]
    if not other:
        return
    fitting = [name for name, layout in FORMAT_LAYOUTS.items() if layout == asked]
    scored = FORMAT_LAYOUTS[other[0]]
    raise KeyProblem(
        f"system_prompt asks for the {asked} layout, and {', '.join(other)} "
        f"{'scores' if len(other) == 1 else 'score'} the {scored} layout: every answer that follows the prompt "
        "would get 0 from it",
        f"score the prompt's layout with {' / '.join(fitting)}, or write a system_prompt asking for {scored}",
        "rewards",
    )


def check_rewards_and_dataset(p) -> None:
    check_target_modules(p)
    base = _base_dir(p)
    _check_rewards(p, base)
    check_layout(p)
    _check_dataset(p, base)
    _check_answer_pattern(p)
    if p.hub_model_id and not _HUB_REPO.match(p.hub_model_id):
        raise KeyProblem(
            f"{shown(p.hub_model_id)} is not a hub repository id", "write it as org/name (or name)", "hub_model_id"
        )


def missing_tracker(p, environ=None) -> str | None:
    """Why the profile's `report_to` tracker cannot start on this machine (its package is not installed), or
    None. Checked before a run starts: transformers refuses it only when the trainer is built, after the model
    has loaded."""
    import importlib.util
    import os

    from profiles.keys import TRACKER_MODULES

    if p.report_to == "kubeflow":
        if (os.environ if environ is None else environ).get("KUBEFLOW_TRAINER_SERVER_URL"):
            return None
        return (
            "report_to 'kubeflow' needs KUBEFLOW_TRAINER_SERVER_URL in the environment (fix: set it, or "
            "report_to: none)"
        )
    if p.report_to not in TRACKER_MODULES:
        return None  # none, or all (whatever is installed)
    modules, package = TRACKER_MODULES[p.report_to]
    for module in modules:
        top = module.split(".")[0]
        try:
            if importlib.util.find_spec(top) is not None and importlib.util.find_spec(module) is not None:
                return None
        except (ImportError, ValueError):
            continue
    return (
        f"report_to '{p.report_to}' needs the {package} package, which is not installed here (fix: pip "
        f"install {package}, or set report_to: none)"
    )


def tracker_refusal(profiles, chosen=None) -> str | None:
    """`FILE: key 'report_to': why (fix: ...)` for the first of `profiles` whose tracker cannot start here,
    `chosen` (the rung a run starts with) looked at first; None when every one can. What `train` refuses before
    its run folder exists, said by `profiles check` and `plan` too, before anyone starts the run."""
    first = [chosen] if chosen is not None else []
    for profile in first + [p for p in profiles if p is not chosen]:
        problem = missing_tracker(profile)
        if problem:
            return f"{profile.source or profile.name}: key 'report_to': {problem}"
    return None


def remote_code_notice(p) -> str | None:
    """What `trust_remote_code: true` will do, said once before a model is loaded with it (None when off)."""
    if not p.trust_remote_code:
        return None
    return (
        f"trust_remote_code is true ({p.source or 'the profile'}): loading {p.model} runs the Python files that "
        "come with it, with your rights"
    )
