"""Two "machines" on this one (two supervisors, each its own process and environment, meeting at a real c10d
rendezvous on 127.0.0.1), with the fake attempt in place of training (tests/support/fake_machine.py): machine 0 decides,
machine 1 follows into the same attempt folders, an OOM on machine 1 alone gives both the same fallback, and a
vLLM server node of its own serves both machines' ranks at the one address they all compute."""

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
from support.fake_runs import CPU_SETTINGS
from support.waiting import finish_all

REPO = Path(__file__).resolve().parents[3]
HERE = REPO / "tests"
DRIVER = [sys.executable, str(HERE / "support" / "fake_machine.py")]


def machine_env(tmp_path: Path, rank: int | None, port: int, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRPO_", "SLURM_", "FAKE_"))}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env.update(
        {
            "GRPO_NUM_MACHINES": "2",
            "GRPO_MAIN_ADDRESS": "127.0.0.1",
            "GRPO_MAIN_PORT": str(port),
            "GRPO_RUN_ID": "fake-job",
            "GRPO_MAX_RESTARTS": "0",
            "GRPO_RDZV_TIMEOUT": "120",
            "GRPO_MACHINE_TIMEOUT": "300",
            "GRPO_TRAIN_LEDGER": str(tmp_path / "ledger.jsonl"),
            "PYTHONUNBUFFERED": "1",
        }
    )
    if rank is not None:
        env["GRPO_MACHINE_RANK"] = str(rank)
    env.update(extra)
    return env


def start(argv: list[str], env: dict, log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [*DRIVER, *argv], cwd=REPO, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True
    )


def finish(procs: dict) -> dict:
    """{name: exit code} once every machine has ended: two accelerate launches per attempt each, minutes on a busy
    2-core machine, bounded by their progress (CPU of any)."""
    try:
        finish_all(list(procs.values()))
        codes = {name: proc.returncode for name, proc in procs.items()}
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    return codes


def pair_profiles(folder: Path) -> Path:
    folder.mkdir()
    base = dict(
        **CPU_SETTINGS,
        max_completion_length=32,
        max_steps=4,
        save_steps=2,
        eval_samples=0,
        num_gpus=2,
        gradient_checkpointing="true",
    )
    for name, ladder, generations in (("pair-8gen", 1, 8), ("pair-4gen", 2, 4)):
        data = dict(
            base, name=name, ladder=ladder, num_generations=generations, per_device_train_batch_size=generations
        )
        (folder / f"{name}.yaml").write_text(yaml.safe_dump(data))
    return folder


def test_machine_1s_oom_gives_both_machines_the_same_fallback(tmp_path):
    port, out = free_port(), tmp_path / "out"
    profiles = pair_profiles(tmp_path / "profiles")
    oom_on_1 = json.dumps(
        {"pair-8gen": {"do": "oom", "text": "torch_logits_gib.txt", "oom_if_batch_above": 4, "at_step": 2}}
    )
    train = ["train", "--profiles-dir", str(profiles), "--output-dir", str(out)]
    # machine 0's rank loses its peer, as a real one does when the other machine's rank dies of its OOM
    peer_lost_on_0 = json.dumps({"pair-8gen": {"do": "peer_lost", "only_if_batch_above": 4, "at_step": 2}})
    procs = {
        "machine-1": start(train, machine_env(tmp_path, 1, port, FAKE_CHILD_PLAN=oom_on_1), tmp_path / "m1.log"),
        "machine-0": start(train, machine_env(tmp_path, 0, port, FAKE_CHILD_PLAN=peer_lost_on_0), tmp_path / "m0.log"),
    }
    codes = finish(procs)
    logs = {name: (tmp_path / f"m{name[-1]}.log").read_text() for name in procs}
    assert codes == {"machine-1": 0, "machine-0": 0}, logs["machine-0"][-3000:] + logs["machine-1"][-3000:]
    run = next(out.glob("run-*"))
    records = read_attempts(run)
    assert [(r["profile"], r["status"]) for r in records] == [("pair-8gen", "oom"), ("pair-8gen", "ok")]
    assert records[1]["shrink"] == {"per_device_train_batch_size": [8, 4], "gradient_accumulation_steps": [2, 4]}
    assert records[1]["resumed_from"].endswith("checkpoint-2")
    # machine 1 followed machine 0's decisions into the same folders: both ranks ran every attempt
    for record in records:
        folder = run / record["attempt_dir"]
        calls = [json.loads((folder / name).read_text()) for name in ("call.json", "call-rank1.json")]
        assert sorted(c["RANK"] for c in calls) == ["0", "1"] and {c["WORLD_SIZE"] for c in calls} == {"2"}
        assert (folder / "train.log").is_file() and (folder / "train-machine-1.log").is_file()
        assert yaml.safe_load((folder / "accelerate-machine1.yaml").read_text())["rdzv_backend"] == "c10d"
    shrunk = [
        json.loads((run / records[1]["attempt_dir"] / n).read_text())["per_device_train_batch_size"]
        for n in ("call.json", "call-rank1.json")
    ]
    assert shrunk == [4, 4]  # the same shrunk profile on both machines
    decisions = [json.loads(line) for line in (run / "machines" / "decisions.jsonl").read_text().splitlines()]
    assert [(d["action"], d["attempt"], d["exit_code"]) for d in decisions] == [
        ("run", 1, None),
        ("run", 2, None),
        ("stop", None, 0),
    ]
    assert "machine-1: attempt 2 pair-8gen (halving per_device_train_batch_size 8 -> 4" in logs["machine-1"]


