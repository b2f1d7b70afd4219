"""Bad input on the command line gets exit 2 and a message before anything starts, never a traceback:
conflicting modes, an --output-dir that cannot hold a run, --gpu-memory for a run on a machine without a GPU,
unknown names in GRPO_INJECT_OOM, bad training data; Ctrl-C at start exits 130; huge prompts are measured in
characters before any tokenizer sees them."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

import train
from contract.errors import EXIT_INTERRUPTED, UsageError
from launcher.card.detect import Machine, detect_machine
from launcher.plan.choose import make_plan
from launcher.plan.request import PlanRequest
from launcher.run.inputs import check_run_inputs
from profiles.load import load_profiles
from support.cli import start_train_py
from support.waiting import finish, process_tree_cpu_s

ROOT = Path(__file__).resolve().parents[2]
PROFILE = str(ROOT / "profiles" / "cpu-tiny-4gen.yaml")


def main(capsys, *argv: str) -> tuple[int, str]:
    code = train.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


# ---------------------------------------------------------------------------------------------------
# Modes that contradict each other


@pytest.mark.parametrize(
    "argv",
    [
        ["--auto", "--profile", PROFILE],
        ["--resume", "--profile", PROFILE],
        ["--explain-oom", "x.txt", "--auto"],
        ["--fit-table", "--auto"],
        ["--fit-table", "--resume"],
        ["--explain-oom", "-", "--dry-run"],
    ],
)
def test_conflicting_modes_are_refused(capsys, tmp_path, argv):
    code, text = main(capsys, *argv, "--output-dir", str(tmp_path / "out"))
    assert code == 2
    # contradictory flags of one command keep their old refusal; flags of two commands name both
    assert ("ask for two different things" in text or " for `" in text) and "Traceback" not in text
    assert not (tmp_path / "out").exists()


def test_fresh_attempt_needs_resume(capsys, tmp_path):
    code, text = main(capsys, "--auto", "--fresh-attempt", "--output-dir", str(tmp_path / "out"))
    assert code == 2 and "--fresh-attempt only applies to --resume" in text


# ---------------------------------------------------------------------------------------------------
# --output-dir (bug 6)


def test_output_dir_that_is_a_file(capsys, tmp_path):
    path = tmp_path / "a-file"
    path.write_text("x")
    code, text = main(capsys, "--auto", "--output-dir", str(path))
    assert code == 2 and f"--output-dir {path}: is a file" in text


def test_output_dir_under_a_file(capsys, tmp_path):
    (tmp_path / "a-file").write_text("x")
    code, text = main(capsys, "--auto", "--output-dir", str(tmp_path / "a-file" / "runs"))
    assert code == 2 and f"lies under {tmp_path / 'a-file'}, which is a file" in text


def test_output_dir_under_proc(capsys):
    code, text = main(capsys, "--auto", "--output-dir", "/proc/self/runs")
    assert code == 2 and "lies under /proc, a kernel file system" in text


def test_output_dir_on_a_read_only_mount(capsys, tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(folder)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs here ({done.stderr.strip() or done.returncode})")
    try:
        code, text = main(capsys, "--auto", "--output-dir", str(folder / "runs"))
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)
    assert code == 2 and f"{folder} is on a read-only mount" in text


def test_resume_into_a_missing_output_dir(capsys, tmp_path):
    code, text = main(capsys, "--resume", "--output-dir", str(tmp_path / "nothing-here"))
    assert code == 2 and "does not exist" in text


# ---------------------------------------------------------------------------------------------------
# What a run needs beyond its profiles


def test_gpu_memory_for_a_run_on_a_machine_without_a_gpu(capsys, tmp_path):
    if detect_machine().gpus:
        pytest.skip("this machine has a GPU")
    for argv in (["train"], ["--auto"]):  # the command, and the old flag it translates
        code, text = main(capsys, *argv, "--gpu-memory", "24", "--output-dir", str(tmp_path / "out"))
        assert code == 2
        assert "--gpu-memory 24: `train` trains on this machine, and it has no GPU" in text
        # the fix names the command that plans for that card, not a flag `train` refuses
        assert "`python train.py plan --gpu-memory 24`" in text and "--dry-run" not in text
        assert not (tmp_path / "out").exists()
    code, text = main(capsys, "plan", "--gpu-memory", "24")  # and that command does it
    assert code == 0 and "24" in text
    # a card named alone is a what-if card too: refused for train the same way
    code, text = main(capsys, "train", "--gpu-name", "rtx4090", "--output-dir", str(tmp_path / "out"))
    assert code == 2 and "--gpu-name rtx4090: `train` trains on this machine" in text
    assert "`python train.py plan --gpu-name rtx4090`" in text and not (tmp_path / "out").exists()


def test_inject_oom_names_are_checked_against_the_profiles(monkeypatch):
    profiles = load_profiles(ROOT / "profiles")
    plan = make_plan(PlanRequest(profiles, Machine(gpus=[], message="no GPU", host_ram_gib=24.0, host_free_gib=20.0)))
    monkeypatch.setenv("GRPO_INJECT_OOM", "cpu-tiny-8gen@2,cpu-tiny-4gen@probe,cpu-tiny-8gen")
    check_run_inputs(profiles, plan, gpu_memory=None, resume=True)  # the three forms are accepted
    monkeypatch.setenv("GRPO_INJECT_OOM", "cpu-tiny-8gen,cpu-tiny-9gen")
    with pytest.raises(UsageError, match=r"no profile named 'cpu-tiny-9gen' \(known: cpu-tiny-4gen, cpu-tiny-8gen"):
        check_run_inputs(profiles, plan, gpu_memory=None, resume=True)
    monkeypatch.setenv("GRPO_INJECT_OOM", "cpu-tiny-8gen@soon")
    with pytest.raises(UsageError, match="step 'soon' of 'cpu-tiny-8gen' is neither a whole number nor 'probe'"):
        check_run_inputs(profiles, plan, gpu_memory=None, resume=True)


@pytest.mark.parametrize(
    "content, says",
    [
        ("", "no"),
        ('{"question": "1+1?", "answer": "2"}\n{"question": "2+2?"\n', "line 2"),
        ('{"question": "1+1?"}\n' * 10, "answer"),
    ],
)
def test_bad_data_exits_2_before_a_run_folder_exists(capsys, tmp_path, monkeypatch, content, says):
    monkeypatch.delenv("GRPO_INJECT_OOM", raising=False)
    data = tmp_path / "data.jsonl"
    data.write_text(content)
    code, text = main(capsys, "--profile", PROFILE, "--set", f"dataset={data}", "--output-dir", str(tmp_path / "out"))
    assert code == 2, text
    assert str(data) in text and says in text and "Traceback" not in text
    assert not list((tmp_path / "out").glob("run-*"))


# ---------------------------------------------------------------------------------------------------
# Ctrl-C at start


MASKS = {
    "SigBlk": "blocked",
    "SigIgn": "ignored",
    "SigCgt": "caught",
    "SigPnd": "pending",
    "ShdPnd": "pending (process)",
}


def sigint_held(pid: int) -> dict[str, bool]:
    """SIGINT's place in process `pid`'s signal masks (/proc/PID/status), by MASKS' words; {} once it is gone."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return {}
    bit = 1 << (signal.SIGINT - 1)
    masks = {key: int(value, 16) for key, _, value in (line.partition(":\t") for line in lines) if key in MASKS}
    return {MASKS[key]: bool(masks[key] & bit) for key in MASKS if key in masks}


