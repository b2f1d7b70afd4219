"""A recipe trains what it says, or is refused naming the key and the fix: `push_to_hub: false` wins over
hub_model_id, `num_train_epochs` is never dropped unseen, rewards of one name keep every weight, an empty key
or `--set KEY=null` never turns into the schema's default, `--set` of a foreign key reads the file it changes,
CISPO's weight cap is never below 1, and the loss settings TRL would ignore or misread are refused."""

from __future__ import annotations

import pytest

from contract.errors import ProfileError
from profiles.load import load_profile
from support.profile_data import write

# A small CPU recipe in TRL's names, with a hub repository to push to
RECIPE = """\
model_name_or_path: tiny
use_cpu: true
use_vllm: false
load_in_4bit: false
optim: adamw_torch
dataset_name: arithmetic
max_steps: 40
learning_rate: 5.0e-4
"""


def refused(path, overrides=()) -> ProfileError:
    with pytest.raises(ProfileError) as info:
        load_profile(path, overrides)
    return info.value


# ---------------------------------------------------------------------------------------------------
# push_to_hub: false is the user's "do not publish"


def test_push_to_hub_false_wins_over_a_hub_repository(tmp_path):
    profile = load_profile(write(tmp_path, RECIPE + "hub_model_id: me/tiny\npush_to_hub: false\n"))
    assert profile.hub_model_id == ""
    reading = next(r for r in profile.readings if r.key == "push_to_hub")
    assert "me/tiny" in reading.note and "nothing is pushed" in reading.note


def test_push_to_hub_false_in_a_set_stops_the_files_push(tmp_path):
    profile = load_profile(write(tmp_path, RECIPE + "hub_model_id: me/tiny\n"), ["push_to_hub=false"])
    assert profile.hub_model_id == ""


def test_push_to_hub_true_without_a_repository_pushes_where_trl_would(tmp_path):
    profile = load_profile(write(tmp_path, RECIPE + "push_to_hub: true\noutput_dir: data/tiny-grpo\n"))
    assert profile.hub_model_id == "tiny-grpo"  # TRL names the repository after the output folder
    reading = next(r for r in profile.readings if r.key == "push_to_hub")
    assert "output_dir" in reading.note and "HF_TOKEN" in reading.note


def test_a_bare_hub_repository_name_is_taken_as_trl_takes_it(tmp_path):
    profile = load_profile(write(tmp_path, RECIPE + "hub_model_id: Qwen2.5-1.5B-Open-R1-GRPO\npush_to_hub: true\n"))
    assert profile.hub_model_id == "Qwen2.5-1.5B-Open-R1-GRPO"
    reading = next(r for r in profile.readings if r.key == "push_to_hub")
    assert "account of HF_TOKEN" in reading.note


def test_push_to_hub_true_with_a_repository_pushes_there(tmp_path):
    profile = load_profile(write(tmp_path, RECIPE + "hub_model_id: me/tiny\npush_to_hub: true\n"))
    assert profile.hub_model_id == "me/tiny"


# ---------------------------------------------------------------------------------------------------
# num_train_epochs and reward_funcs


def test_epochs_without_max_steps_are_the_runs_length_not_250_steps(tmp_path):
    profile = load_profile(write(tmp_path, RECIPE.replace("max_steps: 40\n", "") + "num_train_epochs: 3\n"))
    assert profile.num_train_epochs == 3 and not profile.max_steps  # max_steps auto: the plan runs 3 epochs


def test_epochs_beside_max_steps_are_read_as_trl_reads_them(tmp_path):
    profile = load_profile(write(tmp_path, RECIPE + "num_train_epochs: 3\n"))
    assert profile.max_steps == 40 and profile.num_train_epochs == 3  # max_steps wins, as in TRL


def test_epochs_in_a_set_alone_on_a_file_that_pins_max_steps_are_refused(tmp_path):
    error = refused(write(tmp_path, RECIPE), ["num_train_epochs=2"])
    assert error.key == "num_train_epochs" and "max_steps=auto" in str(error)
    profile = load_profile(write(tmp_path, RECIPE), ["num_train_epochs=2", "max_steps=auto"])
    assert profile.num_train_epochs == 2 and not profile.max_steps


@pytest.mark.parametrize(
    "funcs, weights, expected",
    [
        ("[format, xml_strict]", "[2, 1]", {"xml_strict": 3.0}),
        ("[accuracy, accuracy]", "[2, 1]", {"math": 3.0}),
        ("[accuracy, format, accuracy]", None, {"math": 2.0, "xml_strict": 1.0}),
    ],
)
def test_rewards_of_one_name_keep_every_weight(tmp_path, funcs, weights, expected):
    text = RECIPE + f"reward_funcs: {funcs}\n" + (f"reward_weights: {weights}\n" if weights else "")
    profile = load_profile(write(tmp_path, text))
    assert profile.rewards == expected
    reading = next(r for r in profile.readings if r.key == "reward_funcs")
    assert "summed" in reading.note


