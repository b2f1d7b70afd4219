"""WHERE this machine stands in a run, and how many of a profile's GPUs it trains on.

`split_over_machines` is the one rule for dividing a profile's training GPUs over machines: the planner
judges with it and the launcher starts with it, so the planner never chooses a split the launcher refuses.
Multi-node: every training machine runs the same command; GRPO_NUM_MACHINES, GRPO_MACHINE_RANK,
GRPO_MAIN_ADDRESS and GRPO_MAIN_PORT say where it stands, or, inside a SLURM step of one task per node, SLURM's
own variables do. Where both say something, counts and ranks must agree (exit 2 naming both); the address
and the run's name follow GRPO_* (an address has several spellings, and a resumed run keeps its name in a new
job). The vLLM server's address and ports (`vllm_endpoint`) are computed the same way on every machine.
Nothing here imports torch or accelerate.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass

from contract.attempt import (
    DEFAULT_MACHINE_TIMEOUT_S,
    DEFAULT_MAIN_PORT,
    DEFAULT_MAX_RESTARTS,
    DEFAULT_RDZV_TIMEOUT_S,
    DEFAULT_VLLM_GROUP_PORT,
    DEFAULT_VLLM_PORT,
)
from contract.environment import (
    ENV_GPUS_PER_NODE,
    ENV_MACHINE_RANK,
    ENV_MACHINE_TIMEOUT,
    ENV_MAIN_ADDRESS,
    ENV_MAIN_PORT,
    ENV_MAX_RESTARTS,
    ENV_NUM_MACHINES,
    ENV_RDZV_TIMEOUT,
    ENV_RUN_ID,
    ENV_SERVER_NODE,
    ENV_VLLM_GROUP_PORT,
    ENV_VLLM_HOST,
    ENV_VLLM_PORT,
    SLURM_GPUS_ON_NODE,
    SLURM_JOB_ID,
    SLURM_NODELIST,
    SLURM_NUM_NODES,
    SLURM_NUM_TASKS,
    SLURM_PROCID,
)
from contract.errors import UsageError

# The most machines a run may span: far above any cluster a GRPO run takes, far below a count whose per-machine
# bookkeeping would not fit in memory (99999999999 ended in a MemoryError).
MAX_MACHINES = 4096


@dataclass(frozen=True)
class Topology:
    num_machines: int = 1
    machine_rank: int = 0
    main_address: str = "127.0.0.1"
    main_port: int | None = None  # None on one machine: a free port is taken at launch
    gpus_per_node: int | None = None  # what the job gives each machine, when it says (SLURM, GRPO_GPUS_PER_NODE)

    @property
    def multi_node(self) -> bool:
        return self.num_machines > 1


def _int_value(name: str, raw: str, low: int, high: int | None = None) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise UsageError(f"{name}={raw!r}: expected a whole number") from None
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f">= {low}"
        raise UsageError(f"{name}={value}: must be {bound}")
    return value


def _int_env(env: Mapping[str, str], name: str, default: int, low: int, high: int | None = None) -> int:
    raw = env.get(name, "").strip()
    return default if raw == "" else _int_value(name, raw, low, high)


def _first_set(env: Mapping[str, str], names) -> tuple[str, str] | None:
    """(name, value) of the first of `names` set to something in `env`, else None."""
    for name in (names,) if isinstance(names, str) else names:
        value = env.get(name, "").strip()
        if value:
            return name, value
    return None


def _agreed(
    env: Mapping[str, str], ours: str, theirs, what: str, low: int, high: int | None = None
) -> tuple[int, str] | None:
    """(value, the variable it came from) of a count or rank given by GRPO_* and/or SLURM; UsageError when
    both are set and differ (naming both), or when one is not a whole number in range."""
    mine = env.get(ours, "").strip()
    slurm = _first_set(env, theirs)
    if not mine and slurm is None:
        return None
    if slurm is not None:
        slurm_value = _int_value(slurm[0], slurm[1], low)
    if mine:
        value = _int_value(ours, mine, low, high)
        if slurm is not None and slurm_value != value:
            raise UsageError(
                f"{ours}={value} but {slurm[0]}={slurm_value}: they disagree on {what} (fix: "
                f"unset {ours} inside the SLURM job, or make the two equal)"
            )
        return value, ours
    assert slurm is not None  # neither set returned None above
    if high is not None and slurm_value > high:
        raise UsageError(f"{slurm[0]}={slurm_value}: must be between {low} and {high}")
    return slurm_value, slurm[0]


def first_host(nodelist: str) -> str:
    """The first host of a SLURM host list: 'gpu[07-09,12],cpu1' -> 'gpu07', 'r[1-2]-n[3-4]' -> 'r1-n3'."""
    text = nodelist.strip()
    depth, end = 0, len(text)
    for index, char in enumerate(text):  # the first entry ends at the first comma outside brackets
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            end = index
            break
    host = text[:end]
    while "[" in host:
        head, _, rest = host.partition("[")
        ranges, _, tail = rest.partition("]")
        host = head + ranges.split(",")[0].split("-")[0] + tail
    return host


def topology(env: Mapping[str, str] | None = None) -> Topology:
    """This machine's place in a multi-node run, from GRPO_* and SLURM's variables (one machine when unset)."""
    env = os.environ if env is None else env
    machines = _agreed(env, ENV_NUM_MACHINES, SLURM_NUM_NODES, "how many machines train", 1, MAX_MACHINES)
    num_machines = machines[0] if machines else 1
    in_step = bool(env.get(SLURM_NUM_NODES, "").strip())  # SLURM_PROCID is a machine's rank only in an srun step
    rank = _agreed(env, ENV_MACHINE_RANK, SLURM_PROCID if in_step else (), "this machine's rank", 0, num_machines - 1)
    if rank is not None and rank[1] == SLURM_PROCID:
        tasks, step_nodes = env.get(SLURM_NUM_TASKS, "").strip(), env.get(SLURM_NUM_NODES, "").strip()
        if tasks and tasks != step_nodes:
            raise UsageError(
                f"{SLURM_NUM_TASKS}={tasks} tasks on {SLURM_NUM_NODES}={step_nodes} nodes: SLURM_PROCID "
                "is a machine's rank only with one task per node (fix: srun --ntasks-per-node=1, as "
                "slurm/grpo-train.sbatch does)"
            )
    per_node = _agreed(env, ENV_GPUS_PER_NODE, SLURM_GPUS_ON_NODE, "the GPUs of each machine", 0)
    address = env.get(ENV_MAIN_ADDRESS, "").strip()
    if not address and num_machines > 1:
        listed = _first_set(env, SLURM_NODELIST)
        address = first_host(listed[1]) if listed else ""
    port = _int_env(env, ENV_MAIN_PORT, 0, 0, 65535) or None
    if num_machines > 1:
        if not address:
            raise UsageError(
                f"{ENV_NUM_MACHINES}={num_machines}: {ENV_MAIN_ADDRESS} must name machine 0 "
                "(an address every machine can reach)"
            )
        port = port or DEFAULT_MAIN_PORT  # every machine must agree on it: no free-port guess
    return Topology(
        num_machines, rank[0] if rank else 0, address or "127.0.0.1", port, per_node[0] if per_node else None
    )


def run_name(env: Mapping[str, str] | None = None) -> str | None:
    """The name every machine of a multi-node run gives it (GRPO_RUN_ID, else SLURM_JOB_ID), or None."""
    env = os.environ if env is None else env
    found = _first_set(env, (ENV_RUN_ID, SLURM_JOB_ID))
    if found is None:
        return None
    name = found[1]
    if not all(c.isalnum() or c in "-_." for c in name) or name.startswith("."):
        raise UsageError(f"{found[0]}={name!r}: a run's name is letters, digits, '-', '_' and '.' (it names a folder)")
    return name


def server_node(env: Mapping[str, str] | None = None) -> str | None:
    """The host of the vLLM server's own node (GRPO_SERVER_NODE), or None: the server runs on machine 0."""
    env = os.environ if env is None else env
    return env.get(ENV_SERVER_NODE, "").strip() or None


