"""profiles.load against hostile or careless input: empty files, YAML surprises, odd files, extreme numbers.

Also the GRPO batch rule, checked shape by shape against the installed TRL's own check.
"""

import itertools
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contract.errors import ProfileError, UsageError
from profiles.load import KEYS, load_profile, load_profiles, parse_overrides, profile_from_dict
from support.profile_data import refused, valid, write

REPO = Path(__file__).resolve().parents[3]


# ---------------------------------------------------------------------------------------------------
# Empty files


@pytest.mark.parametrize("text", ["", "# only a comment\n# and another\n", "\n\n   \n"])
def test_an_empty_profile_is_refused(tmp_path, text):
    path = write(tmp_path, text)
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    assert info.value.source == str(path) and "the file is empty" in info.value.reason


# ---------------------------------------------------------------------------------------------------
# GRPO's batch rule: the one the installed TRL applies, over every training process


def _trl_accepts(monkeypatch, per_device, accumulation, processes, generations) -> bool:
    from transformers import TrainingArguments
    from trl import GRPOConfig

    # GRPOConfig reads the number of processes from TrainingArguments.world_size (accelerate's state)
    monkeypatch.setattr(TrainingArguments, "world_size", property(lambda self: processes))
    try:
        GRPOConfig(
            output_dir="unused",
            per_device_train_batch_size=per_device,
            gradient_accumulation_steps=accumulation,
            num_generations=generations,
            use_cpu=True,
            report_to="none",
        )
    except ValueError:
        return False
    return True


def _ours_accepts(per_device, accumulation, processes, generations) -> bool:
    data = valid(
        device="cpu",
        fast_inference=False,
        load_in_4bit=False,
        optim="adamw_torch",
        gradient_checkpointing="false",
        per_device_train_batch_size=per_device,
        gradient_accumulation_steps=accumulation,
        num_gpus=processes,
        num_generations=generations,
    )
    try:
        profile_from_dict(data, "<grid>")
    except ProfileError as error:
        assert error.key == "per_device_train_batch_size", error
        return False
    return True


def test_batch_rule_agrees_with_trl_on_a_grid_of_shapes(monkeypatch):
    pytest.importorskip("trl")
    disagreements = []
    for shape in itertools.product(range(1, 5), range(1, 5), range(1, 5), range(2, 9)):
        trl_says, we_say = _trl_accepts(monkeypatch, *shape), _ours_accepts(*shape)
        if trl_says != we_say:
            disagreements.append((shape, trl_says, we_say))
    assert not disagreements, f"(per_device, accumulation, processes, generations), TRL, ours: {disagreements[:8]}"


def test_two_gpus_of_two_completions_hold_a_group_of_four():
    data = valid(
        device="cpu",
        fast_inference=False,
        load_in_4bit=False,
        optim="adamw_torch",
        gradient_checkpointing="false",
        per_device_train_batch_size=2,
        gradient_accumulation_steps=1,
        num_gpus=2,
        num_generations=4,
    )
    assert profile_from_dict(data, "<test>").completions_per_step == 4


# ---------------------------------------------------------------------------------------------------
# YAML surprises


def test_duplicate_keys_are_refused(tmp_path):
    path = write(tmp_path, "dataset: arithmetic\nlora_rank: 16\nlora_rank: 32\n")
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    assert info.value.key == "lora_rank" and "more than once" in info.value.reason


def test_duplicate_keys_inside_a_nested_mapping_are_refused(tmp_path):
    path = write(tmp_path, "dataset: arithmetic\nrewards: {accuracy: 2.0, accuracy: 1.0}\n")
    with pytest.raises(ProfileError, match="more than once"):
        load_profile(path)


@pytest.mark.parametrize("text", ["lora_rank: 010", "lora_rank: 0o10", "max_steps: 1:30"])
def test_yaml_11_octal_and_base_60_are_never_read_silently(tmp_path, text):
    path = write(tmp_path, f"dataset: arithmetic\n{text}\n")
    try:
        profile = load_profile(path)
    except ProfileError as error:
        assert error.key in ("lora_rank", "max_steps")
    else:
        assert (profile.lora_rank, profile.max_steps) in ((16, 90), (10, 250))  # never octal 8


def test_octal_in_an_override_is_never_read_silently(tmp_path):
    path = write(tmp_path, "dataset: arithmetic\n")
    try:
        assert load_profile(path, ["lora_rank=010"]).lora_rank != 8
    except ProfileError as error:
        assert error.key == "lora_rank"


def test_duplicate_target_modules_are_refused():
    error = refused(valid(target_modules=["q_proj", "v_proj", "q_proj"]))
    assert error.key == "target_modules" and "q_proj" in error.reason


# ---------------------------------------------------------------------------------------------------
# Files that are not profiles


def test_hidden_files_in_a_profiles_folder_are_skipped(tmp_path):
    write(tmp_path, "dataset: arithmetic\n", "real.yaml")
    write(tmp_path, "this: is an editor's lock file\n", ".#real.yaml")
    write(tmp_path, "", ".real.yaml.swp.yaml")
    assert [p.name for p in load_profiles(tmp_path)] == ["real"]


def test_a_profile_over_one_megabyte_is_refused(tmp_path):
    path = write(tmp_path, "dataset: arithmetic\n" + "# padding\n" * 120_000)
    with pytest.raises(UsageError, match="larger than"):
        load_profile(path)


# ---------------------------------------------------------------------------------------------------
# Values


@pytest.mark.parametrize("name", ["../../x", "a/b", ".hidden", "x" * 65, "spa ce", "semi;colon", "ünï"])
def test_unsafe_names_are_refused(name):
    assert refused(valid(name=name)).key == "name"