# ---------------------------------------------------------------------------------------------------
# Empty and null values


@pytest.mark.parametrize("line, key", [("lora_r:\n", "lora_r"), ("model_name_or_path:\n", "model_name_or_path")])
def test_a_foreign_key_left_empty_is_refused(tmp_path, line, key):
    text = RECIPE.replace("model_name_or_path: tiny\n", "") if key == "model_name_or_path" else RECIPE
    error = refused(write(tmp_path, text + line))
    assert error.key == key and "empty value" in str(error)


@pytest.mark.parametrize("key", ["learning_rate", "max_steps", "lora_rank", "lora_r"])
def test_set_null_is_refused_instead_of_meaning_the_default(tmp_path, key):
    error = refused(write(tmp_path, RECIPE), [f"{key}=null"])
    assert error.key == key and "null" in str(error) and "leave the --set out" in str(error)


def test_set_null_of_a_key_whose_default_is_off_means_off(tmp_path):
    profile = load_profile(write(tmp_path, RECIPE + "min_p: 0.1\nhub_model_id: me/tiny\n"), ["min_p=null"])
    assert profile.min_p is None
    assert load_profile(write(tmp_path, RECIPE + "hub_model_id: me/tiny\n"), ["hub_model_id=~"]).hub_model_id == ""


# ---------------------------------------------------------------------------------------------------
# --set of a foreign key reads the file it changes


def test_set_warmup_steps_reads_the_files_max_steps(tmp_path):
    profile = load_profile(write(tmp_path, RECIPE), ["warmup_steps=10"])
    assert profile.warmup_ratio == pytest.approx(10 / 40)


def test_set_warmup_steps_with_max_steps_in_the_same_set(tmp_path):
    profile = load_profile(write(tmp_path, RECIPE), ["max_steps=100", "warmup_steps=10"])
    assert profile.warmup_ratio == pytest.approx(0.1)


def test_set_reward_weights_reads_the_files_reward_funcs(tmp_path):
    path = write(tmp_path, RECIPE + "reward_funcs: [accuracy, xml_count]\n")
    assert load_profile(path, ["reward_weights=[2, 0.5]"]).rewards == {"math": 2.0, "xml_count": 0.5}


def test_set_reward_weights_on_a_file_without_reward_funcs_says_how(tmp_path):
    error = refused(write(tmp_path, RECIPE), ["reward_weights=[2, 0.5]"])
    assert error.key == "reward_weights" and "rewards=" in str(error)


# ---------------------------------------------------------------------------------------------------
# The loss settings


def test_cispo_without_a_cap_takes_trls_recommended_one(tmp_path):
    profile = load_profile(write(tmp_path, RECIPE + "loss_type: cispo\n"))
    assert profile.epsilon_high == 5.0


@pytest.mark.parametrize("cap", ["0.05", "0.2", "0.9"])
def test_cispo_with_a_cap_below_one_is_refused(tmp_path, cap):
    error = refused(write(tmp_path, RECIPE + f"loss_type: cispo\nepsilon_high: {cap}\n"))
    assert error.key == "epsilon_high" and "below 1" in str(error)


@pytest.mark.parametrize("loss", ["sapo", "vespo"])
def test_epsilon_high_with_a_loss_that_ignores_it_is_refused(tmp_path, loss):
    error = refused(write(tmp_path, RECIPE + f"loss_type: {loss}\nepsilon_high: 0.28\n"))
    assert error.key == "epsilon_high" and loss in str(error)


def test_loss_type_in_capitals_is_read_as_its_name(tmp_path):
    assert load_profile(write(tmp_path, RECIPE + "loss_type: GRPO\n")).loss_type == "grpo"


@pytest.mark.parametrize("setting, key", [("repetition_penalty=1e-9", "repetition_penalty"), ("beta=1e308", "beta")])
def test_absurd_sampling_and_kl_values_are_refused(tmp_path, setting, key):
    assert refused(write(tmp_path, RECIPE), [setting]).key == key


def test_eval_steps_past_max_steps_is_refused_before_anything_loads(tmp_path):
    error = refused(write(tmp_path, RECIPE), ["eval_steps=50"])
    assert error.key == "eval_steps" and "max_steps" in str(error)