def run_with_a_server_node(
    tmp_path: Path, machine_0: dict | None = None, machine_1: dict | None = None, server: dict | None = None
) -> tuple[dict, dict, int, Path]:
    """Machine 0, machine 1 and a server node of their own; (exit codes, logs, the server's port, output)."""
    port, out = free_port(), tmp_path / "out"
    server_port, group_port = free_port(), free_port()
    shared = {
        "GRPO_SERVER_NODE": "127.0.0.1",
        "GRPO_VLLM_PORT": str(server_port),
        "GRPO_VLLM_GROUP_PORT": str(group_port),
        "CUDA_VISIBLE_DEVICES": "0",
        "FAKE_SERVER_PIDS": str(tmp_path / "server.pids"),
    }
    train = [
        "train",
        "--profile",
        str(REPO / "profiles" / "multi-2x24gb-llama3.1-8b.yaml"),
        "--set",
        "num_gpus=2",
        "--set",
        "max_steps=4",
        "--set",
        "save_steps=2",
        "--gpu-memory",
        "24",
        "--gpus",
        "1",
        "--output-dir",
        str(out),
    ]
    serve_env = machine_env(tmp_path, None, port, **shared, **(server or {}))
    for name in ("GRPO_NUM_MACHINES", "GRPO_MAIN_ADDRESS"):
        serve_env.pop(name)  # the server node stands in no rendezvous
    procs = {
        "server": start(["serve", "--output-dir", str(out)], serve_env, tmp_path / "server.log"),
        "machine-1": start(
            train, machine_env(tmp_path, 1, port, **shared, **(machine_1 or {})), tmp_path / "machine-1.log"
        ),
        "machine-0": start(
            train, machine_env(tmp_path, 0, port, **shared, **(machine_0 or {})), tmp_path / "machine-0.log"
        ),
    }
    codes = finish(procs)
    logs = {name: (tmp_path / f"{name}.log").read_text() for name in procs}
    return codes, logs, server_port, out


def test_a_server_node_serves_both_machines_at_the_address_they_compute(tmp_path):
    pids = tmp_path / "server.pids"
    codes, logs, server_port, out = run_with_a_server_node(tmp_path)
    assert codes == {"server": 0, "machine-1": 0, "machine-0": 0}, "\n".join(t[-2500:] for t in logs.values())
    run = next(out.glob("run-*"))
    records = read_attempts(run)
    assert [(r["profile"], r["status"]) for r in records] == [("multi-2x24gb-llama3.1-8b", "ok")]
    folder = run / records[0]["attempt_dir"]
    calls = [json.loads((folder / name).read_text()) for name in ("call.json", "call-rank1.json")]
    # both machines' ranks were told the same server, and it answered them
    assert [(c["GRPO_VLLM_PORT"], c["server_health"]) for c in calls] == [(str(server_port), 200)] * 2
    state = json.loads((folder / "vllm-server.json").read_text())
    assert state == {"status": "ready", "url": f"http://127.0.0.1:{server_port}", "error": None}
    assert "serving" in (folder / "vllm-server.log").read_text()
    server_pid = int(pids.read_text().split()[0])
    assert (
        not Path(f"/proc/{server_pid}").exists()
        or Path(f"/proc/{server_pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    )  # stopped after
    plan = json.loads((run / "plan.json").read_text())
    assert "the vLLM server node's GPUs are taken to be like this machine's" in " ".join(plan["notes"])
    assert [n["role"] for n in plan["candidates"][0]["nodes"]] == ["training", "training", "vLLM server"]


def test_a_server_that_fails_on_its_node_stops_the_attempt_on_every_machine(tmp_path):
    waits = json.dumps({"multi-2x24gb-llama3.1-8b": {"do": "wait_signal"}})  # trainers waiting for the server
    peer_lost = json.dumps({"multi-2x24gb-llama3.1-8b": {"do": "peer_lost"}})
    codes, logs, _port, out = run_with_a_server_node(
        tmp_path,
        machine_0={"FAKE_CHILD_PLAN": waits},
        machine_1={"FAKE_CHILD_PLAN": peer_lost},
        server={"FAKE_SERVER_FAIL_WITH": str(HERE / "data" / "oom" / "vllm_kv_cache.txt")},
    )
    assert len(set(codes.values())) == 1, logs  # every machine ends with machine 0's status
    records = read_attempts(next(out.glob("run-*")))
    first = records[0]
    # machine 0 read the server node's failure (an OOM of vLLM's share), not its own stopped trainer
    assert (first["status"], first["oom"]["kind"]) == ("oom", "vllm"), logs["machine-0"][-3000:]
    state = json.loads((next(out.glob("run-*")) / first["attempt_dir"] / "vllm-server.json").read_text())
    assert state["status"] == "failed" and "exited with status 1" in state["error"]
    from support.fake_child import WAIT_SIGNAL_S

    assert first["duration_s"] < WAIT_SIGNAL_S  # stopped when the server failed, not when the trainers gave up
