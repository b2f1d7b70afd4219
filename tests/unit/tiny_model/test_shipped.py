"""Are the shipped warm-start weights the ones a build of today's settings loads, the same bytes on every machine,
and refused (the warm start trained instead) when anything about them does not match?"""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest

from tiny_model import build as tiny
from tiny_model import shipped, warm_start

FIX = "fix: run `python -m tiny_model.build --ship` on an AVX-512 machine and commit tiny_model/shipped/"


@pytest.mark.parametrize("seed", shipped.SHIPPED_SEEDS)
def test_each_shipped_entry_answers_todays_build_of_its_seed(seed):
    entry = json.loads((shipped.FOLDER / f"{shipped.entry_name('arithmetic', seed)}.json").read_text())
    weights = shipped.FOLDER / f"{shipped.entry_name('arithmetic', seed)}.safetensors"
    key = tiny.build_key("arithmetic", seed, tiny.tiny_shape())
    assert entry["build_key"] == key, f"the build's settings changed since seed {seed}'s weights were shipped; {FIX}"
    assert hashlib.sha256(weights.read_bytes()).hexdigest() == entry["weights_sha256"], FIX
    tokenizer = tiny._build_tokenizer(tiny._corpus("arithmetic", seed), tiny.tiny_shape())
    assert entry["vocabulary_sha256"] == shipped.vocabulary_digest(tokenizer), FIX
    record = entry["record"]
    # what was shipped met the warm start's own criterion and leaves GRPO the sums to learn
    assert record["warm_start"]["accuracy"] <= 0.6 and record["random"]["accuracy"] <= 0.05
    assert record["held_out"] == warm_start.HELDOUT_ROWS


def _no_training(monkeypatch):
    trained = []
    monkeypatch.setattr(tiny, "_warm_start", lambda *args, **kwargs: trained.append(args[3]) or None)
    return trained


def test_a_build_of_the_cpu_default_loads_the_shipped_bytes_and_trains_nothing(tmp_path, monkeypatch):
    from safetensors.torch import load_file

    trained = _no_training(monkeypatch)
    seed = shipped.SHIPPED_SEEDS[0]
    folder = tiny.ensure_tiny("arithmetic", seed=seed, root=tmp_path)
    assert trained == []
    record = tiny.read_warm_start(folder)
    assert record["weights"] == "shipped" and tiny.build_record(folder)["weights"] == "shipped"
    built = load_file(str(folder / "model.safetensors"))
    original = load_file(str(shipped.FOLDER / f"{shipped.entry_name('arithmetic', seed)}.safetensors"))
    assert built.keys() == original.keys()
    for name, tensor in original.items():
        assert built[name].dtype == tensor.dtype and bool((built[name] == tensor).all()), name


@pytest.mark.parametrize("damage", ["bytes", "key", "vocabulary", "missing"])
def test_shipped_weights_that_do_not_match_are_passed_over_and_the_warm_start_trains(tmp_path, monkeypatch, damage):
    copy = tmp_path / "shipped"
    shutil.copytree(shipped.FOLDER, copy)
    monkeypatch.setattr(shipped, "FOLDER", copy)
    name = shipped.entry_name("arithmetic", shipped.SHIPPED_SEEDS[0])
    if damage == "bytes":
        data = bytearray((copy / f"{name}.safetensors").read_bytes())
        data[-1] ^= 0xFF
        (copy / f"{name}.safetensors").write_bytes(bytes(data))
    elif damage == "missing":
        (copy / f"{name}.safetensors").unlink()
    else:
        entry = json.loads((copy / f"{name}.json").read_text())
        entry["build_key" if damage == "key" else "vocabulary_sha256"] = "0" * 12
        (copy / f"{name}.json").write_text(json.dumps(entry))
    trained = _no_training(monkeypatch)
    tiny.ensure_tiny("arithmetic", seed=shipped.SHIPPED_SEEDS[0], root=tmp_path / "cache")
    assert trained == [shipped.SHIPPED_SEEDS[0]]


def test_a_seed_nothing_was_shipped_for_trains_its_own_warm_start(tmp_path, monkeypatch):
    trained = _no_training(monkeypatch)
    tiny.ensure_tiny("arithmetic", seed=17, root=tmp_path)
    assert trained == [17]
