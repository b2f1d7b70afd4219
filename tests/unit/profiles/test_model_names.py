"""Names the tool makes up (a derived profile from a model folder, a profile named by its file) are safe folder
names whatever the folder or file is called; a model whose every derivation is refused is a refusal, never a
silent fall back to the shipped rungs sized for other cards."""

from __future__ import annotations

from pathlib import Path

import pytest

from contract.errors import ProfileError, UsageError
from launcher.card.detect import detect_machine
from launcher.plan import derive
from profiles.keys import NAME_PATTERN, safe_name
from profiles.load import load_profile, load_profiles

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("modèle-été", "modele-ete"),
        ("Qwen2.5-7B-Instruct", "Qwen2.5-7B-Instruct"),
        ("my model (v2)", "my-model-v2"),
        (".hidden", "hidden"),
        ("模型", "profile"),
        ("a" * 100, "a" * 64),
    ],
)
def test_safe_name_keeps_the_alphabet_of_names(text, expected):
    import re

    assert safe_name(text) == expected
    assert re.fullmatch(NAME_PATTERN, safe_name(text))


def test_a_profile_file_with_a_non_ascii_name_and_no_name_key_loads(tmp_path):
    text = (REPO / "profiles" / "cpu-tiny-4gen.yaml").read_text(encoding="utf-8")
    path = tmp_path / "modèle 2.yaml"
    path.write_text(
        "\n".join(line for line in text.splitlines() if not line.startswith("name:")) + "\n", encoding="utf-8"
    )
    assert load_profile(path).name == "modele-2"


def test_a_name_the_user_writes_is_still_checked(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("name: modèle\nmodel: tiny\ndevice: cpu\n", encoding="utf-8")
    with pytest.raises(ProfileError, match="key 'name'"):
        load_profile(path)


def test_every_derivation_refused_is_a_refusal_not_the_shipped_rungs(monkeypatch):
    machine = detect_machine(what_if_gib=16)
    profiles = load_profiles(REPO / "profiles", ["model=unsloth/Llama-3.2-1B-Instruct"], device="cuda")

    def refuse(rung, *args, **kwargs):
        raise ProfileError(rung.source, "name", "refused for the test", "the fix")

    monkeypatch.setattr(derive, "fit", refuse)
    with pytest.raises(UsageError, match="could derive no configuration.*refused for the test"):
        derive.derive_ladder(profiles, "unsloth/Llama-3.2-1B-Instruct", machine)