def test_unsafe_name_from_the_command_line_is_refused(tmp_path):
    path = write(tmp_path, "dataset: arithmetic\n")
    with pytest.raises(ProfileError) as info:
        load_profile(path, ["name=../../x"])
    assert info.value.key == "name"


@pytest.mark.parametrize("name", ["gpu-24gb-llama3.1-8b", "a", "A_b.c-1", "x" * 64])
def test_safe_names_are_accepted(name):
    assert profile_from_dict(valid(name=name), "<test>").name == name


def test_an_unsafe_file_stem_makes_a_safe_name(tmp_path):
    # the name is made up from the file: made safe, not refused under a `name` key the user never wrote
    path = write(tmp_path, "dataset: arithmetic\n", "my card.yaml")
    assert load_profile(path).name == "my-card"


@pytest.mark.parametrize("key", ["learning_rate", "weight_decay", "max_grad_norm"])
def test_a_huge_number_in_a_float_key_is_a_profile_error(key):
    assert refused(valid(**{key: 10**400})).key == key


def test_a_huge_reward_weight_is_a_profile_error():
    assert refused(valid(rewards={"accuracy": 10**400})).key == "rewards"


def test_a_huge_number_in_a_file_is_a_profile_error(tmp_path):
    path = write(tmp_path, "dataset: arithmetic\nlearning_rate: " + "9" * 400 + "\n")
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    assert info.value.key == "learning_rate"


@pytest.mark.parametrize("seed, ok", [(0, True), (2**32 - 1, True), (2**32, False), (-1, False), (10**30, False)])
def test_seed_is_a_32_bit_number(seed, ok):
    if ok:
        assert profile_from_dict(valid(seed=seed), "<test>").seed == seed
    else:
        assert refused(valid(seed=seed)).key == "seed"


@pytest.mark.parametrize("pair", ["lora_rank=", "lora_rank=   ", "model="])
def test_an_empty_override_is_refused(pair):
    with pytest.raises(UsageError) as info:
        parse_overrides([pair])
    assert pair.split("=")[0] in str(info.value) and "empty" in str(info.value)


def test_report_to_is_checked():
    error = refused(valid(report_to="wandbb"))
    assert error.key == "report_to" and error.fix == "did you mean 'wandb'?"
    for tracker in ("none", "all", "tensorboard", "wandb", "mlflow", "trackio"):
        assert profile_from_dict(valid(report_to=tracker), "<test>").report_to == tracker


def test_report_to_choices_are_what_transformers_accepts():
    pytest.importorskip("transformers")
    from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK

    from profiles.keys import REPORT_TO

    assert set(REPORT_TO) == set(INTEGRATION_TO_CALLBACK) | {"none", "all"}


@pytest.mark.parametrize(
    "key, value",
    [
        ("load_in_4bit", 1),
        ("load_in_4bit", "yes"),
        ("load_in_4bit", "true"),
        ("lora_rank", 2.5),
        ("lora_rank", True),
        ("lora_rank", "16"),
        ("lora_dropout", True),
    ],
)
def test_types_are_strict(key, value):
    assert refused(valid(**{key: value})).key == key


def test_float_text_is_read_as_a_number():
    assert math.isclose(profile_from_dict(valid(learning_rate="5e-6"), "<test>").learning_rate, 5e-6)


@pytest.mark.parametrize("text", ["load_in_4bit: yes", "load_in_4bit: no", "load_in_4bit: On", "save_merged: off"])
def test_yaml_11_yes_and_no_are_not_read_as_booleans(tmp_path, text):
    path = write(tmp_path, f"dataset: arithmetic\n{text}\n")
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    assert info.value.key == text.split(":")[0] and "write true or false" in info.value.fix


def test_yes_in_an_override_is_not_read_as_true(tmp_path):
    path = write(tmp_path, "dataset: arithmetic\n")
    with pytest.raises(ProfileError) as info:
        load_profile(path, ["save_merged=yes"])
    assert info.value.key == "save_merged"
    assert load_profile(path, ["save_merged=true", "model='no'"]).save_merged is True


# ---------------------------------------------------------------------------------------------------
# Whatever a YAML file can hold, the answer is a profile or a ProfileError, never a crash

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=10**300, max_value=10**500),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(KEYS), _VALUES, max_size=4))
def test_any_values_give_a_profile_or_a_profile_error(keys):
    try:
        profile_from_dict(valid(**keys), "<fuzz>")
    except ProfileError as error:
        assert error.key is None or error.key in KEYS or error.key in str(keys), error


def test_target_modules_of_a_known_model_are_its_linear_layers():
    from profiles.load import load_profile

    shipped = sorted((REPO / "profiles").glob("*.yaml"))
    for path in shipped:  # every shipped profile names real layers
        load_profile(path)
    with pytest.raises(ProfileError, match=r"'v_prj' is not a linear layer of tiny .*did you mean 'v_proj'"):
        load_profile(REPO / "profiles" / "cpu-tiny-4gen.yaml", ["target_modules=[q_proj,v_prj]"])
    with pytest.raises(ProfileError, match="are not linear layers of unsloth/gemma-3-1b-it"):
        load_profile(REPO / "profiles" / "gpu-16gb-gemma3-1b.yaml", ["target_modules=[c_attn,c_proj]"])
    # a model the catalogue does not know offline keeps its own names (read from its config at load)
    other = load_profile(REPO / "profiles" / "gpu-16gb-gemma3-1b.yaml", ["model=gpt2", "target_modules=[c_attn]"])
    assert other.target_modules == ["c_attn"]
