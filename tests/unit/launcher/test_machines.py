"""Several machines, without training: where a machine stands (GRPO_* and SLURM's variables), the vLLM
server's address and ports every machine computes alike, the c10d rendezvous' options, a lost machine read as
its own status, the restart rule inside an attempt, machine 0's decisions and the others' wait for them, and
`plan --nodes N --gpus-per-node G`."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest
import yaml

from commands import main
from contract import attempt as contract
from contract import failure
from contract.errors import UsageError
from launcher.card import topology as topo
from launcher.run import distributed as dist
from launcher.run import machines as machineslib
from profiles.load import load_profile

REPO = Path(__file__).resolve().parents[3]
PROFILES = REPO / "profiles"
GRPO_AND_SLURM = [name for name in os.environ if name.startswith(("GRPO_", "SLURM_"))]


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    for name in GRPO_AND_SLURM:
        monkeypatch.delenv(name, raising=False)


def profile(name, *overrides):
    return load_profile(PROFILES / f"{name}.yaml", list(overrides))


def srun_env(rank: int, nodes: int = 2, **extra) -> dict:
    """What `srun --nodes=N --ntasks-per-node=1` gives one task."""
    return {
        "SLURM_JOB_ID": "81234",
        "SLURM_STEP_NUM_NODES": str(nodes),
        "SLURM_STEP_NUM_TASKS": str(nodes),
        "SLURM_PROCID": str(rank),
        "SLURM_STEP_NODELIST": "gpu[07-08,12]",
        "SLURM_GPUS_ON_NODE": "8",
        **extra,
    }


# ---------------------------------------------------------------------------------------------------
# Where a machine stands


@pytest.mark.parametrize(
    "nodelist, first",
    [
        ("gpu[07-08,12]", "gpu07"),
        ("a1,a2", "a1"),
        ("solo", "solo"),
        ("rack[2-3]-n[01-04],x9", "rack2-n01"),
        ("10.0.0.5", "10.0.0.5"),
    ],
)
def test_the_first_host_of_a_slurm_node_list(nodelist, first):
    assert topo.first_host(nodelist) == first


def test_slurm_alone_says_where_a_machine_stands():
    assert topo.topology(srun_env(1)) == topo.Topology(2, 1, "gpu07", 29500, 8)
    assert topo.run_name(srun_env(1)) == "81234"


def test_grpo_variables_win_for_the_address_and_the_run_name():
    env = srun_env(
        1,
        GRPO_MAIN_ADDRESS="10.0.0.7",
        GRPO_MAIN_PORT="29611",
        GRPO_RUN_ID="run-a",
        GRPO_NUM_MACHINES="2",
        GRPO_MACHINE_RANK="1",
        GRPO_GPUS_PER_NODE="8",
    )
    assert topo.topology(env) == topo.Topology(2, 1, "10.0.0.7", 29611, 8)
    assert topo.run_name(env) == "run-a"


@pytest.mark.parametrize(
    "ours, theirs",
    [
        ("GRPO_NUM_MACHINES=3", "SLURM_STEP_NUM_NODES=2"),
        ("GRPO_MACHINE_RANK=0", "SLURM_PROCID=1"),
        ("GRPO_GPUS_PER_NODE=4", "SLURM_GPUS_ON_NODE=8"),
    ],
)
def test_a_contradiction_exits_2_naming_both(ours, theirs, monkeypatch, capsys, tmp_path):
    name, value = ours.split("=")
    for key, val in {**srun_env(1), name: value}.items():
        monkeypatch.setenv(key, val)
    with pytest.raises(UsageError) as caught:
        topo.topology()
    assert ours in str(caught.value) and theirs in str(caught.value)
    code = main(["train", "--output-dir", str(tmp_path / "out")])  # before anything is planned or started
    err = capsys.readouterr().err
    assert code == 2 and ours in err and theirs in err
    assert not (tmp_path / "out").exists()


def test_slurm_counts_machines_only_inside_an_srun_step_of_one_task_per_node():
    # the batch script (or an salloc shell) is one machine, whatever the job holds
    assert topo.topology({"SLURM_JOB_ID": "1", "SLURM_NNODES": "3", "SLURM_PROCID": "0"}).num_machines == 1
    with pytest.raises(UsageError, match="one task per node"):
        topo.topology(srun_env(1, SLURM_STEP_NUM_TASKS="16"))


# ---------------------------------------------------------------------------------------------------
# The vLLM server: one address and two ports, the same on every machine


def trainers_are_told(rank: int, **extra) -> tuple:
    from launcher.run.environment import attempt_env

    env = {"GRPO_NUM_MACHINES": "2", "GRPO_MACHINE_RANK": str(rank), "GRPO_MAIN_ADDRESS": "10.0.0.1", **extra}
    told = attempt_env(profile("multi-4x80gb-qwen2.5-14b"), 30.0, base=env)
    return told["GRPO_VLLM_HOST"], told["GRPO_VLLM_PORT"], told["GRPO_VLLM_GROUP_PORT"]


def test_every_machine_tells_its_trainers_the_same_server():
    # the case: GRPO_VLLM_PORT=8123 on both machines reached trainers as two different free ports
    assert (
        trainers_are_told(0, GRPO_VLLM_PORT="8123")
        == trainers_are_told(1, GRPO_VLLM_PORT="8123")
        == ("10.0.0.1", "8123", "51216")
    )
    assert trainers_are_told(0) == trainers_are_told(1) == ("10.0.0.1", "8000", "51216")  # TRL's defaults
    on_its_node = trainers_are_told(1, GRPO_SERVER_NODE="gpu12", GRPO_VLLM_GROUP_PORT="51300")
    assert (
        on_its_node
        == trainers_are_told(0, GRPO_SERVER_NODE="gpu12", GRPO_VLLM_GROUP_PORT="51300")
        == ("gpu12", "8000", "51300")
    )


def test_the_trainers_config_carries_the_ports(monkeypatch):
    from trainer.config import grpo_config_kwargs

    monkeypatch.setenv("GRPO_VLLM_HOST", "gpu12")
    monkeypatch.setenv("GRPO_VLLM_PORT", "8123")
    monkeypatch.setenv("GRPO_VLLM_GROUP_PORT", "51300")
    kwargs = grpo_config_kwargs(profile("multi-4x80gb-qwen2.5-14b"), "out", device="cuda", bf16=True, use_vllm=True)
    assert (kwargs["vllm_server_host"], kwargs["vllm_server_port"], kwargs["vllm_group_port"]) == ("gpu12", 8123, 51300)


def test_one_port_for_both_is_refused():
    with pytest.raises(UsageError, match="GRPO_VLLM_GROUP_PORT=8000 is the vLLM server's port too"):
        topo.vllm_endpoint({"GRPO_VLLM_GROUP_PORT": "8000"})


def test_a_server_node_of_its_own_takes_no_gpu_of_machine_0():
    p = profile("multi-4x80gb-qwen2.5-14b")
    env = {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    assert topo.gpu_assignment(p, env=env) == (["0", "1", "2"], ["3"])
    assert topo.gpu_assignment(p, env={**env, "GRPO_SERVER_NODE": "gpu12"}) == (["0", "1", "2"], [])


def test_a_taken_port_stops_the_server_with_the_variable_to_change(tmp_path):
    import socket

    from launcher.run import vllm_server as vs

    with socket.socket() as held:
        held.bind(("0.0.0.0", 0))
        held.listen()
        port = held.getsockname()[1]
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": "0,1", "GRPO_VLLM_PORT": str(port)}
        with pytest.raises(vs.ServerError, match=f"port {port} is already in use .* GRPO_VLLM_PORT"):
            vs.start_server(profile("multi-2x24gb-llama3.1-8b"), tmp_path, env=env, command=["true"])


# ---------------------------------------------------------------------------------------------------
# The rendezvous: c10d on several machines, with bounded restarts and a join timeout


def test_several_machines_meet_at_c10d_with_bounded_restarts(tmp_path):
    p = profile("cpu-tiny-4gen", "num_gpus=2")
    env = {
        "GRPO_NUM_MACHINES": "2",
        "GRPO_MACHINE_RANK": "1",
        "GRPO_MAIN_ADDRESS": "127.0.0.1",
        "GRPO_MAIN_PORT": "29611",
        "GRPO_RDZV_TIMEOUT": "45",
    }
    config_file = dist.write_launch_files(p, tmp_path, env=env)
    assert config_file.name == "accelerate-machine1.yaml"
    config = yaml.safe_load(config_file.read_text())
    assert (config["rdzv_backend"], config["same_network"], config["main_process_ip"]) == ("c10d", False, "127.0.0.1")
    argv = dist.attempt_argv(p, tmp_path, launch_config=config_file, python="py", env=env)
    assert argv[argv.index("--max_restarts") + 1] == "1"
    assert argv[argv.index("--rdzv_conf") + 1] == "join_timeout=45,is_host=0"
    one = dist.attempt_argv(
        p, tmp_path, launch_config=dist.write_launch_files(p, tmp_path / "one", env={}), python="py", env={}
    )
    assert "--max_restarts" not in one  # one machine: a static rendezvous on a free port, as before
    assert yaml.safe_load((tmp_path / "one" / "accelerate.yaml").read_text())["rdzv_backend"] == "static"


# ---------------------------------------------------------------------------------------------------
# A lost machine: its own status, never an OOM

GLOO_PEER = (
    "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error "
    "[127.0.0.1]:8884: Connection reset by peer. This is typically caused by a remote worker hanging"
)
RDZV_TIMEOUT = (
    "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError: The node 'x' has timed out "
    "while waiting for the rendezvous"
)


@pytest.mark.parametrize(
    "text",
    [
        GLOO_PEER,
        RDZV_TIMEOUT,
        "RuntimeError: ncclRemoteError: remote process exited or there was a network error",
        "1 of 2 ranks did not check in within 30 s (GRPO_RDZV_TIMEOUT): a machine of the run is lost",
    ],
)
def test_a_lost_machine_is_read_as_a_node_failure(text):
    assert failure.classify_failure(text) == failure.NODE == contract.NODE
    assert failure.read_oom(text) is None


def test_the_oom_that_took_a_machine_down_wins_over_its_peers_lost_connection(tmp_path):
    oom = (REPO / "tests" / "data" / "oom" / "torch_logits_gib.txt").read_text()
    contract.Outcome(status="node", steps=1, error=GLOO_PEER).write(tmp_path, 0)
    contract.Outcome(status="oom", steps=1, error=oom.strip().splitlines()[-1], error_text=oom).write(tmp_path, 1)
    merged = contract.merge_outcomes(tmp_path)
    assert (merged.status, merged.rank) == ("oom", 1)


def test_a_child_that_died_of_a_lost_rendezvous_is_a_node_failure(tmp_path):
    from launcher.run.attempts import read_result

    result = read_result(tmp_path, 1, f"...\n{RDZV_TIMEOUT}\n", 3.0, interrupted=False)
    assert result.status == "node" and "RendezvousTimeoutError" in result.error


def test_a_restart_inside_an_attempt_keeps_a_failure_no_restart_mends(tmp_path):
    from trainer.run import restart_point

    restarted = {"TORCHELASTIC_RESTART_COUNT": "1"}
    assert restart_point(tmp_path, None, {}) == (None, None)  # the first start trains
    contract.Outcome(status="oom", steps=2, error="CUDA out of memory").write(tmp_path, 1)
    assert restart_point(tmp_path, "ckpt", restarted) == (3, "ckpt")  # exit 3 at once, nothing trained again
    (tmp_path / "outcome-rank1.json").unlink()
    contract.Outcome(status="node", steps=4, error=GLOO_PEER).write(tmp_path, 0)
    for step in (2, 4):
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        (folder / "trainer_state.json").write_text("{}")
        header = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
        (folder / "adapter_model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * 8)
        contract.mark_checkpoint_complete(folder)
    assert restart_point(tmp_path, None, restarted) == (None, str(tmp_path / "checkpoint-4"))  # goes on from there


# ---------------------------------------------------------------------------------------------------
# Machine 0 decides; the others follow


def coordinator(tmp_path, others, timeout=5.0):
    run_dir = tmp_path / "run-x"
    run_dir.mkdir(parents=True, exist_ok=True)
    return machineslib.Coordinator(tmp_path, run_dir, "job1", others, timeout, say=lambda text: None)


def test_a_follower_takes_only_the_decisions_that_name_it(tmp_path):
    stale = coordinator(tmp_path, ["machine-1"]).open()  # an earlier session of the same job
    stale.heard = {"machine-1": "an-old-token"}
    stale.decide(1, "attempt-01-a", "a", None, "old")
    stale.close()
    # the product's wait for machine 0, given room only a hang fills: this thread may wait out a busy machine
    follower = machineslib.Follower(tmp_path, "job1", "machine-1", timeout_s=600)
    fresh = coordinator(tmp_path, ["machine-1"])
    taken = []
    # the follower may start before machine 0's new session, find the old one, and answer it first
    waiting = threading.Thread(target=lambda: taken.append(follower.join() and follower.next_decision()))
    waiting.start()
    time.sleep(1)
    fresh.open()
    heard = fresh.gather()
    assert heard == {"machine-1": follower.token}
    fresh.decide(2, "attempt-02-b", "b", "attempt-01-a/checkpoint-5", "falling back to b", 3.5)
    waiting.join()  # bounded by the follower's own wait
    decision = taken[0]
    assert (decision.attempt, decision.profile, decision.resume_from, decision.estimate_gib) == (
        2,
        "b",
        "attempt-01-a/checkpoint-5",
        3.5,
    )
    fresh.stop(3, "nothing left that fits")
    assert (follower.next_decision().action, follower.seq) == ("stop", 2)
    fresh.close()
    lines = (tmp_path / "run-x" / "machines" / "decisions.jsonl").read_text().splitlines()
    assert [json.loads(line)["action"] for line in lines] == ["run", "run", "stop"]


def test_a_machine_that_cannot_see_the_shared_folder_stops_naming_it(tmp_path):
    follower = machineslib.Follower(tmp_path / "elsewhere", "job1", "machine-1", timeout_s=0.5)
    with pytest.raises(machineslib.MachineTimeout) as caught:
        follower.join()
    text = str(caught.value)
    assert str(tmp_path / "elsewhere" / "job-job1.json") in text and "file system they all share" in text


def test_machine_0_names_the_machines_it_did_not_hear_from(tmp_path):
    lonely = coordinator(tmp_path, ["machine-1", "server"], timeout=0.5).open()
    with pytest.raises(machineslib.MachineTimeout) as caught:
        lonely.gather()
    lonely.close()
    text = str(caught.value)
    assert "machine-1, server" in text and str(tmp_path / "run-x" / "machines" / "server.json") in text
    assert "the same --output-dir" in text


def test_a_follower_stops_when_machine_0_stops_beating(tmp_path, monkeypatch):
    monkeypatch.setattr(machineslib, "HEARTBEAT_S", 0.1)
    main0 = coordinator(tmp_path, ["machine-1"]).open()
    follower = machineslib.Follower(tmp_path, "job1", "machine-1", timeout_s=1.0)
    joined = threading.Thread(target=follower.join)
    joined.start()
    main0.gather()
    joined.join()
    main0.close()  # machine 0 gone: no more heartbeats, no decision
    with pytest.raises(
        machineslib.MachineTimeout, match="no decision from machine 0 within 1 s of its last heartbeat .*decision.json"
    ):
        follower.next_decision()


def test_several_machines_need_a_common_run_name(monkeypatch, tmp_path, capsys):
    for key, value in {"GRPO_NUM_MACHINES": "2", "GRPO_MACHINE_RANK": "0", "GRPO_MAIN_ADDRESS": "h"}.items():
        monkeypatch.setenv(key, value)
    code = main(
        [
            "train",
            "--profile",
            str(PROFILES / "cpu-tiny-4gen.yaml"),
            "--set",
            "num_gpus=2",
            "--output-dir",
            str(tmp_path / "out"),
        ]
    )
    assert code == 2 and "set GRPO_RUN_ID to the same name on every machine" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------
# plan --nodes N --gpus-per-node G


def plan_json(capsys, *argv) -> dict:
    code = main(["plan", "--ignore-ledger", "--json", *argv])
    out = capsys.readouterr().out
    assert code == 0, out
    return json.loads(out)


def test_plan_for_nodes_says_which_node_does_what(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    plan = plan_json(
        capsys,
        "--nodes",
        "3",
        "--gpus-per-node",
        "8",
        "--gpu-memory",
        "80",
        "--profile",
        str(PROFILES / "multi-8x80gb-qwen2.5-14b.yaml"),
        "--set",
        "num_gpus=16",
    )
    nodes = plan["candidates"][0]["nodes"]
    assert [(n["node"], n["role"], n.get("training_gpus"), n.get("server_gpus")) for n in nodes] == [
        (0, "training", 8, None),
        (1, "training", 8, None),
        (2, "vLLM server", None, 2),
    ]
    training, server = nodes[0]["training_gib_per_gpu"], nodes[2]["server_gib_per_gpu"]
    assert 0 < training < 80 * 0.95 and 0 < server < 80 * 0.95
    estimate = plan["candidates"][0]["estimate"]
    assert training == round(estimate["total_gib"], 2)
    assert plan["chosen"] == "multi-8x80gb-qwen2.5-14b"
    # the same card on one node: the server takes GPUs after the training ones, on the node that trains
    one = plan_json(
        capsys,
        "--nodes",
        "1",
        "--gpus-per-node",
        "8",
        "--gpu-memory",
        "80",
        "--profile",
        str(PROFILES / "multi-8x80gb-qwen2.5-14b.yaml"),
    )
    assert one["candidates"][0].get("nodes") in (
        None,
        [
            {
                "node": 0,
                "role": "training + vLLM server",
                "training_gpus": 6,
                "server_gpus": 2,
                "training_gib_per_gpu": training,
                "server_gib_per_gpu": server,
            }
        ],
    )
    code = main(
        [
            "plan",
            "--ignore-ledger",
            "--nodes",
            "3",
            "--gpus-per-node",
            "8",
            "--gpu-memory",
            "80",
            "--profile",
            str(PROFILES / "multi-8x80gb-qwen2.5-14b.yaml"),
            "--set",
            "num_gpus=16",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0 and "node 2: serves vLLM on 2 GPU(s)" in out and "node 0: trains on 8 GPU(s)" in out


def test_plan_for_nodes_refuses_a_split_the_launcher_would_refuse(capsys):
    plan = plan_json(
        capsys,
        "--nodes",
        "4",
        "--gpus-per-node",
        "8",
        "--gpu-memory",
        "80",
        "--profile",
        str(PROFILES / "multi-8x80gb-qwen2.5-14b.yaml"),
    )
    # 3 training nodes (the fourth serves) cannot split 6 training GPUs... they can: 2 each
    assert plan["candidates"][0]["fits"]
    assert [n["training_gpus"] for n in plan["candidates"][0]["nodes"][:3]] == [2, 2, 2]
    code = main(
        [
            "plan",
            "--ignore-ledger",
            "--json",
            "--nodes",
            "5",
            "--gpus-per-node",
            "8",
            "--gpu-memory",
            "80",
            "--profile",
            str(PROFILES / "multi-8x80gb-qwen2.5-14b.yaml"),
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 3 and "cannot be split evenly over 4 machines" in out["candidates"][0]["reason"]


def test_the_old_spelling_plans_for_nodes_too(capsys):
    from commands.legacy import translate

    assert translate(["--dry-run", "--nodes", "2", "--gpus-per-node", "4"]) == [
        "plan",
        "--nodes",
        "2",
        "--gpus-per-node",
        "4",
    ]
    assert main(["--auto", "--nodes", "2"]) == 2
    assert "--nodes only applies to --dry-run (the `plan` command)" in capsys.readouterr().err


def test_every_grpo_variable_is_a_row_of_the_contracts_table():
    import re

    from contract.environment import VARIABLES

    declared = {name for v in VARIABLES for name in v.name.split(" / ")}
    used = set()
    for path in [
        *REPO.glob("*.py"),
        *REPO.glob("[!.]*/**/*.py"),
        REPO / "slurm" / "grpo-train.sbatch",
        REPO / "docs" / "scale-out.md",
    ]:
        if ".venv" in path.parts or path.parts[len(REPO.parts)] in ("tests", "tests_vllm"):
            continue
        used |= set(re.findall(r"\bGRPO_[A-Z][A-Z_]*[A-Z]\b", path.read_text(encoding="utf-8")))
    assert used - declared == set()
    assert {
        "GRPO_RUN_ID",
        "GRPO_SERVER_NODE",
        "GRPO_VLLM_GROUP_PORT",
        "GRPO_RDZV_TIMEOUT",
    } <= used  # it read the source
