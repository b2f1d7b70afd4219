"""HOW a profile runs on more than one GPU: the accelerate (and DeepSpeed) configuration, the command line of
one attempt, and its environment.

A single-GPU profile runs as `python train.py attempt --profile P --attempt-dir D`, Unsloth in one process. A
distributed profile (num_gpus > 1, or a vLLM server) runs the same script under
`python -m accelerate.commands.launch --config_file D/accelerate.yaml train.py ...`: one process per training
GPU, plain TRL + PEFT (Unsloth is a single-device path), DDP or DeepSpeed ZeRO as the profile says. On several
machines the rendezvous is torch elastic's c10d, hosted by machine 0, with a bounded number of restarts and a
join timeout, so that a lost machine fails the attempt instead of hanging it. Where this machine stands is
launcher.card.topology's; the vLLM server of server mode is launcher.run.vllm_server's. Nothing here imports
torch, accelerate or TRL.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import yaml

from contract.attempt import PROFILE_FILE
from contract.environment import ENV_NO_UNSLOTH, ENV_VLLM_STANDBY
from launcher.card.topology import (
    Topology,
    elastic,
    free_port,
    gpu_assignment,
    processes_per_machine,
    topology,
    vllm_endpoint,
)
from launcher.memory.estimate import ZERO3_MAX_LIVE_ELEMENTS, ZERO3_PREFETCH_ELEMENTS, ZERO_BUCKET_ELEMENTS

TRAIN_PY = Path(__file__).resolve().parents[2] / "train.py"
ACCELERATE_CONFIG = "accelerate.yaml"
DEEPSPEED_CONFIG = "deepspeed.json"


def launch_file(name: str, machine_rank: int = 0) -> str:
    """A launch file's name in the attempt folder: machine 0's plain, machine N's with its rank (on a shared
    folder each machine writes its own: they differ in machine_rank)."""
    if not machine_rank:
        return name
    stem, dot, suffix = name.rpartition(".")
    return f"{stem}-machine{machine_rank}{dot}{suffix}"


# ---------------------------------------------------------------------------------------------------
# Configuration files


def deepspeed_config(profile) -> dict:
    """DeepSpeed's JSON for the profile's ZeRO stage. "auto" values are filled by the HF Trainer from the
    GRPOConfig the trainer builds (batch, accumulation, clipping, precision), so they cannot disagree. The
    bucket sizes are the estimator's (launcher.memory.estimate), so the plan counts what DeepSpeed allocates."""
    stage = profile.zero_stage
    zero: dict = {
        "stage": stage,
        "overlap_comm": False,
        "contiguous_gradients": True,
        "reduce_bucket_size": ZERO_BUCKET_ELEMENTS,
    }
    if stage in (1, 2):
        zero["allgather_bucket_size"] = ZERO_BUCKET_ELEMENTS
    if stage == 3:
        zero.update(
            {
                "stage3_prefetch_bucket_size": ZERO3_PREFETCH_ELEMENTS,
                "stage3_max_live_parameters": ZERO3_MAX_LIVE_ELEMENTS,
                "stage3_max_reuse_distance": ZERO3_MAX_LIVE_ELEMENTS,
                "stage3_gather_16bit_weights_on_model_save": True,
            }
        )
    return {
        "train_micro_batch_size_per_gpu": "auto",
        "train_batch_size": "auto",
        "gradient_accumulation_steps": "auto",
        "gradient_clipping": "auto",
        "bf16": {"enabled": "auto"},
        "fp16": {"enabled": "auto"},
        "zero_optimization": zero,
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }


def accelerate_config(
    profile, topo: Topology, port: int, train_gpu_ids: list[str], deepspeed_file: Path | None = None
) -> dict:
    """accelerate's config file for one attempt (the keys `accelerate config` writes)."""
    cpu = profile.device == "cpu"
    if cpu or profile.zero_stage == 0:
        # accelerate starts several processes through torchrun only for its MULTI_GPU type (MULTI_CPU goes
        # through mpirun); on a cpu profile each process then picks gloo itself, since it trains with use_cpu.
        kind = "MULTI_GPU" if profile.num_gpus > 1 else "NO"
    else:
        kind = "DEEPSPEED"
    config = {
        "compute_environment": "LOCAL_MACHINE",
        "debug": False,
        "distributed_type": kind,
        "downcast_bf16": "no",
        "machine_rank": topo.machine_rank,
        "main_training_function": "main",
        "num_machines": topo.num_machines,
        "num_processes": profile.num_gpus,
        # several machines: torch elastic's c10d rendezvous at machine 0's address (accelerate passes it as the
        # rendezvous endpoint only when same_network is off); one machine: a static one on a free local port
        "rdzv_backend": "c10d" if topo.multi_node else "static",
        "same_network": not topo.multi_node,
        "main_process_port": port,
        "use_cpu": cpu,
        "tpu_env": [],
        "tpu_use_cluster": False,
        "tpu_use_sudo": False,
    }
    if kind != "DEEPSPEED":
        # precision comes from the GRPOConfig (bf16 or fp16 by the card); accelerate must not override it.
        # Under DeepSpeed the key must be absent: accelerate then lists it in ACCELERATE_CONFIG_DS_FIELDS and
        # DeepSpeedPlugin refuses every config file that comes with it ("... will be ignored ...
        # mixed_precision"); the file's "auto" precision is filled from the GRPOConfig instead.
        config["mixed_precision"] = "no"
    if topo.multi_node:
        config["main_process_ip"] = topo.main_address
    if not cpu:
        config["gpu_ids"] = ",".join(train_gpu_ids) if train_gpu_ids else "all"
    if kind == "DEEPSPEED":
        config["deepspeed_config"] = {
            "deepspeed_config_file": str(deepspeed_file),
            "deepspeed_multinode_launcher": "standard",
            "zero3_init_flag": profile.zero_stage == 3,
        }
    return config


