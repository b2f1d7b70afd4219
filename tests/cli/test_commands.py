"""The command line: one command per purpose, and every documented old spelling (design.md, README, docs)
translated to one command that does the same thing, with the same exit status and output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from commands import COMMANDS, main, top_help
from commands.legacy import TABLE, translate

REPO = Path(__file__).resolve().parents[2]
CPU = "profiles/cpu-tiny-8gen.yaml"
GPU = "profiles/gpu-16gb-gemma3-1b.yaml"
OOM_TEXT = "tests/data/oom/torch_logits_gib.txt"

# Every documented spelling of the single-command interface, with the command it now is. `{file}` is a file
# (not a folder), `{missing}` a path that does not exist: training spellings are compared on a refusal that
# both forms give before anything starts.
SPELLINGS = [
    ("--auto --dry-run", "plan"),
    ("--auto --dry-run --json", "plan --json"),
    ("--dry-run", "plan"),
    ("--dry-run --json", "plan --json"),
    ("--auto --dry-run --gpu-memory 24", "plan --gpu-memory 24"),
    ("--auto --dry-run --gpu-memory 24 --json", "plan --gpu-memory 24 --json"),
    ("--auto --dry-run --gpu-memory 15 --gpu-name T4 --json", "plan --gpu-memory 15 --gpu-name T4 --json"),
    ("--auto --dry-run --gpu-memory 80 --gpus 8 --json", "plan --gpu-memory 80 --gpus 8 --json"),
    (
        "--dry-run --nodes 3 --gpus-per-node 8 --gpu-memory 80 --json",
        "plan --nodes 3 --gpus-per-node 8 --gpu-memory 80 --json",
    ),
    ("--auto --dry-run --ignore-ledger --json", "plan --ignore-ledger --json"),
    ("--auto --dry-run --set max_steps=2 --json", "plan --set max_steps=2 --json"),
    ("--auto --dry-run --profiles-dir profiles --json", "plan --profiles-dir profiles --json"),
    (f"--profile {GPU} --dry-run --json", f"plan --profile {GPU} --json"),
    (f"--profile {GPU} --dry-run --gpu-memory 16 --json", f"plan --profile {GPU} --gpu-memory 16 --json"),
    ("--resume --dry-run --json", "plan --json"),  # old: --resume --dry-run plans the ladder
    ("--fit-table", "cards"),
    ("--fit-table --json", "cards --json"),
    (
        "--fit --set model=Qwen/Qwen2.5-0.5B-Instruct --gpu-memory 24 --json",
        "fit Qwen/Qwen2.5-0.5B-Instruct --gpu-memory 24 --json",
    ),
    (
        "--fit --set model=meta-llama/Llama-3.2-1B-Instruct --set lora_rank=32 --gpu-memory 16",
        "fit meta-llama/Llama-3.2-1B-Instruct --set lora_rank=32 --gpu-memory 16",
    ),
    ("--ledger", "ledger"),
    ("--ledger --json", "ledger --json"),
    ("--forget nothing-of-that-name", "ledger --forget nothing-of-that-name"),
    ("--calibrate --dry-run", "calibrate --dry-run"),
    ("--calibrate --dry-run --json", "calibrate --dry-run --json"),
    ("--calibrate --random-weights --dry-run --json", "calibrate --random-weights --dry-run --json"),
    (f"--explain-oom {OOM_TEXT}", f"explain-oom {OOM_TEXT}"),
    ("--explain-oom {missing}", "explain-oom {missing}"),
    ("--sample {missing}", "sample {missing}"),
    ("--sample {missing} --prompt hi", "sample {missing} --prompt hi"),
    ("--sample {missing} --from-test 2", "sample {missing} --from-test 2"),
    ("--sample {missing} --run-rewards", "sample {missing} --run-rewards"),
    ("--auto --output-dir {file}", "train --output-dir {file}"),
    (f"--profile {CPU} --output-dir {{file}}", f"train --profile {CPU} --output-dir {{file}}"),
    (
        f"--profile {CPU} --set max_steps=2 --output-dir {{file}}",
        f"train --profile {CPU} --set max_steps=2 --output-dir {{file}}",
    ),
    ("--resume --output-dir {missing}", "train --resume --output-dir {missing}"),
    ("--resume --fresh-attempt --output-dir {missing}", "train --resume --fresh-attempt --output-dir {missing}"),
    ("--set max_steps=2 --output-dir {file}", "train --set max_steps=2 --output-dir {file}"),
    ("--auto --set max_steps=-5", "train --set max_steps=-5"),
    ("--fresh-attempt", "train --fresh-attempt"),
    ("--auto --gpu-memory nan", "train --gpu-memory nan"),
    ("--hours 2 --dry-run --json", "plan --hours 2 --json"),
    ("--hours=2 --output-dir {file}", "train --hours 2 --output-dir {file}"),
    ("--auto --hours 0 --output-dir {file}", "train --hours 0 --output-dir {file}"),
]

# Flags that ask for two commands: refused with exit 2, naming both (the old interface did one silently).
TWO_COMMANDS = [
    "--ledger --calibrate",
    "--auto --ledger",
    "--ledger --fit-table",
    "--calibrate --explain-oom x.txt",
    "--fit-table --auto",
    "--sample x --ledger",
    "--fit --set model=x --calibrate",
]


@pytest.fixture
def paths(tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    return {"file": str(a_file), "missing": str(tmp_path / "missing")}


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("old, new", SPELLINGS, ids=[old for old, _ in SPELLINGS])
def test_each_documented_spelling_does_what_its_command_does(old, new, paths, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("GRPO_TRAIN_LEDGER", str(tmp_path / "ledger.jsonl"))
    monkeypatch.setenv("COLUMNS", "200")
    from launcher.card import detect

    monkeypatch.setattr(detect, "host_memory_gib", lambda: (24.0, 20.0))  # RAM moves between two readings
    old_argv, new_argv = old.format(**paths).split(), new.format(**paths).split()
    assert translate(old_argv) == new_argv
    old_result, new_result = run(old_argv, capsys), run(new_argv, capsys)
    assert old_result[0] == new_result[0], (old_result, new_result)
    assert old_result[1] == new_result[1]
    assert old_result[2].replace(old, new) == new_result[2].replace(old, new) or old_result[2] == new_result[2]


def test_the_spellings_cover_every_old_flag():
    said = {token.partition("=")[0] for old, _ in SPELLINGS for token in old.split() if token.startswith("--")}
    missing = set(TABLE) - said - {"--help", "-h", "--attempt-dir", "--resume-from", "--output-dir"}
    assert not missing, f"old flags no spelling exercises: {sorted(missing)}"


@pytest.mark.parametrize("old", TWO_COMMANDS)
def test_flags_that_ask_for_two_commands_exit_2_naming_both(old, capsys):
    code, out, err = run(old.split(), capsys)
    assert code == 2 and out == ""
    first, second = [t for t in old.split() if t.startswith("--") and TABLE[t].command][:2]
    assert f"{first} asks for `{TABLE[first].command}`" in err and f"{second} for `{TABLE[second].command}`" in err


def test_a_flag_of_another_command_is_refused_not_ignored(capsys):
    code, _, err = run(["--fit-table", "--gpus", "2"], capsys)
    assert code == 2 and "--gpus" in err
    code, _, err = run(["--random-weights"], capsys)
    assert code == 2 and "--random-weights only applies to --calibrate (the `calibrate` command)" in err
    code, _, err = run(["--prompt", "hi"], capsys)
    assert code == 2 and "--prompt only applies to --sample (the `sample` command)" in err


def test_options_alone_mean_train(paths, capsys):
    assert translate(["--set", "max_steps=2"]) == ["train", "--set", "max_steps=2"]
    assert translate(["--profile", CPU]) == ["train", "--profile", CPU]
    code, _, err = run(["--set", "max_steps=2", "--output-dir", paths["file"]], capsys)
    assert code == 2 and "is a file, not a folder" in err
    # --hours, as every other option of train: alone, before the other options, or before the command
    assert translate(["--hours", "2"]) == ["train", "--hours", "2"]
    code, _, err = run(["--hours", "2", "--output-dir", paths["file"]], capsys)
    assert code == 2 and "is a file, not a folder" in err and "unknown flag" not in err
    code, out, _ = run(["--hours", "2", "plan", "--json"], capsys)
    assert code == 0 and {c["run"]["budget_hours"] for c in json.loads(out)["candidates"]} == {2.0}


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--hours"], "--hours needs a value"),
        (["--hours", "nan"], "--hours nan"),
        (["--hours", "-1"], "--hours -1"),
        (["--hours", "1e999"], "--hours 1e999"),
        (["--hours", "2", "--ledger"], "--hours"),  # the ledger has no budget: refused, not ignored
    ],
)
def test_hours_before_the_command_is_checked_as_the_commands_own(argv, words, capsys):
    code, out, err = run(argv, capsys)
    assert code == 2 and words in err and "Traceback" not in err, err


def test_the_top_help_is_one_screen_and_names_every_command(capsys):
    code, out, _ = run(["--help"], capsys)
    assert code == 0 and out == top_help()
    assert len(out.splitlines()) <= 30
    for name in COMMANDS:
        assert (f"  {name} " in out) == (name != "attempt"), name
    code, _, err = run([], capsys)
    assert code == 2 and "commands:" in err


@pytest.mark.parametrize("name", list(COMMANDS))
def test_each_command_help_shows_only_its_own_options(name, capsys):
    code, out, _ = run([name, "--help"], capsys)
    assert code == 0 and f"train.py {name}" in out
    assert "max_completion_length" not in out  # the profile keys live in `profiles keys`
    if name in ("ledger", "explain-oom", "sample", "cards", "profiles"):
        assert "--gpu-memory" not in out


def test_an_unknown_command_is_refused_with_a_suggestion(capsys):
    code, _, err = run(["plna"], capsys)
    assert code == 2 and "did you mean 'plan'" in err


def test_the_same_plan_through_every_entry(capsys, monkeypatch):
    """`python train.py plan` and `grpo-train plan` are one function; the JSON is the interface."""
    monkeypatch.chdir(REPO)
    code, out, _ = run(["plan", "--gpu-memory", "24", "--json"], capsys)
    data = json.loads(out)
    assert code == 0 and data["chosen"] and {"gpu", "candidates", "chosen"} <= set(data)
    import train

    assert train.main(["plan", "--gpu-memory", "24", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == data