def signal_masks(pid: int) -> str:
    """SIGINT's place in process `pid`'s signal masks in words: blocked, ignored, caught, pending."""
    held = sigint_held(pid)
    return (
        "SIGINT " + ", ".join(f"{word} {'yes' if on else 'no'}" for word, on in held.items())
        if held
        else "masks unread"
    )


def sigint_at_start(disposition: str):
    """How the run's interpreter finds SIGINT when it starts: as a terminal's foreground job has it (default), or
    ignored, as a shell without job control starts a background job (`train.py ... &` in a script, and a test
    suite started so). The interpreter keeps an ignored SIGINT until the run sets a handler of its own."""
    handler = signal.SIG_IGN if disposition == "ignored" else signal.SIG_DFL
    return lambda: signal.signal(signal.SIGINT, handler)


def test_the_program_takes_an_ignored_sigint_back_before_anything_loads(monkeypatch):
    """`python train.py` and the grpo-train script (pyproject's entry) both go through train.cli, which turns
    an inherited SIG_IGN into a KeyboardInterrupt (kept as well) before the commands are imported."""
    import tomllib

    scripts = tomllib.loads((Path(train.__file__).parent / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["grpo-train"] == "train:cli"
    seen = []
    monkeypatch.setattr(train, "main", lambda argv=None: seen.append(signal.getsignal(signal.SIGINT)) or 0)
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        assert train.cli() == 0
    finally:
        signal.signal(signal.SIGINT, before)
    assert len(seen) == 1 and isinstance(seen[0], train.EarlyInterrupts)
    with pytest.raises(KeyboardInterrupt):
        seen[0](signal.SIGINT, None)
    assert seen[0].signals == [signal.SIGINT]

    def interrupted(argv=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(train, "main", interrupted)
    assert train.cli() == 130


def test_a_ctrl_c_the_interpreter_drops_in_a_callback_still_stops_the_run_unsaid(monkeypatch, tmp_path, capfd):
    """A KeyboardInterrupt raised while a weakref callback runs (an import's module-lock cleanup) is printed and
    dropped by the interpreter, and the run went on to its end with exit 0 (seen once in a whole-suite run, at
    0.31 CPU-s). train.cli keeps the signal and says nothing of the dropped exception; the supervisor's handlers
    take it over and the attempt is not started."""
    import gc
    import weakref

    from launcher.run.child import ChildRunner, signals_forwarded

    class Lock:  # stands for importlib's module lock, whose weakref callback the signal landed in
        pass

    outcome = {}

    def run(argv=None):
        handler = signal.getsignal(signal.SIGINT)
        lock = Lock()
        kept = weakref.ref(lock, lambda ref: handler(signal.SIGINT, None))
        del lock
        gc.collect()
        assert kept() is None  # the callback ran, and its KeyboardInterrupt went no further
        runner = ChildRunner(command=["/bin/false"])
        with signals_forwarded(runner):
            outcome["status"] = runner.run_argv(["/bin/false"], tmp_path, env={})
            outcome["signals"] = list(runner.signals)
        outcome["started"] = runner.last_pid is not None
        return 0

    monkeypatch.setattr(train, "main", run)
    before = signal.getsignal(signal.SIGINT)
    try:
        assert train.cli() == 0
    finally:
        signal.signal(signal.SIGINT, before)
    assert outcome == {"status": (EXIT_INTERRUPTED, ""), "signals": [signal.SIGINT], "started": False}
    assert "KeyboardInterrupt" not in capfd.readouterr().err


# (CPU seconds, SIGINT at start). An ignored SIGINT before the supervisor's handlers were in (about 0.25 CPU-s)
# was lost: the run went on to its end and exited 0, in 3 of some 15 whole-suite runs of a suite started in the
# background, at 0.3 CPU-s (and in every try at 0.05-0.22 CPU-s of a process started so). An inherited SIG_IGN
# holds until the program's first line (train.cli) takes it back, so for it the moments count from there: counted
# from the fork, the interpreter's start beside three busy loops took 0.11 CPU-s, and the signal came before any
# of the program's code had run. That the first line does take it back is
# test_the_program_takes_an_ignored_sigint_back_before_anything_loads's.
MOMENTS = [(0.1, "ignored"), (0.3, "ignored"), (0.3, "default"), (1.0, "default"), (2.0, "default")]


@pytest.mark.parametrize("after_cpu_s, at_start", MOMENTS)
def test_ctrl_c_in_the_first_moments_exits_130_without_a_traceback(tmp_path, after_cpu_s, at_start):
    """Ctrl-C once the run has done this much work (CPU seconds of the supervisor and its attempt: about as many
    seconds on an idle machine, and the same moments on a loaded one): the supervisor planning, the attempt
    starting, the attempt importing its libraries; whether SIGINT came in ignored or not."""
    env = {k: v for k, v in os.environ.items() if k not in ("FAKE_CHILD_PLAN", "GRPO_INJECT_OOM")}
    proc = start_train_py(
        "--auto",
        "--output-dir",
        str(tmp_path / "o"),
        "--set",
        "max_steps=2",
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=sigint_at_start(at_start),
    )
    taken_back = 0.0
    if at_start == "ignored":  # the program's first line takes SIGINT back: the moments count from there
        while proc.poll() is None and sigint_held(proc.pid).get("ignored"):
            time.sleep(0.002)
        taken_back = process_tree_cpu_s(proc.pid)
    used = 0.0
    while proc.poll() is None and (used := process_tree_cpu_s(proc.pid) - taken_back) < after_cpu_s:
        time.sleep(0.02)
    running = proc.poll() is None  # what a failure must tell apart: a lost signal, or a run over before it came
    # how the supervisor held SIGINT as it came (blocked, ignored, caught): where a lost one was lost
    held = signal_masks(proc.pid)
    proc.send_signal(signal.SIGINT)
    output, _ = finish(proc)  # a lost signal lets the two-step run end by itself, with exit 0
    moment = f"{used:.2f} CPU-s" + (f" after the {taken_back:.2f} it took to take SIGINT back" if taken_back else "")
    said = f"signalled {'while running' if running else 'after the run had ended'} at {moment} ({held}):\n"
    assert proc.returncode == 130, said + output[:1500] + "\n...\n" + output[-1500:]
    assert "Traceback" not in output, output[-2000:]


# ---------------------------------------------------------------------------------------------------
# Huge prompts


class CountingTokenizer:
    """A whitespace tokenizer that records how many characters it was given."""

    chat_template = None

    def __init__(self):
        self.characters = 0

    def __call__(self, text):
        self.characters += len(text)
        return {"input_ids": text.split()}


def test_huge_prompts_are_dropped_by_characters_before_tokenizing():
    from tasks.prompts import build_prompt, filter_by_length

    rows = [
        {"prompt": build_prompt("What is 2 + 2?"), "answer": "4"},
        {"prompt": build_prompt("x" * 5_000_000), "answer": "1"},
    ]  # one word, so it would pass by tokens
    tokenizer = CountingTokenizer()
    kept, dropped = filter_by_length(rows, tokenizer, 64)
    assert [row["answer"] for row in kept] == ["4"] and dropped == 1
    assert tokenizer.characters < 10_000  # the 5 MB line never reached the tokenizer


def test_set_is_checked_against_the_profiles_that_can_run_here(capsys):
    # num_gpus=2 suits the CPU ladder (two processes) but no single-GPU Unsloth profile: on a machine without a
    # GPU only the CPU profiles take it, the GPU ones load as written and are left out by the plan
    cpu_ladder = load_profiles(ROOT / "profiles", ["num_gpus=2"], device="cpu")
    assert {p.num_gpus for p in cpu_ladder if p.device == "cpu"} == {2}
    assert all(
        p.num_gpus == load_profiles(ROOT / "profiles")[i].num_gpus
        for i, p in enumerate(cpu_ladder)
        if p.device == "cuda"
    )
    with pytest.raises(UsageError, match="gradient_checkpointing"):
        load_profiles(ROOT / "profiles", ["num_gpus=2"], device="cuda")
    if not detect_machine().gpus:
        code, text = main(capsys, "--auto", "--dry-run", "--set", "num_gpus=2")
        assert code == 0, text
        code, text = main(capsys, "--auto", "--dry-run", "--set", "optim=adamw_8bit")
        assert code == 2 and "cpu-tiny" in text and "adamw_8bit" in text
