"""HOW a profile runs on more than one GPU: the accelerate (and DeepSpeed) configuration, the command line of
one attempt, and the vLLM server that generates for it in server mode.

A single-GPU profile runs as before: `python train.py --profile P --attempt-dir D`, Unsloth in one process.
A distributed profile (num_gpus > 1, or a vLLM server) runs the same script under
`python -m accelerate.commands.launch --config_file D/accelerate.yaml train.py ...`: one process per training
GPU, plain TRL + PEFT (Unsloth is a single-device path), DDP or DeepSpeed ZeRO as the profile says. In server
mode `trl vllm-serve` runs on GPUs of its own, is health-checked before training starts, and is stopped after.

Multi-node: every machine runs the same command; GRPO_NUM_MACHINES, GRPO_MACHINE_RANK, GRPO_MAIN_ADDRESS and
GRPO_MAIN_PORT say where it stands (see `topology`). Nothing here imports torch, accelerate or TRL.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml

from launcher.errors import UsageError
from launcher.estimate import ZERO3_MAX_LIVE_ELEMENTS, ZERO3_PREFETCH_ELEMENTS, ZERO_BUCKET_ELEMENTS

TRAIN_PY = Path(__file__).resolve().parents[1] / "train.py"
ACCELERATE_CONFIG = "accelerate.yaml"
DEEPSPEED_CONFIG = "deepspeed.json"
SERVER_LOG = "vllm-server.log"
OUTCOME_FILE = "outcome.json"
RANK_OUTCOME_GLOB = "outcome-rank*.json"

ENV_NUM_MACHINES = "GRPO_NUM_MACHINES"
ENV_MACHINE_RANK = "GRPO_MACHINE_RANK"
ENV_MAIN_ADDRESS = "GRPO_MAIN_ADDRESS"
ENV_MAIN_PORT = "GRPO_MAIN_PORT"
# Where the trainer finds the vLLM server (the trainer passes them to GRPOConfig's vllm_server_host/port).
ENV_VLLM_HOST = "GRPO_VLLM_HOST"
ENV_VLLM_PORT = "GRPO_VLLM_PORT"
# Set for the training processes of a distributed attempt: Unsloth patches a single device only.
NO_UNSLOTH_ENV = "GRPO_TRAIN_NO_UNSLOTH"
DEFAULT_VLLM_PORT = 8000
DEFAULT_MAIN_PORT = 29500

# Worst first: the status an attempt gets when its ranks disagree. A rank killed because another rank
# failed reports "interrupted"; the failure that started it is what the supervisor must act on.
STATUS_ORDER = ("oom", "error", "unsupported", "interrupted", "ok")


# ---------------------------------------------------------------------------------------------------
# Where this machine stands

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


def processes_per_machine(profile, topo: Topology) -> int:
    if profile.num_gpus % topo.num_machines:
        raise UsageError(f"profile '{profile.name}': num_gpus {profile.num_gpus} cannot be split evenly over "
                         f"{topo.num_machines} machines (fix: a multiple of {topo.num_machines}, or "
                         f"{ENV_NUM_MACHINES})")
    return profile.num_gpus // topo.num_machines


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


# ---------------------------------------------------------------------------------------------------
# Configuration files

def deepspeed_config(profile) -> dict:
    """DeepSpeed's JSON for the profile's ZeRO stage. "auto" values are filled by the HF Trainer from the
    GRPOConfig the trainer builds (batch, accumulation, clipping, precision), so they cannot disagree. The
    bucket sizes are the estimator's (launcher.estimate), so the plan counts what DeepSpeed allocates."""
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
        # precision comes from the GRPOConfig (bf16 or fp16 by the card); accelerate must not override it
        "mixed_precision": "no",
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
    """Write DIR/accelerate.yaml (and DIR/deepspeed.json for ZeRO); returns the accelerate config's path."""
    topo = topo or topology(env)
    attempt_dir = Path(attempt_dir)
    attempt_dir.mkdir(parents=True, exist_ok=True)
    processes_per_machine(profile, topo)  # refuse an uneven split before anything starts
    train_ids, _server_ids = gpu_assignment(profile, topo, env)
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

