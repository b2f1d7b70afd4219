"""`export`: the tiny model's adapter merged at 16 bits on CPU, loaded back by transformers and answering as the
adapter did; GGUF through llama.cpp's converter where it is present (`make llama-cpp`), read back with the
`gguf` package: tensor names, shapes and quantisation type. Where the converter is absent, the command says so
and how to get it, before any heavy work."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from commands import main
from contract.environment import ENV_LLAMA_CPP
from support.cli import cpu_run_env, train_py
from trainer import export

REPO = Path(__file__).resolve().parents[2]
SMALL = REPO / "profiles" / "cpu-tiny-4gen.yaml"


def test_a_4bit_base_is_merged_into_its_16bit_repository():
    assert export.sixteen_bit_base("unsloth/Llama-3.2-3B-Instruct-bnb-4bit") == "unsloth/Llama-3.2-3B-Instruct"
    assert export.sixteen_bit_base("unsloth/gemma-3-1b-it-unsloth-bnb-4bit") == "unsloth/gemma-3-1b-it"
    assert export.sixteen_bit_base("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"


def test_the_converter_is_found_where_it_is_put(tmp_path, monkeypatch):
    monkeypatch.setattr(export, "LLAMA_CPP_PLACES", ())
    (tmp_path / export.CONVERTER).write_text("# stand-in\n")
    assert export.find_converter({ENV_LLAMA_CPP: str(tmp_path), "PATH": ""}) == (
        tmp_path / export.CONVERTER,
        f"${ENV_LLAMA_CPP}",
    )
    missing, looked = export.find_converter({ENV_LLAMA_CPP: str(tmp_path / "nowhere"), "PATH": ""})
    assert missing is None and "nowhere" in looked


def test_gguf_without_the_converter_says_how_to_get_it_before_loading_anything(tmp_path, monkeypatch, capsys):
    attempt = tmp_path / "attempt-01-cpu-tiny-4gen"
    (attempt / "adapter").mkdir(parents=True)
    (attempt / "adapter" / "adapter_config.json").write_text("{}")
    (attempt / "profile.yaml").write_text(SMALL.read_text())
    monkeypatch.setattr(export, "LLAMA_CPP_PLACES", ())
    monkeypatch.setenv(ENV_LLAMA_CPP, str(tmp_path / "no-llama"))
    monkeypatch.setenv("PATH", "/nonexistent")
    assert main(["export", str(attempt), "--gguf", "q8_0"]) == 2
    error = capsys.readouterr().err
    assert "convert_hf_to_gguf.py is not on this machine" in error and "make llama-cpp" in error
    assert not (attempt / "export").exists()


@pytest.mark.parametrize("command", ["export", "sample"])
def test_a_folder_that_holds_no_adapter_is_named_without_another_commands_name(tmp_path, capsys, command):
    # export and sample find their folder the same way; the refusal names the folder, not one of the two
    for given, says in ((tmp_path / "missing", "no such folder"), (tmp_path, "no attempt there finished")):
        assert main([command, str(given)]) == 2
        error = capsys.readouterr().err
        assert f"{given}: {says}" in error and "sample" not in error.replace(str(tmp_path), "")


def converter() -> Path | None:
    found, _ = export.find_converter()
    return found


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_cache):
    env = cpu_run_env(tiny_cache)
    attempt = tmp_path_factory.mktemp("export") / "attempt-01-cpu-tiny-4gen"
    result = train_py(
        "--profile",
        str(SMALL),
        "--attempt-dir",
        str(attempt),
        "--set",
        "max_steps=2",
        "--set",
        "save_steps=2",
        "--set",
        "eval_samples=0",
        "--set",
        "train_samples=32",
        env=env,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (attempt / "profile.yaml").write_text(SMALL.read_text())  # as the supervisor leaves it
    return attempt, env


def test_the_merged_model_loads_in_transformers_and_answers_as_the_adapter_did(trained):
    attempt, env = trained
    result = train_py("export", str(attempt), "--check", "6", "--json", env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    record = json.loads((attempt / "export" / "export.json").read_text())
    merged = record["merged"]
    assert merged["dtype"] == "float16" and merged["device"] == "cpu"
    assert merged["adapter"] == str(attempt / "adapter")
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(merged["folder"])
    assert config.model_type == "llama" and str(config.dtype).endswith("float16")
    assert not (Path(merged["folder"]) / "adapter_config.json").exists()  # a plain model, no PEFT needed
    check = record["check"]
    assert check["total"] == 6 and check["same"] == 6, list(zip(check["adapter"], check["merged"]))


def test_gguf_reads_back_with_the_gguf_package(trained, tmp_path):
    gguf = pytest.importorskip("gguf")
    found = converter()
    if found is None:
        pytest.skip("llama.cpp's converter is not here (make llama-cpp puts it in .llama.cpp/)")
    attempt, env = trained
    out = tmp_path / "out"
    result = train_py(
        "export",
        str(attempt),
        "--out",
        str(out),
        "--gguf",
        "q8_0",
        "--gguf-pre-tokenizer",
        "default",
        env=env,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    path = out / "cpu-tiny-4gen-Q8_0.gguf"
    reader = gguf.GGUFReader(str(path))
    tensors = {t.name: t for t in reader.tensors}
    # the tiny model: Llama-shaped, 2 layers, hidden 64, 504 tokens, tied embeddings
    assert tensors["token_embd.weight"].tensor_type == gguf.GGMLQuantizationType.Q8_0
    assert [int(n) for n in tensors["token_embd.weight"].shape] == [64, 504]
    assert [int(n) for n in tensors["blk.1.ffn_down.weight"].shape] == [256, 64]
    assert tensors["blk.0.attn_norm.weight"].tensor_type == gguf.GGMLQuantizationType.F32
    assert {f"blk.{i}.attn_q.weight" for i in (0, 1)} <= set(tensors)
    arch = reader.fields["general.architecture"]
    assert bytes(arch.parts[arch.data[0]]).decode() == "llama"
    record = json.loads((out / "export.json").read_text())
    assert record["gguf"]["header"]["architecture"] == "llama"
    assert record["gguf"]["header"]["tensors"] == len(reader.tensors)
    assert record["gguf"]["pre_tokenizer"] == "default" and record["gguf"]["notes"]