def write_launch_files(profile, attempt_dir: Path, topo: Topology | None = None, env: dict | None = None) -> Path:
    """Write DIR/accelerate.yaml (and DIR/deepspeed.json for ZeRO); returns the accelerate config's path.
    UsageError (before anything is written) when this machine cannot take its share of the profile."""
    topo = topo or topology(env)
    processes_per_machine(profile, topo)  # an uneven split is refused on cpu profiles too
    train_ids, _server_ids = gpu_assignment(profile, topo, env)  # too few GPUs here is refused
    attempt_dir = Path(attempt_dir)
    attempt_dir.mkdir(parents=True, exist_ok=True)
    deepspeed_file = None
    if profile.zero_stage and profile.device != "cpu":
        deepspeed_file = attempt_dir / launch_file(DEEPSPEED_CONFIG, topo.machine_rank)
        deepspeed_file.write_text(json.dumps(deepspeed_config(profile), indent=2) + "\n", encoding="utf-8")
    port = topo.main_port or free_port()
    config = accelerate_config(profile, topo, port, train_ids, deepspeed_file)
    path = attempt_dir / launch_file(ACCELERATE_CONFIG, topo.machine_rank)
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def rendezvous_arguments(topo: Topology, env: dict | None = None) -> list[str]:
    """accelerate launch's own options for several machines (its config file has no key for them): the
    bounded restarts and the c10d rendezvous' join timeout; machine 0 hosts the rendezvous' store (said, not
    guessed from host names, which fails where two machines share one, as on a test's localhost)."""
    if not topo.multi_node:
        return []
    settings = elastic(env)
    return [
        "--max_restarts",
        str(settings.max_restarts),
        "--rdzv_conf",
        f"join_timeout={settings.rdzv_timeout_s},is_host={int(topo.machine_rank == 0)}",
    ]


# ---------------------------------------------------------------------------------------------------
# The attempt's command line and environment


def attempt_argv(
    profile,
    attempt_dir,
    resume_from=None,
    python: str | None = None,
    launch_config: Path | None = None,
    topo: Topology | None = None,
    env: dict | None = None,
) -> list[str]:
    """The argv of one attempt (writes nothing). `attempt_dir/profile.yaml` must hold the profile.

    Single-GPU: [python, train.py, attempt, --profile, DIR/profile.yaml, --attempt-dir, DIR (, --resume-from CKPT)].
    Distributed: the same script under accelerate with `launch_config` (from `write_launch_files`) and, on
    several machines (`topo`, else the environment's), the rendezvous' options.
    """
    attempt_dir = Path(attempt_dir)
    python = python or sys.executable
    script = [str(TRAIN_PY), "attempt", "--profile", str(attempt_dir / PROFILE_FILE), "--attempt-dir", str(attempt_dir)]
    if resume_from:
        script += ["--resume-from", str(resume_from)]
    if not profile.distributed:
        return [python, *script]
    if launch_config is None:
        raise ValueError(f"profile '{profile.name}' is distributed: write_launch_files first and pass its path")
    topo = topo or topology(env)
    return [
        python,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(launch_config),
        *rendezvous_arguments(topo, env),
        *script,
    ]


def launch_env(profile, base: dict | None = None) -> dict:
    """The environment of a distributed attempt, on top of the supervisor's own (`base`). In server mode the
    trainers are told the server's address and ports (launcher.card.topology.vllm_endpoint): computed from the
    same variables on every machine, so every machine's trainers reach the one server."""
    env = dict(os.environ if base is None else base)
    if not profile.distributed:
        return env
    env[ENV_NO_UNSLOTH] = "1"  # Unsloth patches a single device only
    env.pop(ENV_VLLM_STANDBY, None)
    if profile.device == "cpu":
        # each process gets its share of the cores instead of all of them (oversubscription is slower)
        cores = os.cpu_count() or 1
        env.setdefault("OMP_NUM_THREADS", str(max(1, cores // profile.num_gpus)))
    if profile.uses_vllm_server:
        env.update(vllm_endpoint(env).to_env())
    return env
