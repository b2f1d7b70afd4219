"""Command lines typed carelessly get a clear result or exit 2 naming the argument and the fix: an empty
--profile, old spellings that mixed a plan with a run's options, options before the command, `help COMMAND`,
a reader that stops early, a GPU profile trained on a machine without one, `profiles copy` and `profiles list`
as people type them; every command the tool prints for pasting has its paths quoted."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from commands import main
from launcher.card.detect import detect_machine
from profiles.load import load_profile, load_profiles
from support.cli import start_train_py
from support.waiting import finish, wait_until

REPO = Path(__file__).resolve().parents[2]
GPU_RUNG = "gpu-24gb-llama3.1-8b"


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("command", ["train", "plan", "calibrate"])
def test_an_empty_profile_is_refused_not_read_as_the_ladder(command, capsys, tmp_path):
    argv = [command, "--profile", ""] + (["--output-dir", str(tmp_path / "out")] if command != "plan" else [])
    code, out, err = run(argv, capsys)
    assert code == 2 and "--profile" in err and "empty" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "old",
    [
        "--auto --dry-run --output-dir {out}",
        "--dry-run --resume",
        "--resume --fresh-attempt --dry-run",
        "--resume --dry-run --json",
    ],
)
def test_old_plan_spellings_with_a_runs_options_still_plan(old, capsys, tmp_path):
    expected_code, expected, _ = run(["plan", "--json"], capsys)
    argv = old.format(out=tmp_path / "out").split()
    code, out, err = run(argv + ([] if "--json" in argv else ["--json"]), capsys)
    assert code == expected_code and json.loads(out)["chosen"] == json.loads(expected)["chosen"], err
    assert not (tmp_path / "out").exists()  # a plan writes nothing


@pytest.mark.parametrize("argv", [["--json", "plan"], ["--ignore-ledger", "--json", "plan"]])
def test_options_before_the_command_are_the_commands(argv, capsys):
    code, out, _ = run(argv, capsys)
    assert code in (0, 3) and "candidates" in json.loads(out)


@pytest.mark.parametrize("argv", [["-h", "plan"], ["help", "plan"], ["--help", "plan"]])
def test_help_before_a_command_is_that_commands_help(argv, capsys):
    code, out, _ = run(argv, capsys)
    assert code == 0 and out.startswith("usage: train.py plan")


def test_a_reader_that_stops_early_ends_no_traceback(tmp_path):
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first line, as `| head -0`
    proc = start_train_py(
        "ledger",
        "--json",
        env={**os.environ, "GRPO_TRAIN_LEDGER": str(tmp_path / "ledger.jsonl")},
        stdout=write_end,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _, stderr = finish(proc)
    finally:
        os.close(write_end)
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr
    assert proc.returncode == 0


def test_a_gpu_profile_trained_without_a_gpu_is_bad_input(capsys, tmp_path):
    if detect_machine().gpus:
        pytest.skip("this machine has a GPU")
    code, _, err = run(["train", "--profile", f"profiles/{GPU_RUNG}.yaml", "--output-dir", str(tmp_path)], capsys)
    assert code == 2 and "GPU" in err and "cpu" in err
    assert not any(tmp_path.glob("run-*"))


# ---------------------------------------------------------------------------------------------------
# profiles copy and list


def test_a_copy_takes_the_name_of_its_file_and_joins_the_ladder_beside_its_source(tmp_path, capsys):
    folder = tmp_path / "ladder"
    folder.mkdir()
    assert main(["profiles", "copy", GPU_RUNG, str(folder)]) == 0  # the rung itself, as shipped
    assert main(["profiles", "copy", GPU_RUNG, str(folder / "mine.yaml")]) == 0
    assert load_profile(folder / "mine.yaml").name == "mine"
    assert sorted(p.name for p in load_profiles(folder)) == sorted([GPU_RUNG, "mine"])


def test_profiles_list_takes_its_folder_after_the_action(tmp_path, capsys):
    code, out, err = run(["profiles", "list", "--profiles-dir", str(REPO / "profiles"), "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["folder"] == str(REPO / "profiles")


# ---------------------------------------------------------------------------------------------------
# Printed commands quote their paths


def pasted(text: str, command_start: str) -> list[str]:
    """The words of the first `...` command in `text` that starts with command_start, as a shell reads them."""
    start = text.index("`" + command_start) + 1
    return shlex.split(text[start : text.index("`", start)])


def test_a_copied_profiles_suggested_commands_quote_its_path(tmp_path, capsys):
    dest = tmp_path / "$(touch pwned) it's.yaml"
    code, out, _ = run(["profiles", "copy", "cpu-tiny-4gen", str(dest)], capsys)
    assert code == 0
    assert pasted(out, "python train.py profiles check") == ["python", "train.py", "profiles", "check", str(dest)]
    assert pasted(out, "python train.py train")[-1] == str(dest)


def test_the_chown_fix_quotes_the_folder(tmp_path):
    from contract.failure import NO_PERMISSION, write_fix

    folder = tmp_path / "my $(rm -rf) runs"
    words = pasted(write_fix(NO_PERMISSION, folder), "sudo chown")
    assert words[-1] == str(folder) and words[:3] == ["sudo", "chown", "-R"]


@pytest.mark.parametrize(
    "argv, option",
    [
        (["profiles", "copy", "cpu-tiny-4gen", "/proc/x.yaml"], "destination"),
        (["gpu-check", "--out-dir", "/proc/no-such"], "--out-dir"),
    ],
)
def test_a_place_that_refuses_a_write_is_not_called_a_full_disk(argv, option, capsys):
    # /proc is no disk: the fix names where the command takes its folder, and says nothing of free space
    code, _, err = run(argv, capsys)
    assert code == 2 and f"(fix: choose a writable {option})" in err.replace("\n", " ")
    assert "free disk space" not in err and "--output-dir" not in err


def test_a_full_disk_is_still_called_one():
    import errno

    from contract.failure import DISK_FULL, write_failure_text, write_fix

    assert "free disk space" in write_fix(DISK_FULL, Path("/out"))
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/out/adapter")
    assert "free disk space" in write_failure_text(full, Path("/out"))
    # a writer's words without an errno (torch's, on a nearly full disk) are read as a full disk, as before
    assert "free disk space" in write_failure_text(RuntimeError("PytorchStreamWriter failed writing file"), Path("/"))


def test_the_interrupted_runs_resume_command_quotes_the_run(tmp_path, monkeypatch):
    import io
    import signal
    import threading

    from rich.console import Console

    from launcher.card.detect import Machine
    from launcher.plan.choose import make_plan
    from launcher.plan.request import PlanRequest
    from launcher.run.request import RunRequest
    from launcher.run.supervise import supervise
    from profiles.load import profile_from_dict
    from support.fake_runs import CPU_SETTINGS, FAKE_CHILD

    settings = dict(CPU_SETTINGS, name="a", max_steps=4, save_steps=2, eval_samples=0, num_generations=4)
    settings.update(max_completion_length=64, per_device_train_batch_size=4, gradient_accumulation_steps=1)
    machine = Machine([], "no GPU", host_ram_gib=24.0, host_free_gib=20.0)
    plan = make_plan(PlanRequest([profile_from_dict(settings, "<test>")], machine))
    monkeypatch.setenv("FAKE_CHILD_PLAN", json.dumps({"a": {"do": "wait_signal", "at_step": 2}}))
    out = tmp_path / "my $(echo) runs"

    def interrupt_when_the_attempt_waits():
        # the fake attempt writes `ready` once it waits for the signal
        wait_until(
            lambda: bool(list(out.glob("run-*/attempt-*/ready"))), watch=[tmp_path], what="the attempt's `ready`"
        )
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_when_the_attempt_waits, daemon=True).start()
    text = io.StringIO()
    code = supervise(plan, RunRequest(out), child_command=FAKE_CHILD, console=Console(file=text, width=400))
    assert code == 130
    run_dir = next(out.glob("run-*"))
    assert pasted(text.getvalue(), "python train.py train --resume")[-1] == str(run_dir)


SERVER_RUNGS = {"multi-2x24gb-llama3.1-8b", "multi-4x80gb-qwen2.5-14b", "multi-8x80gb-qwen2.5-14b"}


def test_a_set_that_some_rungs_refuse_leaves_them_out_and_says_so_and_plans_the_rest(capsys):
    # vLLM off: the rungs that serve vLLM from a node of their own cannot take it, every other rung can
    code, out, err = run(
        [
            "plan",
            "--gpu-memory",
            "80",
            "--gpu-name",
            "NVIDIA H100 80GB HBM3",
            "--set",
            "fast_inference=false",
            "--json",
        ],
        capsys,
    )
    assert code == 0, err
    plan = json.loads(out)
    left_out = [n for n in plan["notes"] if "left out of the ladder" in n]
    assert {name for name in SERVER_RUNGS if any(f"{name}.yaml" in n for n in left_out)} == SERVER_RUNGS
    assert all("key 'vllm_mode'" in n for n in left_out) and len(left_out) == len(SERVER_RUNGS)
    assert SERVER_RUNGS.isdisjoint(c["profile"] for c in plan["candidates"])
    assert plan["chosen"] and all(c["settings"]["fast_inference"] is False for c in plan["candidates"])


def test_a_set_every_rung_refuses_is_still_bad_input_and_the_loader_raises_unless_asked_to_leave_out():
    from contract.errors import ProfileError

    with pytest.raises(ProfileError, match="vllm_mode"):
        load_profiles(REPO / "profiles", ["fast_inference=false"], device="cuda")
    refused: list[str] = []
    kept = load_profiles(REPO / "profiles", ["fast_inference=false"], device="cuda", refused=refused)
    assert len(refused) == len(SERVER_RUNGS) and SERVER_RUNGS.isdisjoint(p.name for p in kept)
    everyone = ["fast_inference=false", "vllm_mode=server"]
    with pytest.raises(ProfileError, match="vllm_mode"):
        load_profiles(REPO / "profiles", everyone, device="cuda", refused=[])


def test_a_value_of_the_users_a_rung_refuses_is_still_bad_input_not_a_quiet_change_of_rung(capsys):
    # the CPU default's 8 generations cannot split 12 completions: that is the user's value, said with the fix,
    # not a reason to train the 4-generation rung instead
    code, out, err = run(["plan", "--set", "per_device_train_batch_size=12", "--json"], capsys)
    assert code == 2 and out == "" and "cpu-tiny-8gen.yaml" in err
    assert "key 'per_device_train_batch_size'" in err and "(fix: " in err
