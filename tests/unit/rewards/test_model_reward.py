"""A reward model (`rewards: {model:FOLDER: w}`, rewards.model) on the offline tiny one: scores as TRL builds them
for text and chat prompts, the same in batches as one by one, loaded once per process, 0.0 for what it cannot read,
and the profile's entry checked before anything loads."""

from __future__ import annotations

import pytest

from contract.errors import ProfileError
from profiles.load import load_profile
from rewards import get_reward, get_reward_funcs
from rewards import model as reward_model
from support.cli import REPO
from tiny_model.reward_model import ensure_tiny_reward_model

CPU = REPO / "profiles" / "cpu-tiny-8gen.yaml"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return ensure_tiny_reward_model(seed=0, root=tmp_path_factory.mktemp("rm-cache"))


@pytest.fixture(scope="module")
def reward(folder):
    return get_reward(f"model:{folder}")


def chat(text: str, role: str = "user") -> list[dict]:
    return [{"role": role, "content": text}]


def test_text_prompts_score_prompt_plus_completion_and_the_reward_is_named_after_the_model(reward, folder):
    prompts = ["What is 2 plus 3?", "What is 2 plus 3?", "What is 7 plus 1?"]
    completions = ["<answer>\n5\n</answer>", "6", "<answer>\n8\n</answer>"]
    scores = reward(prompts=prompts, completions=completions, answer=["5", "5", "8"])
    assert len(scores) == 3 and all(isinstance(s, float) for s in scores)
    assert len(set(scores)) == 3  # random weights, yet each text its own score
    # TRL's text: prompt + completion, so a prompt moved into the completion scores the same
    joined = reward(prompts=[""], completions=[prompts[0] + completions[0]])
    assert joined[0] == pytest.approx(scores[0], abs=1e-5)
    assert reward.__name__ == folder.name


def test_chat_prompts_score_the_chat_template_over_prompt_and_completion(reward, folder):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    prompts = [chat("What is 4 plus 4?"), chat("What is 1 plus 9?")]
    completions = [chat("<answer>\n8\n</answer>", "assistant"), chat("ten", "assistant")]
    scores = reward(prompts=prompts, completions=completions)
    rendered = [tokenizer.apply_chat_template(p + c, tokenize=False) for p, c in zip(prompts, completions)]
    assert "<|assistant|>" in rendered[0]
    assert scores == pytest.approx(reward(prompts=["", ""], completions=rendered), abs=1e-5)
    assert scores[0] != scores[1]


def test_a_batch_scores_as_one_by_one(reward):
    # more than one pass (BATCH_SIZE) and lengths that differ, so that padding and batch edges are both crossed
    count = reward_model.BATCH_SIZE + 5
    prompts = [f"What is {i} plus {i + 2}?" for i in range(count)]
    completions = [
        f"<reasoning>\n{'and ' * (i % 7)}{i}\n</reasoning>\n<answer>\n{2 * i + 2}\n</answer>" for i in range(count)
    ]
    together = reward(prompts=prompts, completions=completions)
    alone = [reward(prompts=[p], completions=[c])[0] for p, c in zip(prompts, completions)]
    assert together == pytest.approx(alone, abs=1e-4)


def test_the_model_loads_once_per_process(reward, folder):
    before = reward_model.loads
    again = get_reward(f"model:{folder}")
    funcs, weights = get_reward_funcs({"accuracy": 1.0, f"model:{folder}": 0.5})
    assert reward_model.loads == before
    assert again.__name__ == reward.__name__ and funcs[1].__name__ == reward.__name__ and weights == [1.0, 0.5]


def test_what_it_cannot_read_scores_zero(reward):
    completions = [None, 42, chat(None, "assistant"), [{"no": "content"}], "", "<answer>\n3\n</answer>"]
    prompts = ["1 plus 2?", "1 plus 2?", chat("1 plus 2?"), chat("1 plus 2?"), "", chat("mixed")]
    assert reward(prompts=prompts, completions=completions) == [0.0] * 6
    assert reward(prompts=[], completions=[]) == []
    # no prompts at all: the completion alone is scored
    assert reward(completions=["3"])[0] == pytest.approx(reward(prompts=[""], completions=["3"])[0], abs=1e-6)


def test_a_model_that_cannot_load_fails_at_load_naming_the_entry_and_the_fix(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(reward_model.RewardModelError) as found:
        get_reward(f"model:{tmp_path / 'empty'}")
    assert f"model:{tmp_path / 'empty'}" in str(found.value) and "fix:" in str(found.value)
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text("{}")
    with pytest.raises(reward_model.RewardModelError) as found:
        get_reward(f"model:{tmp_path / 'broken'}")
    assert "broken" in str(found.value) and "save_pretrained" in str(found.value)
    with pytest.raises(reward_model.RewardModelError) as found:  # a hub id: the local cache only, no download
        get_reward("model:no-such-org/no-such-reward-model")
    assert "huggingface-cli download no-such-org/no-such-reward-model" in str(found.value)


def test_the_profile_takes_a_folder_made_absolute_or_a_hub_id(folder, monkeypatch):
    monkeypatch.chdir(folder.parent)
    profile = load_profile(CPU, [f"rewards={{accuracy: 1.0, model:{folder.name}: 0.5}}"])
    assert profile.rewards == {"accuracy": 1.0, f"model:{folder}": 0.5}
    profile = load_profile(CPU, ["rewards={accuracy: 1.0, model:OpenAssistant/reward-model-deberta-v3-base: 0.5}"])
    assert "model:OpenAssistant/reward-model-deberta-v3-base" in profile.rewards


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        ("model:/no/such/reward-model", "no folder /no/such/reward-model"),
        ("model:", "names no model"),
    ],
)
def test_the_profile_refuses_a_missing_folder_with_the_fix(entry, reason):
    with pytest.raises(ProfileError) as found:
        load_profile(CPU, [f"rewards={{accuracy: 1.0, '{entry}': 0.5}}"])
    assert found.value.key == "rewards" and reason in found.value.reason
    assert "model:FOLDER" in (found.value.fix or "") and "save_pretrained" in (found.value.fix or "")


def test_the_profile_refuses_a_folder_without_a_config_and_a_model_as_correctness(tmp_path):
    with pytest.raises(ProfileError) as found:
        load_profile(CPU, [f"rewards={{accuracy: 1.0, 'model:{tmp_path}': 0.5}}"])
    assert "holds no config.json" in found.value.reason and found.value.fix
    with pytest.raises(ProfileError) as found:
        load_profile(CPU, [f"correctness=model:{tmp_path}"])
    assert found.value.key == "correctness" and "accuracy" in (found.value.fix or "")


def test_two_reward_models_of_one_name_are_refused(tmp_path):
    from contract.errors import ProfileError
    from profiles.load import load_profile
    from support.cli import REPO

    for parent in ("a", "b"):
        (tmp_path / parent / "rm").mkdir(parents=True)
        (tmp_path / parent / "rm" / "config.json").write_text("{}")
    sets = [f'rewards={{accuracy: 1.0, "model:{tmp_path / "a" / "rm"}": 0.5, "model:{tmp_path / "b" / "rm"}": 0.5}}']
    with pytest.raises(ProfileError, match="would both be logged as rewards/rm"):
        load_profile(REPO / "profiles" / "cpu-tiny-8gen.yaml", sets)
