"""--resume never loses work silently: a changed shape is refused (or started over loudly on request), a moved
run folder resumes from its checkpoint, a damaged checkpoint is passed over (named, set aside) for the newest
whole one, a second supervisor of the same run is refused, and a child's exit 2 is the run's exit 2.

The attempts are tests/support/fake_child.py (it writes checkpoints and outcome.json as the trainer does); the
fault-injection test at the end kills the real CPU trainer while it writes checkpoints.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from rich.console import Console

from contract.attempt import COMPLETE_MARKER, checkpoint_problem, checkpoint_step, latest_checkpoint
from contract.errors import UsageError
from launcher.card.detect import Machine
from launcher.plan.choose import make_plan
from launcher.plan.request import PlanRequest
from launcher.run.attempts import read_attempts
from launcher.run.request import RunRequest
from launcher.run.supervise import supervise
from profiles.load import profile_from_dict
from support.cli import start_train_py, train_py
from support.fake_runs import CPU_SETTINGS, FAKE_CHILD

ROOT = Path(__file__).resolve().parents[3]
CPU_MACHINE = Machine(gpus=[], message="test machine: no GPU", host_ram_gib=24.0, host_free_gib=20.0)
BASE = dict(
    **CPU_SETTINGS,
    max_steps=8,
    save_steps=2,
    eval_samples=0,
    num_generations=4,
    max_completion_length=64,
    per_device_train_batch_size=4,
    gradient_accumulation_steps=1,
)


def plan_of(*names: str):
    profiles = [
        profile_from_dict(dict(BASE, name=name, ladder=i + 1), f"<test {name}>")
        for i, name in enumerate(names or ("a",))
    ]
    return make_plan(PlanRequest(profiles, CPU_MACHINE))


def run(out: Path, monkeypatch, behaviour: dict, resume=False, overrides=(), fresh=False, plan=None):
    """Supervise with the fake child into `out`; (exit code, attempt records of the latest run, console)."""
    monkeypatch.setenv("FAKE_CHILD_PLAN", json.dumps(behaviour))
    text = io.StringIO()
    code = supervise(
        plan or plan_of(),
        RunRequest(out, overrides=tuple(overrides), resume=resume, fresh_attempt=fresh),
        child_command=FAKE_CHILD,
        console=Console(file=text, width=240, highlight=False),
    )
    runs = sorted(out.glob("run-*"))
    return code, (read_attempts(runs[-1]) if runs else []), text.getvalue()


def call_of(run_dir: Path, record: dict) -> dict:
    return json.loads((run_dir / record["attempt_dir"] / "call.json").read_text())


def stopped_run(tmp_path, monkeypatch, at_step=5) -> Path:
    """A run whose one attempt failed at `at_step` after checkpoints every 2 steps; its run folder."""
    code, records, _ = run(tmp_path / "out", monkeypatch, {"a": {"do": "error", "at_step": at_step}})
    assert code == 1 and records[0]["steps"] == at_step
    return next((tmp_path / "out").glob("run-*"))


# ---------------------------------------------------------------------------------------------------
# Bug 1: a changed shape, a moved folder


def test_resume_with_a_changed_lora_shape_is_refused_saying_what_differs(tmp_path, monkeypatch):
    run_dir = stopped_run(tmp_path, monkeypatch)
    with pytest.raises(UsageError) as refused:
        run(tmp_path / "out", monkeypatch, {}, resume=True, overrides=["lora_rank=8"])
    text = str(refused.value)
    assert "lora_rank 16 -> 8" in text and "attempt-01-a/checkpoint-4 (step 4)" in text
    assert "--fresh-attempt" in text and "start a new run" in text
    assert len(read_attempts(run_dir)) == 1  # nothing ran
    assert not (run_dir / "run.lock").exists()  # and the run is free again


def test_resume_fresh_attempt_starts_over_and_says_so_loudly(tmp_path, monkeypatch):
    run_dir = stopped_run(tmp_path, monkeypatch)
    code, records, out = run(tmp_path / "out", monkeypatch, {}, resume=True, overrides=["lora_rank=8"], fresh=True)
    assert code == 0
    assert "--fresh-attempt: starting over at step 1" in out
    assert "attempt-01-a/checkpoint-4 (step 4) is kept but not used" in out
    assert records[-1]["resumed_from"] is None and records[-1]["settings"]["lora_rank"] == 8
    assert "--resume-from" not in call_of(run_dir, records[-1])["argv"]
    assert (run_dir / "attempt-01-a" / "checkpoint-4").is_dir()


def test_resume_that_drops_the_tools_does_not_swap_the_tiny_models_build(tmp_path, monkeypatch):
    # The tiny model with tools is its tool-calling build; without, the plain one: other weights entirely
    plan = make_plan(
        PlanRequest([profile_from_dict(dict(BASE, name="a", tools=["calculate"]), "<test a>")], CPU_MACHINE)
    )
    code, records, _ = run(tmp_path / "out", monkeypatch, {"a": {"do": "error", "at_step": 5}}, plan=plan)
    assert code == 1 and records[0]["steps"] == 5
    run_dir = next((tmp_path / "out").glob("run-*"))
    for change in (["tools=[]"], ["tools=[]", "max_steps=10"]):
        with pytest.raises(UsageError) as refused:
            run(tmp_path / "out", monkeypatch, {}, resume=True, overrides=change, plan=plan)
        text = str(refused.value)
        assert "tools=['calculate'] -> tools=[] changes the base model" in text
        assert "its tool-calling build and would load its plain build" in text
        assert "attempt-01-a/checkpoint-4 (step 4)" in text and "--fresh-attempt" in text
    assert len(read_attempts(run_dir)) == 1  # nothing ran
    code, records, out = run(
        tmp_path / "out", monkeypatch, {}, resume=True, overrides=["tools=[]"], fresh=True, plan=plan
    )
    assert code == 0 and "--fresh-attempt: starting over at step 1" in out
    assert records[-1]["resumed_from"] is None


def test_resume_that_adds_an_environment_to_a_plain_run_is_refused(tmp_path, monkeypatch):
    run_dir = stopped_run(tmp_path, monkeypatch)
    with pytest.raises(
        UsageError,
        match=r"environment='guess' changes the base model .* its plain build and would "
        r"load its tool-calling build",
    ):
        run(tmp_path / "out", monkeypatch, {}, resume=True, overrides=["environment=guess"])
    assert len(read_attempts(run_dir)) == 1


def test_the_planners_tiny_build_is_the_one_the_model_source_loads():
    from launcher.run.resume import tiny_build
    from tiny_model.source import uses_tools

    for extra in ({}, {"tools": ["calculate"]}, {"environment": "guess"}, {"model": "tiny-long"}):
        profile = profile_from_dict(dict(BASE, name="a", **extra), "<test a>")
        assert tiny_build(profile) == ("tools" if uses_tools(profile) else "plain")
    assert tiny_build(profile_from_dict(dict(BASE, name="a", model="Qwen/Qwen2.5-0.5B"), "<test a>")) is None


def test_fresh_attempt_without_resume_is_refused(tmp_path, monkeypatch):
    with pytest.raises(UsageError, match="--fresh-attempt only applies to --resume"):
        run(tmp_path / "out", monkeypatch, {}, fresh=True)


def test_a_setting_that_keeps_the_shape_resumes(tmp_path, monkeypatch):
    run_dir = stopped_run(tmp_path, monkeypatch)
    code, records, _ = run(tmp_path / "out", monkeypatch, {}, resume=True, overrides=["max_steps=10"])
    assert code == 0
    assert records[-1]["resumed_from"] == "attempt-01-a/checkpoint-4" and records[-1]["steps"] == 10
    assert call_of(run_dir, records[-1])["argv"][-1] == str(run_dir / "attempt-01-a" / "checkpoint-4")


def test_records_hold_paths_relative_to_the_run_folder(tmp_path, monkeypatch):
    run_dir = stopped_run(tmp_path, monkeypatch)
    record = read_attempts(run_dir)[0]
    assert (record["attempt_dir"], record["checkpoint"]) == ("attempt-01-a", "attempt-01-a/checkpoint-4")
    outcome = json.loads((run_dir / "attempt-01-a" / "outcome.json").read_text())
    assert outcome["checkpoint"] == "checkpoint-4"  # relative to the attempt folder


def test_a_moved_run_folder_resumes_from_its_checkpoint(tmp_path, monkeypatch):
    stopped_run(tmp_path, monkeypatch)
    shutil.move(str(tmp_path / "out"), str(tmp_path / "moved"))
    code, records, out = run(tmp_path / "moved", monkeypatch, {}, resume=True)
    run_dir = next((tmp_path / "moved").glob("run-*"))
    assert code == 0
    assert records[-1]["resumed_from"] == "attempt-01-a/checkpoint-4"
    assert call_of(run_dir, records[-1])["argv"][-2:] == [
        "--resume-from",
        str(run_dir / "attempt-01-a" / "checkpoint-4"),
    ]
    assert "resuming from attempt-01-a/checkpoint-4 (step 4)" in out


def test_a_moved_run_with_old_absolute_records_still_resumes(tmp_path, monkeypatch):
    run_dir = stopped_run(tmp_path, monkeypatch)
    # attempts.jsonl as older versions wrote it: absolute paths into the folder's old place
    record = read_attempts(run_dir)[0]
    for key in ("attempt_dir", "checkpoint"):
        record[key] = str(run_dir / record[key])
    (run_dir / "attempts.jsonl").write_text(json.dumps(record) + "\n")
    shutil.move(str(tmp_path / "out"), str(tmp_path / "moved"))
    code, records, _ = run(tmp_path / "moved", monkeypatch, {}, resume=True)
    assert code == 0 and records[-1]["resumed_from"] == "attempt-01-a/checkpoint-4"


# ---------------------------------------------------------------------------------------------------
# Bug 2: a damaged checkpoint is passed over, named and set aside


def test_a_damaged_newest_checkpoint_is_set_aside_and_the_one_before_resumed(tmp_path, monkeypatch):
    run_dir = stopped_run(tmp_path, monkeypatch)
    weights = run_dir / "attempt-01-a" / "checkpoint-4" / "adapter_model.safetensors"
    os.truncate(weights, 10)
    code, records, out = run(tmp_path / "out", monkeypatch, {}, resume=True)
    assert code == 0
    assert records[-1]["resumed_from"] == "attempt-01-a/checkpoint-2"
    assert (
        "passing over attempt-01-a/checkpoint-4: adapter_model.safetensors is 10 bytes" in out
        and "renamed to checkpoint-4.damaged" in out
        and "resuming from attempt-01-a/checkpoint-2" in out
    )
    assert (run_dir / "attempt-01-a" / "checkpoint-4.damaged" / "adapter_model.safetensors").is_file()
    assert not (run_dir / "attempt-01-a" / "checkpoint-4").exists()


def test_every_checkpoint_damaged_says_it_starts_at_step_1(tmp_path, monkeypatch):
    run_dir = stopped_run(tmp_path, monkeypatch, at_step=3)
    (run_dir / "attempt-01-a" / "checkpoint-2" / "checkpoint-complete.json").unlink()
    code, records, out = run(tmp_path / "out", monkeypatch, {}, resume=True)
    assert code == 0 and records[-1]["resumed_from"] is None
    assert "checkpoint-2: no checkpoint-complete.json: the save was cut short" in out
    assert "no complete checkpoint of this shape is left: starting at step 1" in out


# ---------------------------------------------------------------------------------------------------
# One supervisor per run; the child's exit 2 passes through


def test_a_second_resume_while_the_run_trains_is_refused(tmp_path, monkeypatch):
    run_dir = stopped_run(tmp_path, monkeypatch)
    # a stand-in that lives until the test kills it (an hour: no busy machine makes the test outlast it)
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)", "train.py"])  # a supervisor
    try:
        (run_dir / "run.lock").write_text(f"{owner.pid}\n")
        with pytest.raises(UsageError, match=f"in use by process {owner.pid}"):
            run(tmp_path / "out", monkeypatch, {}, resume=True)
        assert len(read_attempts(run_dir)) == 1
    finally:
        owner.kill()
        owner.wait()
    # its owner has gone: the stale lock is taken over
    code, records, _ = run(tmp_path / "out", monkeypatch, {}, resume=True)
    assert code == 0 and len(records) == 2
    assert not (run_dir / "run.lock").exists()


def test_a_child_that_refuses_its_input_makes_the_run_exit_2(tmp_path, monkeypatch):
    code, records, out = run(tmp_path / "out", monkeypatch, {"a": {"do": "usage"}}, plan=plan_of("a", "b"))
    assert code == 2
    assert [(r["profile"], r["status"], r["exit_code"]) for r in records] == [("a", "error", 2)]
    assert "refused its input" in out and 'has no "question"' in out


def _whole_checkpoint(folder: Path) -> None:
    from contract.attempt import mark_checkpoint_complete

    folder.mkdir(parents=True)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": checkpoint_step(folder)}))
    header = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    (folder / "adapter_model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * 8)
    mark_checkpoint_complete(folder)


def test_the_interrupted_line_says_only_what_was_saved(tmp_path):
    from trainer.run import AttemptState, saved_text

    state = AttemptState(None, tmp_path, resume_from=None)
    assert saved_text(state) == "nothing was saved (it stopped before a checkpoint)"
    (tmp_path / "checkpoint-3").mkdir()  # cut short: not counted
    assert saved_text(state).startswith("nothing was saved")
    _whole_checkpoint(tmp_path / "checkpoint-2")
    assert saved_text(state) == "checkpoint-2 was saved (no adapter)"
    (tmp_path / "adapter").mkdir()
    assert saved_text(state) == "the adapter and checkpoint-2 were saved"


def test_an_attempt_given_a_damaged_checkpoint_refuses_it_before_loading(tmp_path):
    damaged = tmp_path / "old" / "checkpoint-4"
    _whole_checkpoint(damaged)
    os.truncate(damaged / "adapter_model.safetensors", 10)
    env = {k: v for k, v in os.environ.items() if k not in ("FAKE_CHILD_PLAN", "GRPO_INJECT_OOM")}
    done = train_py(
        "--profile",
        str(ROOT / "profiles" / "cpu-tiny-4gen.yaml"),
        "--attempt-dir",
        str(tmp_path / "attempt"),
        "--resume-from",
        str(damaged),
        env=env,
    )
    assert done.returncode == 2, done.stderr[-3000:]
    assert "adapter_model.safetensors is 10 bytes" in done.stderr and "Traceback" not in done.stderr
    assert json.loads((tmp_path / "attempt" / "outcome.json").read_text())["status"] == "error"


# ---------------------------------------------------------------------------------------------------
# Fault injection: SIGKILL the real trainer while it writes checkpoints, resume, repeat

# A run that prints nothing for this long has stalled; a slow one (a busy machine) keeps printing its steps.
STALL_S = 900


class _Run:
    """A train.py process whose output is read as it comes (so that its pipe never fills), and waited for as
    long as it makes progress, its output growing, never for a fixed time: the machine's load must not decide
    the test."""

    def __init__(self, *args: str, env: dict):
        self.proc = start_train_py(
            *args,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self.last = time.monotonic()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)
            self.last = time.monotonic()

    def poll(self):
        return self.proc.poll()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stalled(self) -> bool:
        return time.monotonic() - self.last > STALL_S

    def finish(self) -> str:
        """Its whole output, once it has exited; the test fails if it stops making progress first."""
        while self.proc.poll() is None:
            if self.stalled():
                self.proc.kill()
                pytest.fail(f"train.py printed nothing for {STALL_S} s: {''.join(self.lines)[-3000:]}")
            time.sleep(0.2)
        self.reader.join()
        return "".join(self.lines)

    @property
    def returncode(self):
        return self.proc.returncode


def _train_py(*args: str, env: dict) -> _Run:
    return _Run(*args, env=env)


def _children(pid: int) -> list[int]:
    import psutil

    try:
        return [child.pid for child in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


def _kill_at_next_checkpoint(proc: _Run, run_parent: Path, after_s: float, seen: set, whole: bool) -> Path | None:
    """Wait for a checkpoint folder that was not there before (with `whole`: for its completeness marker
    too), then SIGKILL the attempt process `after_s` seconds later; the folder (None when the run ended
    first). Waits while the run makes progress (proc.stalled)."""
    while proc.poll() is None and not proc.stalled():
        fresh = [
            p
            for p in run_parent.glob("run-*/attempt-*/checkpoint-*")
            if p not in seen
            and p.is_dir()
            and p.name.split("-")[-1].isdigit()
            and (not whole or (p / COMPLETE_MARKER).exists())
        ]
        if fresh:
            time.sleep(after_s)
            for pid in _children(proc.pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            return fresh[0]
        time.sleep(0.001)
    return None


def _newest_whole_checkpoint(run_dir: Path) -> Path | None:
    found = [c for c in (latest_checkpoint(a) for a in run_dir.glob("attempt-*")) if c is not None]
    return max(found, key=checkpoint_step, default=None)


# Each of the five kills lands at the first checkpoint its attempt writes (one a step), so the run is still short of
# this many steps after them; the last resume trains the rest
FAULT_RUN_STEPS = 16


def test_fault_injection_sigkill_during_checkpoint_writes_never_loses_a_whole_checkpoint(tmp_path):
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    shutil.copy(ROOT / "profiles" / "cpu-tiny-4gen.yaml", profiles)
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k not in ("FAKE_CHILD_PLAN", "GRPO_INJECT_OOM")}
    common = ["--profiles-dir", str(profiles), "--output-dir", str(out)]
    first = [
        "--auto",
        *common,
        "--set",
        f"max_steps={FAULT_RUN_STEPS}",
        "--set",
        "save_steps=1",
        "--set",
        "eval_samples=0",
        "--set",
        "train_samples=16",
    ]
    seen: set = set()
    newest_step = 0
    # killed as a checkpoint folder appears and a moment later (the save cut short), as its completeness marker
    # appears and a moment later (the save whole, the next one perhaps under way)
    kill_points = ((0.0, False), (0.02, False), (0.0, True), (0.05, True), (0.005, False))
    for round_number, (after_s, whole) in enumerate(kill_points):
        proc = _train_py(*(first if round_number == 0 else ["--resume", *common]), env=env)
        killed = _kill_at_next_checkpoint(proc, out, after_s, seen, whole)
        output = proc.finish()
        assert killed is not None, output[-3000:]
        assert proc.returncode == 1, output[-3000:]  # a plain SIGKILL: an error, not host OOM
        assert "Traceback" not in output.split("attempt 1:")[0]
        run_dir = next(out.glob("run-*"))
        records = read_attempts(run_dir)
        assert records[-1]["status"] == "error" and "killed by SIGKILL" in records[-1]["error"]
        if round_number:  # this resume started from the newest whole checkpoint of the run before it
            assert checkpoint_step(records[-1]["resumed_from"]) == newest_step, output[-3000:]
            steps = [
                json.loads(line)["step"]
                for line in (run_dir / records[-1]["attempt_dir"] / "metrics.jsonl").read_text().splitlines()
            ]
            assert not steps or min(steps) == newest_step + 1  # the global step went on, never back
        print(
            f"kill {round_number} ({after_s} s after {'the marker' if whole else 'the folder'} of "
            f"{killed.parent.name}/{killed.name}): resumed from {records[-1]['resumed_from']}"
        )
        seen |= set(out.glob("run-*/attempt-*/checkpoint-*"))
        newest = _newest_whole_checkpoint(run_dir)
        assert newest is None or checkpoint_problem(newest) is None
        assert checkpoint_step(newest) >= newest_step  # what was whole stays whole
        newest_step = checkpoint_step(newest)
    done = _train_py("--resume", *common, env=env)
    output = done.finish()
    assert done.returncode == 0, output[-3000:]
    last = read_attempts(next(out.glob("run-*")))[-1]
    assert last["status"] == "ok" and last["steps"] == FAULT_RUN_STEPS
    assert checkpoint_step(last["resumed_from"]) == newest_step
    assert newest_step > 0  # some resume did start from a whole checkpoint