def child_command(profile, attempt_dir, resume_from=None, python: str | None = None,
                  env: dict | None = None) -> list[str]:
    """The argv of one attempt. `attempt_dir/profile.yaml` must hold the profile (the supervisor writes it).

    Single-GPU: [python, train.py, --profile, DIR/profile.yaml, --attempt-dir, DIR (, --resume-from CKPT)].
    Distributed: the same script under accelerate, after writing DIR/accelerate.yaml (and deepspeed.json).
    """
    attempt_dir = Path(attempt_dir)
    python = python or sys.executable
    script = [str(TRAIN_PY), "--profile", str(attempt_dir / "profile.yaml"), "--attempt-dir", str(attempt_dir)]
    if resume_from:
        script += ["--resume-from", str(resume_from)]
    if not profile.distributed:
        return [python, *script]
    config = write_launch_files(profile, attempt_dir, env=env)
    return [python, "-m", "accelerate.commands.launch", "--config_file", str(config), *script]


def launch_env(profile, base: dict | None = None, server_port: int | None = None) -> dict:
    """The environment of a distributed attempt, on top of the supervisor's own (`base`)."""
    env = dict(os.environ if base is None else base)
    if not profile.distributed:
        return env
    env[NO_UNSLOTH_ENV] = "1"
    env.pop("UNSLOTH_VLLM_STANDBY", None)
    if profile.device == "cpu":
        # each process gets its share of the cores instead of all of them (oversubscription is slower)
        cores = os.cpu_count() or 1
        env.setdefault("OMP_NUM_THREADS", str(max(1, cores // profile.num_gpus)))
    if profile.uses_vllm_server:
        topo = topology(env)
        env.setdefault(ENV_VLLM_HOST, topo.main_address if topo.multi_node else "127.0.0.1")
        env[ENV_VLLM_PORT] = str(server_port or env.get(ENV_VLLM_PORT) or DEFAULT_VLLM_PORT)
    return env


# ---------------------------------------------------------------------------------------------------
# The vLLM server (server mode)

def server_command(profile, port: int, host: str = "0.0.0.0", python: str | None = None) -> list[str]:
    """`trl vllm-serve` for the profile: data-parallel copies x tensor-parallel slices = vllm_server_gpus."""
    python = python or sys.executable
    tp = profile.vllm_tensor_parallel
    command = [python, "-m", "trl.cli.main", "vllm-serve",
               "--model", profile.model,
               "--tensor_parallel_size", str(tp),
               "--data_parallel_size", str(profile.vllm_server_gpus // tp),
               "--host", host, "--port", str(port),
               "--gpu_memory_utilization", str(profile.gpu_memory_utilization),
               "--max_model_len", str(profile.max_seq_length)]
    if profile.trust_remote_code:
        command.append("--trust_remote_code")
    return command


class ServerError(RuntimeError):
    """The vLLM server did not come up (its exit status and the end of its log say why)."""


def _log_tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.strip().splitlines()[-lines:])


def parent_death_signal():
    """A function for a child process to run before exec: get SIGTERM if the supervisor dies, instead of
    holding the GPU unattended (a training child saves and stops; a vLLM server shuts down). Linux only
    (prctl); None elsewhere. libc is looked up here, in the parent, so that the forked child only makes the
    call (no import between fork and exec)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def set_signal() -> None:
        prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG

    return set_signal


class VllmServer:
    """One `trl vllm-serve` process for an attempt: start, wait until /health answers, stop.

    Usable as a context manager; `command` replaces the real server (tests run a small HTTP server)."""

    def __init__(self, profile, attempt_dir, gpu_ids: list[str], port: int | None = None,
                 host: str = "127.0.0.1", command: list[str] | None = None, env: dict | None = None):
        self.profile = profile
        self.attempt_dir = Path(attempt_dir)
        self.gpu_ids = list(gpu_ids)
        self.host = host
        self.port = port or free_port()
        self.command = command or server_command(profile, self.port)
        self.base_env = dict(os.environ if env is None else env)
        self.proc: subprocess.Popen | None = None
        self.log_path = self.attempt_dir / SERVER_LOG

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> "VllmServer":
        env = dict(self.base_env)
        if self.gpu_ids:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(self.gpu_ids)
        env["PYTHONUNBUFFERED"] = "1"
        self.attempt_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            # its own session, so that stop() reaches vLLM's worker processes too
            self.proc = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=env, start_new_session=True,
                                         preexec_fn=parent_death_signal())
        return self

    def healthy(self, timeout: float = 2.0) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=timeout) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def wait_healthy(self, timeout: float = 900.0, interval: float = 1.0) -> float:
        """Block until /health answers 200; seconds waited. ServerError when the server exits or the time
        runs out (loading a large model into vLLM takes minutes: the default allows 15)."""
        if self.proc is None:
            raise ServerError("the vLLM server was not started")
        started = time.monotonic()
        while True:
            if self.healthy():
                return time.monotonic() - started
            code = self.proc.poll()
            if code is not None:
                raise ServerError(f"the vLLM server exited with status {code} before it answered "
                                  f"{self.url}/health; end of {self.log_path}:\n{_log_tail(self.log_path)}")
            if time.monotonic() - started > timeout:
                self.stop()
                raise ServerError(f"the vLLM server did not answer {self.url}/health within {timeout:.0f} s; "
                                  f"end of {self.log_path}:\n{_log_tail(self.log_path)}")
            time.sleep(interval)

    def stop(self, grace: float = 30.0) -> int | None:
        """SIGTERM to the server's process group, SIGKILL after `grace` seconds; its exit status."""
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
                try:
                    os.killpg(proc.pid, sig)
                except (ProcessLookupError, PermissionError):
                    break
                try:
                    proc.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        return proc.poll()

    def __enter__(self) -> "VllmServer":
        self.start()
        self.wait_healthy()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def start_server(profile, attempt_dir, env: dict | None = None, timeout: float = 900.0,
                 command: list[str] | None = None) -> VllmServer | None:
    """Start and health-check the attempt's vLLM server; None when the profile has none (or on machines
    other than 0 of a multi-node run). The caller stops it when the attempt ends, whatever its outcome."""
    env = dict(os.environ if env is None else env)
    if not profile.uses_vllm_server or profile.device == "cpu":
        return None
    topo = topology(env)
    if topo.machine_rank != 0:
        return None
    _train_ids, server_ids = gpu_assignment(profile, topo, env)
    port = int(env.get(ENV_VLLM_PORT) or 0) or free_port()
    server = VllmServer(profile, attempt_dir, server_ids, port=port, command=command, env=env)
    server.start()
    try:
        server.wait_healthy(timeout=timeout)
    except BaseException:
        server.stop()
        raise
    return server


# ---------------------------------------------------------------------------------------------------
# Reading a distributed attempt's outcome

def merge_outcomes(attempt_dir) -> dict | None:
    """One outcome for the whole attempt from every rank's file (outcome.json from rank 0, and
    outcome-rank<N>.json from each rank where the trainer writes them): the worst status wins, so an OOM
    in rank 3 is the attempt's OOM even though rank 0 was only stopped because of it. Steps and checkpoint
    come from rank 0 (it saves the checkpoints); peak memory is the largest of any rank. None when no rank
    wrote an outcome."""
    attempt_dir = Path(attempt_dir)
    outcomes: list[tuple[int, dict]] = []
    for path in [attempt_dir / OUTCOME_FILE, *sorted(attempt_dir.glob(RANK_OUTCOME_GLOB))]:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict) or data.get("status") not in STATUS_ORDER:
            continue
        stem = path.stem
        rank = int(stem.rsplit("rank", 1)[-1]) if "rank" in stem and stem.rsplit("rank", 1)[-1].isdigit() else 0
        outcomes.append((rank, data))
    if not outcomes:
        return None
    worst_rank, worst = min(outcomes, key=lambda item: (STATUS_ORDER.index(item[1]["status"]), item[0]))
    main = next((data for rank, data in outcomes if rank == 0), worst)
    merged = dict(worst)
    merged["steps"] = main.get("steps", worst.get("steps"))
    merged["checkpoint"] = main.get("checkpoint") or worst.get("checkpoint")
    peaks = [data.get("peak_gib") for _rank, data in outcomes if isinstance(data.get("peak_gib"), (int, float))]
    merged["peak_gib"] = max(peaks) if peaks else None
    merged["rank"] = worst_rank
    merged["ranks"] = len({rank for rank, _data in outcomes})
    if worst["status"] != "ok" and merged.get("error"):
        merged["error"] = f"rank {worst_rank}: {merged['error']}"
    return merged
