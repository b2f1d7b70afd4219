"""Every environment variable grpo-train reads or sets, in one table: its name, who sets it, who reads it,
and what it means. The attempt's own variables are set by the supervisor for each child process; the user's
are read at start. `docs/interfaces.md` lists this table, and a test holds the code to it (every `GRPO_`
name in the source is a row here). Also where the caches that variables name are (`cache_root`, `hub_cache`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

USER, SUPERVISOR, IMAGE, SLURM = "user", "supervisor", "image", "slurm"


@dataclass(frozen=True)
class Variable:
    name: str
    set_by: str  # USER: a person or a job script; SUPERVISOR: the launcher, for a child process; IMAGE: the
    # Dockerfile; SLURM: srun
    meaning: str


# The user's: read at start, never written by grpo-train
ENV_CACHE = "GRPO_TRAIN_CACHE"
ENV_LEDGER = "GRPO_TRAIN_LEDGER"
ENV_INJECT_OOM = "GRPO_INJECT_OOM"
ENV_NO_UNSLOTH = "GRPO_TRAIN_NO_UNSLOTH"
ENV_NUM_MACHINES = "GRPO_NUM_MACHINES"
ENV_MACHINE_RANK = "GRPO_MACHINE_RANK"
ENV_MAIN_ADDRESS = "GRPO_MAIN_ADDRESS"
ENV_MAIN_PORT = "GRPO_MAIN_PORT"
ENV_GPUS_PER_NODE = "GRPO_GPUS_PER_NODE"
ENV_RUN_ID = "GRPO_RUN_ID"
ENV_MAX_RESTARTS = "GRPO_MAX_RESTARTS"
ENV_RDZV_TIMEOUT = "GRPO_RDZV_TIMEOUT"
ENV_MACHINE_TIMEOUT = "GRPO_MACHINE_TIMEOUT"
ENV_SERVER_NODE = "GRPO_SERVER_NODE"
ENV_VLLM_HOST = "GRPO_VLLM_HOST"
ENV_VLLM_PORT = "GRPO_VLLM_PORT"
ENV_CODE_SANDBOX_URL = "GRPO_CODE_SANDBOX_URL"
# The GPU image's: set by the Dockerfile
ENV_IMAGE = "GRPO_TRAIN_IMAGE"
ENV_LLAMA_CPP = "GRPO_LLAMA_CPP"
ENV_VLLM_GROUP_PORT = "GRPO_VLLM_GROUP_PORT"
# The supervisor's, for one attempt's process
ENV_ESTIMATE_GIB = "GRPO_ATTEMPT_ESTIMATE_GIB"
ENV_PREDICTED_STEP_S = "GRPO_ATTEMPT_PREDICTED_STEP_S"
ENV_EXPECTED_TOKENS = "GRPO_ATTEMPT_EXPECTED_TOKENS"
ENV_LENGTH_REPLAN = "GRPO_LENGTH_REPLAN"
ENV_RUN_DEADLINE = "GRPO_RUN_DEADLINE"
ENV_RUN_BUDGET_S = "GRPO_RUN_BUDGET_S"
ENV_PROBE_ONLY = "GRPO_PROBE_ONLY"
ENV_RANDOM_WEIGHTS = "GRPO_RANDOM_WEIGHTS"
# SLURM's, read where GRPO_* leave a value unset. The node count and rank only inside an `srun` step (one task
# per node): the batch script itself, or an salloc shell, is one machine however many nodes the job holds.
SLURM_NUM_NODES = "SLURM_STEP_NUM_NODES"
SLURM_NUM_TASKS = "SLURM_STEP_NUM_TASKS"
SLURM_PROCID = "SLURM_PROCID"
SLURM_NODELIST = ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")
SLURM_GPUS_ON_NODE = "SLURM_GPUS_ON_NODE"
SLURM_JOB_ID = "SLURM_JOB_ID"
# torch elastic's, read by the attempt: which restart of the worker group this process is (0: the first start)
ENV_RESTART_COUNT = "TORCHELASTIC_RESTART_COUNT"
# Other tools' variables that grpo-train sets for an attempt
ENV_ALLOC_CONF = "PYTORCH_CUDA_ALLOC_CONF"
ENV_VLLM_STANDBY = "UNSLOTH_VLLM_STANDBY"
ENV_GOMP_SPINCOUNT = "GOMP_SPINCOUNT"
# A CPU attempt's: libgomp's threads spin up to 300,000 rounds at each operation's barrier. Beside a process that
# keeps one of two cores busy, the thread that had lost its core kept the other spinning, and a step of the CPU
# default took 23.9 s instead of 0.3; with a short spin 0.55 s. On idle cores it costs about 8% (100 steps: 33.9 s
# against 31.3).
CPU_SPINCOUNT = "1000"

VARIABLES: tuple[Variable, ...] = (
    Variable(
        ENV_CACHE,
        USER,
        "where grpo-train keeps what it builds and measures (the tiny model, the ledger, "
        "random-weight models); default ~/.cache/grpo-train",
    ),
    Variable(ENV_LEDGER, USER, "a ledger file to read and write instead of $GRPO_TRAIN_CACHE/ledger.jsonl"),
    Variable(
        ENV_INJECT_OOM,
        USER,
        "NAME[@STEP|@probe][,...]: an attempt of that profile raises a real "
        "torch.OutOfMemoryError at that step (default its first) or inside the probe; for testing the "
        "fallback without a GPU. Such a run records nothing in the ledger unless GRPO_TRAIN_LEDGER is set",
    ),
    Variable(ENV_NO_UNSLOTH, USER, "1: train through transformers + PEFT even where Unsloth imports"),
    Variable(
        ENV_CODE_SANDBOX_URL,
        USER,
        "the code rewards run programs on this Piston server instead of the local sandbox (docs/code-rewards.md)",
    ),
    Variable(
        ENV_NUM_MACHINES,
        USER,
        "several machines: how many train (default: SLURM_STEP_NUM_NODES; both set and different: exit 2)",
    ),
    Variable(
        ENV_MACHINE_RANK,
        USER,
        "several machines: this machine's rank, 0 for the first (default: "
        "SLURM_PROCID; both set and different: exit 2)",
    ),
    Variable(
        ENV_MAIN_ADDRESS,
        USER,
        "several machines: the address of machine 0, where the c10d rendezvous "
        "is hosted (default: the first host of SLURM_STEP_NODELIST; this one wins where both are set)",
    ),
    Variable(ENV_MAIN_PORT, USER, "several machines: the rendezvous port on machine 0 (default 29500)"),
    Variable(
        ENV_GPUS_PER_NODE,
        USER,
        "several machines: GPUs each machine shows (default: SLURM_GPUS_ON_NODE; both set and different: exit 2)",
    ),
    Variable(
        ENV_RUN_ID,
        USER,
        "several machines: the name every machine gives this run, so that they find the "
        "same run folder (default: SLURM_JOB_ID; this one wins where both are set, e.g. to resume a run "
        "in a new job)",
    ),
    Variable(
        ENV_MAX_RESTARTS,
        USER,
        "several machines: times torch elastic restarts a failed worker group "
        "inside one attempt before the attempt fails (default 1)",
    ),
    Variable(
        ENV_RDZV_TIMEOUT,
        USER,
        "several machines: seconds the c10d rendezvous waits for every machine to "
        "join (default 300); a machine lost mid-run fails the attempt within it",
    ),
    Variable(
        ENV_MACHINE_TIMEOUT,
        USER,
        "several machines: seconds a machine waits for machine 0's decision "
        "(and machine 0 for the others' answer) before it stops (default 600)",
    ),
    Variable(
        ENV_SERVER_NODE,
        USER,
        "server mode: the host that runs the vLLM server with `train.py serve` "
        "(a node of its own); unset: the server runs on machine 0's GPUs after its training GPUs",
    ),
    Variable(
        ENV_VLLM_HOST,
        USER,
        "server mode: the address trainers reach the vLLM server at (default: "
        "GRPO_SERVER_NODE, else machine 0's address)",
    ),
    Variable(
        ENV_VLLM_PORT, USER, "server mode: the vLLM server's port, the same on every machine (default 8000, TRL's)"
    ),
    Variable(
        ENV_VLLM_GROUP_PORT,
        USER,
        "server mode: the port of TRL's NCCL weight-sync group, hosted by the "
        "trainer that holds rank 0 (default 51216, TRL's)",
    ),
    Variable(
        ENV_IMAGE,
        IMAGE,
        "1: this process runs in the grpo-train image; a folder it cannot write is "
        "explained as a mount, its fix given as `docker run` options",
    ),
    Variable(
        ENV_LLAMA_CPP,
        USER,
        "export --gguf: a llama.cpp checkout (or its convert_hf_to_gguf.py); else the "
        "PATH, ~/llama.cpp and /opt/llama.cpp are looked in",
    ),
    Variable(ENV_ESTIMATE_GIB, SUPERVISOR, "the memory estimate (GiB) the plan judged this attempt by"),
    Variable(ENV_PREDICTED_STEP_S, SUPERVISOR, "the seconds per optimizer step the plan predicted for this attempt"),
    Variable(
        ENV_EXPECTED_TOKENS,
        SUPERVISOR,
        "the tokens the plan expects a completion to run: the length probe holds the measured mean against it",
    ),
    Variable(
        ENV_LENGTH_REPLAN,
        SUPERVISOR,
        "1: an attempt whose length probe finds answers cut at the cap stops before training (status replanned) "
        "for the supervisor to re-plan the cap; otherwise it trains on and says so",
    ),
    Variable(
        ENV_RUN_DEADLINE,
        SUPERVISOR,
        "train --hours: when the run's budget ends (seconds since the epoch); the attempt stops there with a "
        "checkpoint, the adapter and the report",
    ),
    Variable(
        ENV_RUN_BUDGET_S, SUPERVISOR, "train --hours: the run's whole budget in seconds (for the overrun warning)"
    ),
    Variable(ENV_PROBE_ONLY, SUPERVISOR, "1: load, run the worst-case probe, report it, stop (calibrate)"),
    Variable(
        ENV_RANDOM_WEIGHTS,
        SUPERVISOR,
        "1: the model's architecture with random weights, nothing downloaded (calibrate --random-weights)",
    ),
    Variable(
        ENV_ALLOC_CONF,
        SUPERVISOR,
        "PyTorch's allocator settings: expandable_segments:True is added "
        "unless vLLM standby is on; a user's own settings are kept",
    ),
    Variable(ENV_VLLM_STANDBY, SUPERVISOR, "Unsloth's vLLM standby, set from the profile's vllm_standby"),
    Variable(
        ENV_GOMP_SPINCOUNT,
        SUPERVISOR,
        "how long torch's OpenMP threads spin before they sleep: 1000 for a CPU attempt, so that a core "
        "another process keeps busy does not stall every step; a user's own value is kept",
    ),
    Variable(
        SLURM_NUM_NODES, SLURM, "machines that train (the nodes of this srun step), when GRPO_NUM_MACHINES is unset"
    ),
    Variable(
        SLURM_PROCID,
        SLURM,
        "inside an srun step: this machine's rank, when GRPO_MACHINE_RANK is unset "
        "(one task per node, SLURM_STEP_NUM_TASKS)",
    ),
    Variable(" / ".join(SLURM_NODELIST), SLURM, "its first host is machine 0, when GRPO_MAIN_ADDRESS is unset"),
    Variable(SLURM_GPUS_ON_NODE, SLURM, "GPUs per machine, when GRPO_GPUS_PER_NODE is unset"),
    Variable(SLURM_JOB_ID, SLURM, "the run's name on every machine, when GRPO_RUN_ID is unset"),
)


def table() -> list[dict]:
    """The variables as rows (name, set_by, meaning), for the docs and `--help`."""
    return [{"name": v.name, "set_by": v.set_by, "meaning": v.meaning} for v in VARIABLES]


def markdown() -> str:
    """The table of docs/interfaces.md (`python -m contract.environment` prints it; a test keeps the page equal)."""
    rows = ["| variable | set by | meaning |", "| --- | --- | --- |"]
    rows += [f"| `{v.name}` | {v.set_by} | {v.meaning.replace('|', chr(92) + '|')} |" for v in VARIABLES]
    return "\n".join(rows) + "\n"


def cache_root() -> Path:
    """Where grpo-train keeps what it builds and measures (the tiny model, the ledger): $GRPO_TRAIN_CACHE, or
    ~/.cache/grpo-train."""
    env = os.environ.get(ENV_CACHE)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "grpo-train"


def hub_cache() -> Path:
    """Where huggingface_hub keeps downloaded repositories, in its own order of precedence: HF_HUB_CACHE (or
    its older name HUGGINGFACE_HUB_CACHE), else HF_HOME/hub, else XDG_CACHE_HOME or ~/.cache, then
    huggingface/hub. The one place this project works it out (the catalogue reads configs there, the
    supervisor checks it can be written)."""
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(name):
            return Path(os.environ[name]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface"
    )
    return Path(home).expanduser() / "hub"


if __name__ == "__main__":
    print(markdown(), end="")
