"""HOW a profile runs on more than one GPU: the accelerate (and DeepSpeed) configuration, the command line of
one attempt, and its environment.

A single-GPU profile runs as `python train.py attempt --profile P --attempt-dir D`, Unsloth in one process. A
distributed profile (num_gpus > 1, or a vLLM server) runs the same script under
`python -m accelerate.commands.launch --config_file D/accelerate.yaml train.py ...`: one process per training
GPU, plain TRL + PEFT (Unsloth is a single-device path), DDP or DeepSpeed ZeRO as the profile says. Where this
machine stands is launcher.card.topology's; the vLLM server of server mode is launcher.run.vllm_server's. Nothing here
imports torch, accelerate or TRL.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import yaml

from contract.attempt import DEFAULT_VLLM_PORT, PROFILE_FILE
from contract.environment import ENV_NO_UNSLOTH, ENV_VLLM_HOST, ENV_VLLM_PORT, ENV_VLLM_STANDBY
from launcher.memory.estimate import ZERO3_MAX_LIVE_ELEMENTS, ZERO3_PREFETCH_ELEMENTS, ZERO_BUCKET_ELEMENTS
from launcher.card.topology import Topology, free_port, gpu_assignment, processes_per_machine, topology

TRAIN_PY = Path(__file__).resolve().parents[2] / "train.py"
ACCELERATE_CONFIG = "accelerate.yaml"
DEEPSPEED_CONFIG = "deepspeed.json"


# ---------------------------------------------------------------------------------------------------
# Configuration files

def deepspeed_config(profile) -> dict:
    """DeepSpeed's JSON for the profile's ZeRO stage. "auto" values are filled by the HF Trainer from the
    GRPOConfig the trainer builds (batch, accumulation, clipping, precision), so they cannot disagree. The
    bucket sizes are the estimator's (launcher.memory.estimate), so the plan counts what DeepSpeed allocates."""
    stage = profile.zero_stage
    zero: dict = {"stage": stage, "overlap_comm": False, "contiguous_gradients": True,
                  "reduce_bucket_size": ZERO_BUCKET_ELEMENTS}
    if stage in (1, 2):
        zero["allgather_bucket_size"] = ZERO_BUCKET_ELEMENTS
    if stage == 3:
        zero.update({"stage3_prefetch_bucket_size": ZERO3_PREFETCH_ELEMENTS,
                     "stage3_max_live_parameters": ZERO3_MAX_LIVE_ELEMENTS,
                     "stage3_max_reuse_distance": ZERO3_MAX_LIVE_ELEMENTS,
                     "stage3_gather_16bit_weights_on_model_save": True})
    return {"train_micro_batch_size_per_gpu": "auto", "train_batch_size": "auto",
            "gradient_accumulation_steps": "auto", "gradient_clipping": "auto",
            "bf16": {"enabled": "auto"}, "fp16": {"enabled": "auto"},
            "zero_optimization": zero, "steps_per_print": 10 ** 9, "wall_clock_breakdown": False}


def accelerate_config(profile, topo: Topology, port: int, train_gpu_ids: list[str],
                      deepspeed_file: Path | None = None) -> dict:
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
        "rdzv_backend": "static",
        "same_network": True,
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
        config["deepspeed_config"] = {"deepspeed_config_file": str(deepspeed_file),
                                      "deepspeed_multinode_launcher": "standard",
                                      "zero3_init_flag": profile.zero_stage == 3}
    return config


def write_launch_files(profile, attempt_dir: Path, topo: Topology | None = None,
                       env: dict | None = None) -> Path:
    """Write DIR/accelerate.yaml (and DIR/deepspeed.json for ZeRO); returns the accelerate config's path.
    UsageError (before anything is written) when this machine cannot take its share of the profile."""
    topo = topo or topology(env)
    processes_per_machine(profile, topo)  # an uneven split is refused on cpu profiles too
    train_ids, _server_ids = gpu_assignment(profile, topo, env)  # too few GPUs here is refused
    attempt_dir = Path(attempt_dir)
    attempt_dir.mkdir(parents=True, exist_ok=True)
    deepspeed_file = None
    if profile.zero_stage and profile.device != "cpu":
        deepspeed_file = attempt_dir / DEEPSPEED_CONFIG
        deepspeed_file.write_text(json.dumps(deepspeed_config(profile), indent=2) + "\n", encoding="utf-8")
    port = topo.main_port or free_port()
    config = accelerate_config(profile, topo, port, train_ids, deepspeed_file)
    path = attempt_dir / ACCELERATE_CONFIG
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------------------
# The attempt's command line and environment

def attempt_argv(profile, attempt_dir, resume_from=None, python: str | None = None,
                 launch_config: Path | None = None) -> list[str]:
    """The argv of one attempt (writes nothing). `attempt_dir/profile.yaml` must hold the profile.

    Single-GPU: [python, train.py, attempt, --profile, DIR/profile.yaml, --attempt-dir, DIR (, --resume-from CKPT)].
    Distributed: the same script under accelerate with `launch_config` (from `write_launch_files`).
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
    return [python, "-m", "accelerate.commands.launch", "--config_file", str(launch_config), *script]


def launch_env(profile, base: dict | None = None, server_port: int | None = None) -> dict:
    """The environment of a distributed attempt, on top of the supervisor's own (`base`)."""
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
        topo = topology(env)
        env.setdefault(ENV_VLLM_HOST, topo.main_address if topo.multi_node else "127.0.0.1")
        env[ENV_VLLM_PORT] = str(server_port or env.get(ENV_VLLM_PORT) or DEFAULT_VLLM_PORT)
    return env