@dataclass(frozen=True)
class VllmEndpoint:
    host: str  # where trainers reach the server
    port: int  # the server's HTTP port
    group_port: int  # TRL's NCCL weight-sync group, hosted by the trainer holding rank 0

    def to_env(self) -> dict:
        return {ENV_VLLM_HOST: self.host, ENV_VLLM_PORT: str(self.port), ENV_VLLM_GROUP_PORT: str(self.group_port)}


def vllm_endpoint(env: Mapping[str, str] | None = None, topo: Topology | None = None) -> VllmEndpoint:
    """The vLLM server's address and ports, the same on every machine: GRPO_VLLM_HOST, else the server's own
    node (GRPO_SERVER_NODE), else machine 0 (127.0.0.1 on one machine); GRPO_VLLM_PORT else TRL's 8000;
    GRPO_VLLM_GROUP_PORT else TRL's 51216. Never a free port picked here: another machine would pick another."""
    env = os.environ if env is None else env
    topo = topo or topology(env)
    host = (
        env.get(ENV_VLLM_HOST, "").strip()
        or server_node(env)
        or (topo.main_address if topo.multi_node else "127.0.0.1")
    )
    port = _int_env(env, ENV_VLLM_PORT, DEFAULT_VLLM_PORT, 1, 65535)
    group_port = _int_env(env, ENV_VLLM_GROUP_PORT, DEFAULT_VLLM_GROUP_PORT, 1, 65535)
    if group_port == port:
        raise UsageError(
            f"{ENV_VLLM_GROUP_PORT}={group_port} is the vLLM server's port too (fix: two different "
            f"ports, e.g. {DEFAULT_VLLM_PORT} and {DEFAULT_VLLM_GROUP_PORT})"
        )
    return VllmEndpoint(host, port, group_port)


