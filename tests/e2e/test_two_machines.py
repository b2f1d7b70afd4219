"""Two "machines" on this one, started as slurm/grpo-train.sbatch starts its training nodes: the same
`python train.py train` twice, each with what `srun --ntasks-per-node=1` gives a task (SLURM_STEP_NUM_NODES,
SLURM_PROCID, SLURM_STEP_NODELIST, SLURM_JOB_ID), meeting at a c10d rendezvous on 127.0.0.1 and training the
tiny model with DDP (gloo) across both. The first test runs the job script itself, with stand-ins for `srun` and
`scontrol` (tests/support/slurm_shim) that start its tasks here. An OOM injected on machine 1 alone gives both the same
fallback; a machine killed whole mid-run fails the attempt as a lost node within the rendezvous timeout, and
`train --resume` on both continues from the last checkpoint. (NCCL and a real network are not exercised here.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import yaml

from launcher.card.topology import free_port
from launcher.run.attempts import read_attempts
from support.cli import start_train_py
from support.waiting import finish_all, wait_until
from trainer.ranks import MACHINE_LOST

REPO = Path(__file__).resolve().parents[2]
RDZV_S = 30


def pair_profiles(folder: Path) -> Path:
    """Two rungs of the tiny model, each training over two processes (one per machine)."""
    folder.mkdir()
    for source, name, ladder, batch in (("cpu-tiny-8gen", "pair-8gen", 1, 8), ("cpu-tiny-4gen", "pair-4gen", 2, 4)):
        data = yaml.safe_load((REPO / "profiles" / f"{source}.yaml").read_text())
        data.update(
            name=name,
            ladder=ladder,
            num_gpus=2,
            per_device_train_batch_size=batch,
            max_steps=3,
            save_steps=1,
            eval_samples=0,
            train_samples=32,
        )
        (folder / f"{name}.yaml").write_text(yaml.safe_dump(data))
    return folder


def srun_task(tmp_path: Path, rank: int, port: int, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRPO_", "SLURM_", "FAKE_"))}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env.update(
        {
            "SLURM_JOB_ID": "4242",
            "SLURM_STEP_NUM_NODES": "2",
            "SLURM_STEP_NUM_TASKS": "2",
            "SLURM_PROCID": str(rank),
            "SLURM_STEP_NODELIST": "127.0.0.1",
            "GRPO_MAIN_PORT": str(port),
            "GRPO_RDZV_TIMEOUT": str(RDZV_S),
            "GRPO_TRAIN_LEDGER": str(tmp_path / "ledger.jsonl"),
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra)
    return env


def machine(tmp_path: Path, rank: int, port: int, *args: str, log: str, **extra) -> subprocess.Popen:
    return start_train_py(
        "train",
        "--profiles-dir",
        str(tmp_path / "profiles"),
        "--output-dir",
        str(tmp_path / "out"),
        *args,
        env=srun_task(tmp_path, rank, port, **extra),
        stdout=open(tmp_path / log, "w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def wait_all(procs: list[subprocess.Popen]) -> list[int]:
    try:
        # a 2-core machine shared with other work: each attempt loads torch in four processes; bounded by progress
        finish_all(procs)
        return [proc.returncode for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                kill_tree(proc.pid)


def descendants(pid: int) -> list[int]:
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            child = int(stat.parent.name)
            children += [child, *descendants(child)]
    return children


def kill_tree(pid: int) -> list[int]:
    """SIGKILL a machine's supervisor and everything under it (its attempt runs in a session of its own)."""
    pids = [pid, *descendants(pid)]
    for each in pids:
        try:
            os.kill(each, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return pids


def the_run(tmp_path: Path) -> Path:
    return next((tmp_path / "out").glob("run-*"))


SHIM = REPO / "tests" / "support" / "slurm_shim"


def test_the_job_script_trains_two_machines_with_ddp_and_both_take_the_same_fallback(tmp_path):
    profiles = pair_profiles(tmp_path / "profiles")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRPO_", "SLURM_", "FAKE_"))}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env.update(
        {
            "PATH": f"{SHIM}{os.pathsep}{env['PATH']}",
            "SLURM_JOB_ID": "4242",
            "SLURM_JOB_NODELIST": "127.0.0.1,localhost",
            "SERVER_NODE": "0",
            "PYTHON": sys.executable,
            "GRPO_MAIN_PORT": str(free_port()),
            "GRPO_RDZV_TIMEOUT": str(RDZV_S),
            "GRPO_TRAIN_LEDGER": str(tmp_path / "ledger.jsonl"),
            "PYTHONUNBUFFERED": "1",
            "FAKE_SRUN_TASK_ENV": json.dumps({"1": {"GRPO_INJECT_OOM": "pair-8gen@2"}}),
        }
    )  # machine 1 alone
    with open(tmp_path / "job.log", "w") as log:
        job = subprocess.Popen(
            ["bash", str(REPO / "slurm" / "grpo-train.sbatch"), str(profiles), str(tmp_path / "out")],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        code = wait_all([job])[0]
    text = (tmp_path / "job.log").read_text()
    assert code == 0, text[-6000:]
    assert "training nodes: 127.0.0.1,localhost; vLLM server node: none" in text
    assert "grpo-train exit status: 0" in text
    logs = [text, "\n".join(line for line in text.splitlines() if line.startswith("machine-1:"))]
    run = the_run(tmp_path)
    records = read_attempts(run)
    # the OOM of machine 1's rank is the attempt's; both machines shrink, then fall back, the same way
    assert [(r["profile"], r["status"], r["steps"]) for r in records] == [
        ("pair-8gen", "oom", 1),
        ("pair-8gen", "oom", 1),
        ("pair-4gen", "ok", 3),
    ]
    assert records[1]["shrink"] == {"per_device_train_batch_size": [8, 4], "gradient_accumulation_steps": [1, 2]}
    assert records[0]["oom"]["site"] == "logits/log-probs"
    assert records[2]["resumed_from"] == records[0]["checkpoint"]  # the global step went on
    assert "machine-1: attempt 2 pair-8gen" in logs[1]
    assert "machine-1: attempt 3 pair-4gen (pair-8gen was already shrunk once; falling back to pair-4gen" in logs[1]
    # DDP across both machines: two ranks, one on each, joined at c10d, trained every step
    last = run / records[2]["attempt_dir"]
    ranks = [json.loads((last / name).read_text()) for name in ("outcome.json", "outcome-rank1.json")]
    assert [(o["status"], o["steps"], o["ranks"]) for o in ranks] == [("ok", 3, 2), ("ok", 3, 2)]
    configs = [yaml.safe_load((last / name).read_text()) for name in ("accelerate.yaml", "accelerate-machine1.yaml")]
    assert [(c["machine_rank"], c["num_machines"], c["rdzv_backend"]) for c in configs] == [
        (0, 2, "c10d"),
        (1, 2, "c10d"),
    ]
    assert [json.loads(line)["step"] for line in (last / "metrics.jsonl").read_text().splitlines()] == [2, 3]
    assert (last / "adapter" / "adapter_config.json").is_file()
    for record in records:
        assert (run / record["attempt_dir"] / "train-machine-1.log").is_file()


def test_a_lost_machine_fails_the_attempt_and_resume_continues(tmp_path):
    pair_profiles(tmp_path / "profiles")
    port = free_port()
    # long enough that machine 0 is still training when machine 1 is lost after the fourth checkpoint; the resume
    # trains the rest on both machines
    long_run = ["--set", "max_steps=16", "--set", "save_steps=2"]
    one = machine(tmp_path, 1, port, *long_run, log="m1.log")
    zero = machine(tmp_path, 0, port, *long_run, log="m0.log")
    try:
        wait_until(
            lambda: bool(list((tmp_path / "out").glob("run-*/attempt-01-*/checkpoint-4/checkpoint-complete.json"))),
            watch=[tmp_path / "out", tmp_path / "m0.log", tmp_path / "m1.log"],
            process=zero,
            what="machine 0's fourth checkpoint",
        )
        kill_tree(one.pid)  # machine 1 lost whole: its supervisor, accelerate's agent, its rank
        finish_all([zero])
        code = zero.returncode
    finally:
        for proc in (one, zero):
            if proc.poll() is None:
                kill_tree(proc.pid)
    text = (tmp_path / "m0.log").read_text()
    assert code == 1, text[-4000:]
    run = the_run(tmp_path)
    records = read_attempts(run)
    assert len(records) == 1 and records[0]["status"] == "node", text[-4000:]
    # what ended it, rather than how soon: the peer's lost connection, or (after a restart from the newest
    # checkpoint) the ranks' check-in timing out at the rendezvous limit this test set
    error = records[0]["error"]
    assert "Connection" in error or f"did not check in within {RDZV_S} s (GRPO_RDZV_TIMEOUT): {MACHINE_LOST}" in error
    assert "not falling back: this is no memory problem" in text and "--resume" in text
    kept = records[0]["checkpoint"]
    assert kept and int(kept.rsplit("-", 1)[1]) >= 4

    port = free_port()
    procs = [machine(tmp_path, 1, port, "--resume", log="r1.log"), machine(tmp_path, 0, port, "--resume", log="r0.log")]
    codes = wait_all(procs)
    resumed = (tmp_path / "r0.log").read_text()
    assert codes == [0, 0], resumed[-4000:] + (tmp_path / "r1.log").read_text()[-4000:]
    records = read_attempts(run)
    assert [(r["status"], r["steps"]) for r in records] == [("node", records[0]["steps"]), ("ok", 16)]
    assert records[1]["resumed_from"] == kept
    step = int(kept.rsplit("-", 1)[1])
    metrics = run / records[1]["attempt_dir"] / "metrics.jsonl"
    assert json.loads(metrics.read_text().splitlines()[0])["step"] == step + 1  # the global step went on
