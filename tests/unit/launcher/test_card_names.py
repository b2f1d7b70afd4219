"""A card named with --gpu-name is found however it is typed (rtx4090, full-width letters, without the vendor),
its memory is taken from the card table when --gpu-memory is left out, and a memory that disagrees with the
table is planned as asked but said; a name the table does not know still needs --gpu-memory."""

from __future__ import annotations

import json

import pytest

from commands import main
from launcher.card.facts import card_facts


@pytest.mark.parametrize("typed", ["rtx4090", "RTX4090", "ＲＴＸ　４０９０", "GeForce RTX 4090", "geforce-rtx-4090"])
def test_a_card_is_found_however_it_is_typed(typed):
    card = card_facts(typed)
    assert card is not None and card.name == "NVIDIA GeForce RTX 4090"


@pytest.mark.parametrize("typed, expected", [("h100", "NVIDIA H100 80GB HBM3"), ("a100 80gb", "NVIDIA A100-SXM4-80GB")])
def test_names_already_known_keep_their_card(typed, expected):
    assert card_facts(typed).name == expected


def plan(capsys, *argv) -> tuple[int, dict, str]:
    code = main(["plan", "--json", *argv])
    captured = capsys.readouterr()
    return code, json.loads(captured.out) if captured.out else {}, captured.err


def test_the_name_alone_takes_the_tables_memory(capsys):
    code, out, err = plan(capsys, "--gpu-name", "rtx4090")
    assert code in (0, 3), err
    assert out["gpu"]["total_gib"] == pytest.approx(23.99) and out["gpu"]["name"] == "rtx4090"
    assert any("NVIDIA GeForce RTX 4090" in note and "card table" in note for note in out["notes"])


def test_a_memory_that_disagrees_with_the_table_is_said(capsys):
    code, out, err = plan(capsys, "--gpu-name", "GeForce RTX 4090", "--gpu-memory", "80")
    assert out["gpu"]["total_gib"] == 80
    assert any("23.99 GiB" in note and "80 GiB" in note and "RTX 4090" in note for note in out["notes"])


def test_a_known_card_plans_at_its_own_speed(capsys):
    _, known, _ = plan(capsys, "--gpu-name", "rtx4090")
    _, named, _ = plan(capsys, "--gpu-name", "NVIDIA GeForce RTX 4090", "--gpu-memory", "23.99")
    assert known["chosen"] == named["chosen"]
    first = lambda p: next(c for c in p["candidates"] if c["profile"] == p["chosen"])  # noqa: E731
    assert first(known)["speed"]["step_s"] == pytest.approx(first(named)["speed"]["step_s"])


def test_an_unknown_name_alone_still_needs_the_memory(capsys):
    code, _, err = plan(capsys, "--gpu-name", "Mystery Card 9000")
    assert code == 2 and "--gpu-memory" in err and "card table" in err
