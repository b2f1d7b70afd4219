"""WHERE this machine stands in a run, and how many of a profile's GPUs it trains on.

`split_over_machines` is the one rule for dividing a profile's training GPUs over machines: the planner
judges with it and the launcher starts with it, so the planner never chooses a split the launcher refuses.
Multi-node: every machine runs the same command; GRPO_NUM_MACHINES, GRPO_MACHINE_RANK, GRPO_MAIN_ADDRESS and
GRPO_MAIN_PORT say where it stands. Nothing here imports torch or accelerate.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from contract.attempt import DEFAULT_MAIN_PORT
from contract.environment import ENV_MACHINE_RANK, ENV_MAIN_ADDRESS, ENV_MAIN_PORT, ENV_NUM_MACHINES
from contract.errors import UsageError


@dataclass(frozen=True)
class Topology:
    num_machines: int = 1
    machine_rank: int = 0
    main_address: str = "127.0.0.1"
    main_port: int | None = None  # None on one machine: a free port is taken at launch

    @property
    def multi_node(self) -> bool:
        return self.num_machines > 1


def _int_env(env: dict, name: str, default: int, low: int, high: int | None = None) -> int:
    raw = env.get(name, "")
    if raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise UsageError(f"{name}={raw!r}: expected a whole number") from None
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f">= {low}"
        raise UsageError(f"{name}={value}: must be {bound}")
    return value


def topology(env: dict | None = None) -> Topology:
    """This machine's place in a multi-node run, from the environment (one machine when unset)."""
    env = os.environ if env is None else env
    machines = _int_env(env, ENV_NUM_MACHINES, 1, 1)
    rank = _int_env(env, ENV_MACHINE_RANK, 0, 0, machines - 1)
    address = env.get(ENV_MAIN_ADDRESS, "").strip()
    port = _int_env(env, ENV_MAIN_PORT, 0, 0, 65535) or None
    if machines > 1:
        if not address:
            raise UsageError(f"{ENV_NUM_MACHINES}={machines}: {ENV_MAIN_ADDRESS} must name machine 0 "
                             "(an address every machine can reach)")
        port = port or DEFAULT_MAIN_PORT  # every machine must agree on it: no free-port guess
    return Topology(machines, rank, address or "127.0.0.1", port)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def split_over_machines(num_gpus: int, machines: int, name: str = "the profile") -> int:
    """Training GPUs (processes) per machine: num_gpus split evenly, every machine training on at least one.
    UsageError for a split that does not come out even."""
    machines = max(1, machines)
    if num_gpus % machines:
        raise UsageError(f"profile '{name}': num_gpus {num_gpus} cannot be split evenly over {machines} "
                         f"machines (fix: a multiple of {machines}, or {ENV_NUM_MACHINES})")
    return num_gpus // machines


def processes_per_machine(profile, topo: Topology) -> int:
    return split_over_machines(profile.num_gpus, topo.num_machines, profile.name)


def visible_gpu_ids(env: dict | None = None, count: int = 0) -> list[str]:
    """This machine's GPUs as CUDA_VISIBLE_DEVICES names them (indices, or UUIDs), else 0..count-1."""
    env = os.environ if env is None else env
    value = env.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return [str(i) for i in range(count)]
    return [item.strip() for item in value.split(",") if item.strip()]


def gpu_assignment(profile, topo: Topology | None = None, env: dict | None = None) -> tuple[list[str], list[str]]:
    """(training GPU ids, vLLM server GPU ids) on this machine: training first, the server after them.
    The server runs on machine 0 only."""
    topo = topo or topology(env)
    if profile.device == "cpu":
        return [], []
    train = processes_per_machine(profile, topo)
    server = profile.vllm_server_gpus if profile.uses_vllm_server and topo.machine_rank == 0 else 0
    ids = visible_gpu_ids(env, train + server)
    if len(ids) < train + server:
        raise UsageError(f"profile '{profile.name}' needs {train + server} GPUs on this machine "
                         f"({train} training{f' + {server} vLLM server' if server else ''}), "
                         f"CUDA_VISIBLE_DEVICES shows {len(ids)} (fix: show more GPUs, or lower num_gpus)")
    return ids[:train], ids[train:train + server]