@dataclass(frozen=True)
class Elastic:
    max_restarts: int  # torch elastic restarts of the worker group inside one attempt
    rdzv_timeout_s: int  # the c10d rendezvous' wait for every machine
    machine_timeout_s: int  # a machine's wait for machine 0's decision (machine 0's for the others' answer)


def elastic(env: Mapping[str, str] | None = None) -> Elastic:
    env = os.environ if env is None else env
    return Elastic(
        _int_env(env, ENV_MAX_RESTARTS, DEFAULT_MAX_RESTARTS, 0, 100),
        _int_env(env, ENV_RDZV_TIMEOUT, DEFAULT_RDZV_TIMEOUT_S, 1),
        _int_env(env, ENV_MACHINE_TIMEOUT, DEFAULT_MACHINE_TIMEOUT_S, 1),
    )


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def split_over_machines(num_gpus: int, machines: int, name: str = "the profile") -> int:
    """Training GPUs (processes) per machine: num_gpus split evenly, every machine training on at least one.
    UsageError for a split that does not come out even."""
    machines = max(1, machines)
    if num_gpus % machines:
        raise UsageError(
            f"profile '{name}': num_gpus {num_gpus} cannot be split evenly over {machines} "
            f"machines (fix: a multiple of {machines}, or another number of machines)"
        )
    return num_gpus // machines


def local_gpus_needed(profile, machines: int = 1, server_node: bool = False) -> int:
    """GPUs one machine must show: its share of the training GPUs, and the vLLM server's on the first (unless
    the server has a node of its own). UsageError for a split over machines the launcher would refuse."""
    if profile.device == "cpu":
        return 0
    per_machine = split_over_machines(profile.num_gpus, machines, profile.name)
    return per_machine + (profile.vllm_server_gpus if profile.uses_vllm_server and not server_node else 0)


def split_refusal(profile, machines: int) -> str | None:
    """Why the launcher would refuse to divide the profile's training GPUs over the machines, else None."""
    try:
        split_over_machines(profile.num_gpus, machines, profile.name)
    except UsageError as exc:
        return str(exc)
    return None


def processes_per_machine(profile, topo: Topology) -> int:
    return split_over_machines(profile.num_gpus, topo.num_machines, profile.name)


def visible_gpu_ids(env: Mapping[str, str] | None = None, count: int = 0) -> list[str]:
    """This machine's GPUs as CUDA_VISIBLE_DEVICES names them (indices, or UUIDs), else 0..count-1."""
    env = os.environ if env is None else env
    value = env.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return [str(i) for i in range(count)]
    return [item.strip() for item in value.split(",") if item.strip()]


