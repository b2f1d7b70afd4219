"""profiles.load: the schema's refusals (each names its key), overrides, YAML errors; the shipped ladder."""

import re
from pathlib import Path

import pytest

from contract.errors import ProfileError, UsageError
from launcher.card.detect import GpuInfo
from launcher.memory.estimate import estimate
from profiles.load import KEYS, Profile, load_profile, load_profiles, parse_overrides, profile_from_dict
from support.profile_data import refused, valid

REPO = Path(__file__).resolve().parents[3]
PROFILES = REPO / "profiles"
SHIPPED = sorted(PROFILES.glob("*.yaml"))
GPU_SHIPPED = [p for p in SHIPPED if p.name.startswith("gpu-")]


# ---------------------------------------------------------------------------------------------------
# Every rule refused with its key


@pytest.mark.parametrize(
    "keys, key, words",
    [
        (
            dict(per_device_train_batch_size=3, gradient_accumulation_steps=1, num_generations=4),
            "per_device_train_batch_size",
            "is not divisible by num_generations (4)",
        ),
        (
            dict(max_prompt_length=512, max_completion_length=768, max_seq_length=1024),
            "max_seq_length",
            "512 + 768 > max_seq_length (1024)",
        ),
        (
            dict(device="cpu", fast_inference=True, load_in_4bit=False, optim="adamw_torch"),
            "fast_inference",
            "vLLM needs a GPU",
        ),
        (
            dict(device="cpu", fast_inference=False, load_in_4bit=True, optim="adamw_torch"),
            "load_in_4bit",
            "need a GPU",
        ),
        (
            dict(device="cpu", fast_inference=False, load_in_4bit=False, optim="adamw_8bit"),
            "optim",
            "adamw_8bit needs bitsandbytes",
        ),
        (dict(vllm_standby=True, fast_inference=False), "vllm_standby", "the vLLM engine, which is off"),
        (dict(lora_rank=24), "lora_rank", "not 24"),
        (dict(lora_rank=0, load_in_4bit=True), "lora_rank", "cannot update 4-bit weights"),
        (dict(rewards={"acuracy": 1.0}), "rewards", "unknown reward 'acuracy'"),
        (dict(dataset="no/such/file.jsonl"), "dataset", "no such file or folder, and not a hub id"),
    ],
)
def test_each_rule_is_refused_with_its_key(keys, key, words):
    error = refused(valid(**keys))
    assert error.key == key
    assert words in error.reason
    assert f"<test>: key '{key}'" in str(error)


@pytest.mark.parametrize(
    "key, value, words",
    [
        ("lora_rank", -1, "-1 must be >= 0"),
        ("lora_rank", 1024, "1024 must be <= 512"),
        ("num_generations", 1, "1 must be >= 2"),
        ("gpu_memory_utilization", 1.0, "1.0 must be < 1.0"),
        ("gpu_memory_utilization", 0, "0.0 must be > 0.0"),
        ("temperature", "hot", "expected a number, got 'hot'"),
        ("load_in_4bit", "yes", "expected true or false"),
        ("max_steps", 2.5, "expected a whole number"),
        ("optim", "adam", "'adam' is not one of"),
        ("device", "tpu", "'tpu' is not one of cuda, cpu"),
        ("target_modules", [], "expected a non-empty list of names"),
        ("rewards", {"accuracy": "high"}, "weight of reward 'accuracy' must be a number"),
        ("learning_rate", float("nan"), "expected a finite number"),
    ],
)
def test_types_ranges_and_choices_are_refused_with_the_key(key, value, words):
    error = refused(valid(**{key: value}))
    assert error.key == key
    assert words in error.reason


def test_unknown_key_suggests_the_close_one():
    error = refused(valid(lora_rnk=16))
    assert (error.key, error.reason, error.fix) == ("lora_rnk", "unknown key", "did you mean 'lora_rank'?")


def test_choice_typo_suggests_the_close_one():
    assert refused(valid(optim="adamw_8bt")).fix == "did you mean 'adamw_8bit'?"