def gpu_assignment(
    profile, topo: Topology | None = None, env: Mapping[str, str] | None = None
) -> tuple[list[str], list[str]]:
    """(training GPU ids, vLLM server GPU ids) on this machine: training first, the server after them.
    The server runs on machine 0 only, unless it has a node of its own (GRPO_SERVER_NODE)."""
    topo = topo or topology(env)
    if profile.device == "cpu":
        return [], []
    train = processes_per_machine(profile, topo)
    serves_here = profile.uses_vllm_server and topo.machine_rank == 0 and server_node(env) is None
    server = profile.vllm_server_gpus if serves_here else 0
    ids = visible_gpu_ids(env, train + server)
    if len(ids) < train + server:
        raise UsageError(
            f"profile '{profile.name}' needs {train + server} GPUs on this machine "
            f"({train} training{f' + {server} vLLM server' if server else ''}), "
            f"CUDA_VISIBLE_DEVICES shows {len(ids)} (fix: show more GPUs, or lower num_gpus)"
        )
    return ids[:train], ids[train : train + server]


@dataclass(frozen=True)
class NodeLayout:
    """Which node does what for one profile: the training nodes first (node 0 hosts the rendezvous), then,
    when the vLLM server has a node of its own, that node."""

    training_nodes: int = 1
    server_node: bool = False

    def roles(self, profile) -> list[dict]:
        """One entry per node: its number, its role and its GPUs (the server's on machine 0 when it has no
        node of its own)."""
        if profile.device == "cpu":
            return [
                {"node": node, "role": "training", "training_processes": profile.num_gpus // self.training_nodes}
                for node in range(self.training_nodes)
            ]
        per_node = profile.num_gpus // max(1, self.training_nodes)
        shared_server = profile.vllm_server_gpus if profile.uses_vllm_server and not self.server_node else 0
        rows = []
        for node in range(self.training_nodes):
            row = {"node": node, "role": "training", "training_gpus": per_node}
            if node == 0 and shared_server:
                row.update(role="training + vLLM server", server_gpus=shared_server)
            rows.append(row)
        if self.server_node:
            rows.append({"node": self.training_nodes, "role": "vLLM server", "server_gpus": profile.vllm_server_gpus})
        return rows

    def text(self, profile) -> str:
        """'node 0-1: train on 8 GPU(s) each (16 ranks, DDP); node 2: the vLLM server on 2 GPU(s), TP 2'.
        (Which node holds which ranks is the c10d rendezvous' choice, made at each start.)"""
        parts = []
        rows = self.roles(profile)
        training = [r for r in rows if r["role"].startswith("training")]
        if profile.device == "cpu":
            return f"{len(training)} machine(s), {profile.num_gpus} processes"
        nodes = f"node 0-{len(training) - 1}" if len(training) > 1 else "node 0"
        each = " each" if len(training) > 1 else ""
        mode = f"ZeRO-{profile.zero_stage}" if profile.zero_stage else "DDP"
        verb = "train" if len(training) > 1 else "trains"
        parts.append(
            f"{nodes}: {verb} on {training[0]['training_gpus']} GPU(s){each} ({profile.num_gpus} ranks, {mode})"
            if profile.num_gpus > 1
            else f"{nodes}: trains on 1 GPU"
        )
        tp = f", TP {profile.vllm_tensor_parallel}" if profile.vllm_tensor_parallel > 1 else ""
        if training and training[0].get("server_gpus"):
            parts.append(
                f"node 0 also: the vLLM server on {training[0]['server_gpus']} GPU(s) after its training GPUs{tp}"
            )
        if self.server_node:
            parts.append(f"node {self.training_nodes}: the vLLM server on {profile.vllm_server_gpus} GPU(s){tp}")
        return "; ".join(parts)


def node_layout(profile, nodes: int | None = None, env: Mapping[str, str] | None = None) -> NodeLayout:
    """The profile's layout. Planning for `nodes` nodes (`plan --nodes N`): a vLLM server gets the last node of
    its own when there are several (all N train otherwise). At run time (`nodes` None): the machines this one
    stands among, and a server node when GRPO_SERVER_NODE names one."""
    own_server = profile.uses_vllm_server and profile.device == "cuda"
    if nodes is None:
        return NodeLayout(topology(env).num_machines, own_server and server_node(env) is not None)
    own_server = own_server and nodes > 1
    return NodeLayout(nodes - own_server, own_server)