def test_values_are_coerced_where_yaml_is_loose():
    p = profile_from_dict(
        valid(
            learning_rate="5e-6",
            gradient_checkpointing=True,
            target_modules="q_proj, v_proj",
            max_steps=10.0,
            save_steps=5,
            lora_dropout=None,
        ),
        "<test>",
    )
    assert p.learning_rate == 5e-6 and p.gradient_checkpointing == "true"
    assert p.target_modules == ["q_proj", "v_proj"] and p.max_steps == 10 and p.lora_dropout == 0.0


def test_name_defaults_to_the_file_stem(tmp_path):
    path = tmp_path / "my-card.yaml"
    path.write_text("dataset: arithmetic\n")
    assert load_profile(path).name == "my-card"


def test_yaml_syntax_error_names_line_and_column(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("dataset: arithmetic\nlora_rank: [16\nnum_generations: 4\n")
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    assert re.search(r"YAML syntax error at line 3, column \d+", str(info.value))
    assert str(path) in str(info.value)


def test_profile_that_is_not_a_mapping_is_refused(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- a\n- b\n")
    with pytest.raises(ProfileError, match="must be a mapping"):
        load_profile(path)


def test_missing_profile_file_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="profile not found"):
        load_profile(tmp_path / "none.yaml")


# ---------------------------------------------------------------------------------------------------
# Overrides


def test_overrides_apply_and_are_validated(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("dataset: arithmetic\nlora_rank: 16\n")
    p = load_profile(path, ["lora_rank=32", "rewards={accuracy: 1.0}", "fast_inference=false"])
    assert (p.lora_rank, p.rewards, p.fast_inference) == (32, {"accuracy": 1.0}, False)
    with pytest.raises(ProfileError) as info:
        load_profile(path, ["lora_rank=24"])
    assert info.value.key == "lora_rank" and info.value.source == f"{path} with --set"


def test_override_errors():
    with pytest.raises(ProfileError) as info:
        parse_overrides(["lora_rnk=8"])
    assert (info.value.source, info.value.key, info.value.fix) == ("--set", "lora_rnk", "did you mean 'lora_rank'?")
    with pytest.raises(UsageError, match="expected KEY=VALUE"):
        parse_overrides(["lora_rank"])
    assert parse_overrides(["model=[oops"]) == {"model": "[oops"}  # text that is not YAML stays text


def test_replace_is_validated():
    p = profile_from_dict(valid(), "<test>")
    assert p.replace(per_device_train_batch_size=1, gradient_accumulation_steps=4).effective_batch == 4
    with pytest.raises(ProfileError):
        p.replace(per_device_train_batch_size=3, gradient_accumulation_steps=1)


def test_yaml_round_trip():
    p = profile_from_dict(valid(lora_rank=32, rewards={"accuracy": 2.0}), "<test>")
    import yaml

    assert profile_from_dict(yaml.safe_load(p.to_yaml()), "<again>").to_dict() == p.to_dict()


def test_duplicate_names_in_a_folder_are_refused(tmp_path):
    (tmp_path / "a.yaml").write_text("name: same\ndataset: arithmetic\n")
    (tmp_path / "b.yaml").write_text("name: same\ndataset: arithmetic\n")
    with pytest.raises(ProfileError, match="'same' is also the name of"):
        load_profiles(tmp_path)


def test_every_key_has_a_default_that_validates():
    assert set(KEYS) == set(Profile().to_dict())
    assert profile_from_dict({"dataset": "arithmetic"}, "<defaults>").ladder == 100


# ---------------------------------------------------------------------------------------------------
# The shipped ladder


def test_every_shipped_profile_is_valid_and_named_after_its_file():
    profiles = load_profiles(PROFILES)
    assert {p.name for p in profiles} == {path.stem for path in SHIPPED}
    ladder = [p.ladder for p in profiles]
    assert len(set(ladder)) == len(ladder), "two profiles share a ladder position"


def test_gpu_ladder_covers_every_card_class_with_the_named_models():
    names = [p.stem for p in GPU_SHIPPED]
    for name in names:
        assert re.fullmatch(r"gpu-\d+gb-[a-z0-9.\-]+", name), name
    classes = {int(re.match(r"gpu-(\d+)gb", n).group(1)) for n in names}
    assert {8, 12, 16, 40, 80} <= classes and classes & {22, 24}
    models = {load_profile(p).model.lower() for p in GPU_SHIPPED}
    assert "unsloth/llama-3.2-3b-instruct" in models
    assert models & {"unsloth/qwen2.5-7b-instruct", "unsloth/llama-3.1-8b-instruct"}
    assert models & {"unsloth/qwen2.5-14b-instruct", "unsloth/qwen3-14b"}


def test_ladder_puts_larger_models_first_then_more_generations_and_longer_completions():
    from launcher.memory.estimate import estimate

    gpu = [p for p in load_profiles(PROFILES) if p.device == "cuda"]
    # "larger" is the model as loaded: 14B in 16-bit before 14B in 4-bit
    keys = [(round(estimate(p).components["weights"], 2), p.num_generations, p.max_completion_length) for p in gpu]
    assert keys == sorted(keys, reverse=True), [p.name for p in gpu]


def test_design_example_profile():
    p = load_profile(PROFILES / "gpu-16gb-gemma3-1b.yaml")
    assert (
        p.model,
        p.load_in_4bit,
        p.lora_rank,
        p.fast_inference,
        p.gpu_memory_utilization,
        p.per_device_train_batch_size,
        p.gradient_accumulation_steps,
    ) == ("unsloth/gemma-3-1b-it", True, 16, True, 0.5, 2, 2)
    text = (PROFILES / "gpu-16gb-gemma3-1b.yaml").read_text()
    assert "fast_inference=false" in text  # the Gemma-3 + vLLM caveat and its way out


@pytest.mark.parametrize("path", GPU_SHIPPED, ids=lambda p: p.stem)
def test_header_states_target_peak_and_first_lever(path):
    text = path.read_text()
    assert re.search(r"^# Targets: .+", text, re.M)
    assert re.search(r"^# First lever on OOM: .+", text, re.M)
    if load_profile(path).derived:  # a rung derived for the card: the header says what its target card gets
        from launcher.card.detect import detect_machine
        from launcher.plan.derive import derive_rungs, derived_text

        match = re.search(r"^# Derived on a ([\d.]+) GiB (.+?): (.+)$", text, re.M)
        assert match, "header lacks what the rung derives on its target card"
        assert "# Intents, kept on every card:" in text and "`auto`" in text
        machine = detect_machine(what_if_gib=float(match.group(1)), what_if_name=match.group(2))
        (derived,), _notes = derive_rungs([load_profile(path)], machine)
        assert derived.not_derived is None, derived.not_derived
        assert derived_text(derived.profile) == match.group(3), "header is stale: re-derive it on its target card"
        return
    match = re.search(r"^# Estimator's peak: ([\d.]+) GiB on a ([\d.]+) GiB card", text, re.M)
    assert match, "header lacks the estimator's peak"
    peak, card = float(match.group(1)), float(match.group(2))
    gpu = GpuInfo("target", card, card, 0.0, None, None, None, 0, "what-if")
    est = estimate(load_profile(path), gpu=gpu)
    assert est.total_gib == pytest.approx(peak, abs=0.05), "header peak is stale: re-run the estimator"
    assert est.vllm_problem is None
    assert est.total_gib <= card * 0.95


def test_fewer_steps_than_save_steps_is_allowed():
    """`--set max_steps=20` on a profile saving every 100 steps: the trainer saves at the last step anyway."""
    profile = profile_from_dict(valid(max_steps=20, save_steps=100), "<test>")
    assert (profile.max_steps, profile.save_steps) == (20, 100)
