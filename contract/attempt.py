"""WHAT the supervisor and one attempt agree on: statuses, file names, environment variables, the outcome
record, checkpoints, and the environment an attempt starts with.

Both sides import this module (the supervisor in launcher/, the attempt in trainer/), so each fact lives
here once. Nothing here imports torch, TRL or Unsloth.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from contract.environment import (
    CPU_SPINCOUNT,
    ENV_ALLOC_CONF,
    ENV_ESTIMATE_GIB,
    ENV_EXPECTED_TOKENS,
    ENV_GOMP_SPINCOUNT,
    ENV_INJECT_OOM,
    ENV_LENGTH_REPLAN,
    ENV_PREDICTED_STEP_S,
    ENV_RANDOM_WEIGHTS,
    ENV_RUN_BUDGET_S,
    ENV_RUN_DEADLINE,
    ENV_VLLM_STANDBY,
)
from contract.errors import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK, EXIT_OUT_OF_MEMORY
from contract.safe_write import flushed_files, fsync_path, write_atomic

# ---------------------------------------------------------------------------------------------------
# Statuses of an attempt (attempts.jsonl `status`, outcome.json `status`)

OK = "ok"
OOM = "oom"
UNSUPPORTED = "unsupported"
ERROR = "error"
INTERRUPTED = "interrupted"
# A machine of a multi-node run was lost (its processes, or the network to it): nothing about memory or the
# code; the run stops and `train --resume` continues once every machine is up again
NODE = "node"
# The length probe found the answers cut at the cap before any step was trained: the supervisor re-plans the cap
# (and the memory and time that follow from it) and starts the next attempt (ENV_LENGTH_REPLAN allows it)
REPLANNED = "replanned"
STATUSES = (OK, OOM, UNSUPPORTED, ERROR, INTERRUPTED, NODE, REPLANNED)
# Why an attempt that ended ok stopped before max_steps (outcome.json and attempts.jsonl `stopped_by`)
STOPPED_BY_BUDGET = "budget"
# Worst first: the status an attempt gets when its ranks disagree. A rank killed because another rank
# failed reports "interrupted", and one whose peer died reports a lost node; the failure that started it is
# what the supervisor must act on.
STATUS_ORDER = (OOM, ERROR, UNSUPPORTED, NODE, INTERRUPTED, REPLANNED, OK)
# The attempt process's exit status for each (the supervisor reads outcome.json first; the exit status is
# what it has when the process died without one). Bad input exits EXIT_BAD_INPUT before any status exists.
EXIT_FOR_STATUS = {
    OK: EXIT_OK,
    OOM: EXIT_OUT_OF_MEMORY,
    INTERRUPTED: EXIT_INTERRUPTED,
    ERROR: EXIT_FAILURE,
    UNSUPPORTED: EXIT_FAILURE,
    NODE: EXIT_FAILURE,
    REPLANNED: EXIT_OK,  # it did what was asked of it: its outcome.json says what the supervisor re-plans
}

# ---------------------------------------------------------------------------------------------------
# Files of a run folder (OUTPUT_DIR/run-*/) and of an attempt folder (run-*/attempt-NN-<profile>/)

ATTEMPTS_FILE = "attempts.jsonl"
PLAN_FILE = "plan.json"
PROFILE_FILE = "profile.yaml"
LOG_FILE = "train.log"
OUTCOME_FILE = "outcome.json"
RANK_OUTCOME_GLOB = "outcome-rank*.json"
SERVER_LOG = "vllm-server.log"
METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "summary.json"
ADAPTER_DIR = "adapter"
# The model of the best held-out evaluation during training, where one beat every earlier evaluation and the final
# model did not match it (trainer.best_model); BEST_MARKER, written last, holds its step and accuracy
BEST_ADAPTER_DIR = "best-adapter"
BEST_MARKER = "best.json"
TENSORBOARD_DIR = "tensorboard"  # report_to: tensorboard writes its event files here
MERGED_DIR = "merged"  # save_merged / `export`: the merged 16-bit model
CHECKPOINT_PREFIX = "checkpoint-"
# Present while the user's own reward code runs (its name and entry inside): a process that ends there without
# an outcome (os._exit in the reward) is reported as that reward's doing
REWARD_RUNNING_FILE = "reward-running.json"

# What a measured GPU peak counts. The estimate counts the whole process (CUDA context and memory outside
# torch's allocator included); torch's own peak lacks both, and under vLLM standby includes the sleeping KV cache.
MEASURE_GPU_PROCESS = "GPU process (torch peak + non-torch memory, NVML)"
MEASURE_TORCH = "torch peak reserved"
# In a container NVML lists the host's pids, not ours: the card's use above what it held before this process's
# first CUDA call stands in for the process (its CUDA context included, as in MEASURE_GPU_PROCESS). Where that
# baseline could only be read after the context existed, the figure lacks the context and says so; the ledger
# adds the context to it as it does to torch's figure.
MEASURE_GPU_CARD = "GPU card use above the start, CUDA context included (NVML, pid not visible)"
MEASURE_GPU_CARD_NO_CONTEXT = "GPU card use above a baseline taken after the CUDA context (NVML, pid not visible)"

# TRL's defaults (`trl vllm-serve --port`, GRPOConfig.vllm_group_port): every machine computes the same ones
DEFAULT_VLLM_PORT = 8000
DEFAULT_VLLM_GROUP_PORT = 51216
DEFAULT_MAIN_PORT = 29500
# Several machines: torch elastic restarts of a failed worker group inside one attempt, the seconds the c10d
# rendezvous waits for every machine, and the seconds a machine waits for machine 0's decision
DEFAULT_MAX_RESTARTS = 1
DEFAULT_RDZV_TIMEOUT_S = 300
DEFAULT_MACHINE_TIMEOUT_S = 600
# The vLLM server's start-up (weights loaded, KV cache allocated, first health answer) must finish in this.
VLLM_SERVER_TIMEOUT_S = 900.0

# bf16 needs Ampere (compute capability 8.0) or newer; older cards train in fp16.
BF16_MIN_CAPABILITY = (8, 0)


def bf16_capable(capability: tuple[int, int] | list[int] | None) -> bool:
    """The one bf16 rule. An unknown capability (a what-if card) is taken as modern."""
    if not capability:
        return True
    return tuple(capability)[:2] >= BF16_MIN_CAPABILITY


# ---------------------------------------------------------------------------------------------------
# The outcome record: written by each attempt process, read by the supervisor


def outcome_name(rank: int = 0) -> str:
    """Rank 0's outcome is outcome.json (the only one of a single process); rank N's outcome-rankN.json."""
    return OUTCOME_FILE if rank == 0 else f"outcome-rank{rank}.json"


@dataclass
class Outcome:
    status: str = ERROR
    steps: int = 0
    checkpoint: str | None = None  # relative to the attempt folder where it lies inside it
    error: str | None = None  # one line
    error_text: str | None = None  # the exception's whole text
    traceback: str | None = None
    peak_gib: float | None = None
    peak_measure: str | None = None  # what peak_gib counts: MEASURE_GPU_PROCESS, MEASURE_TORCH or host RSS
    estimate_gib: float | None = None  # the supervisor's estimate, reported back unchanged
    rank: int = 0
    ranks: int = 1
    probe: dict | None = None  # the worst-case probe: {peak_gib, seconds, prompt_tokens, ...}
    # seconds per optimizer step measured (steady state) beside the plan's prediction: {step_s, steps_timed,
    # first_step_s, completion_mean, predicted_step_s, ratio} (trainer.timing.measured_step)
    timing: dict | None = None
    # the answers' measured lengths (contract.length_rule.MeasuredLengths' figures) with the chat template's
    # switches and the plan's cap and expected length: the length probe's, else the training steps'
    lengths: dict | None = None
    stopped_by: str | None = None  # STOPPED_BY_BUDGET: training stopped at the run's --hours budget

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Outcome | None:
        """An Outcome from parsed JSON; None when it is not one (no known status)."""
        if not isinstance(data, dict) or data.get("status") not in STATUSES:
            return None
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        if not isinstance(values.get("steps"), int) or isinstance(values.get("steps"), bool):
            values.pop("steps", None)
        return cls(**values)

    @classmethod
    def read(cls, path: Path) -> Outcome | None:
        try:
            return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))
        except (OSError, ValueError):
            return None

    def write(self, attempt_dir: Path, rank: int = 0) -> Path:
        """Atomically (a temporary file renamed over the old one): a reader never sees half an outcome."""
        return write_atomic(Path(attempt_dir) / outcome_name(rank), self.to_json())


def rank_of_outcome_file(path: Path) -> int:
    stem = Path(path).stem
    tail = stem.rsplit("rank", 1)[-1] if "rank" in stem else ""
    return int(tail) if tail.isdigit() else 0


def merge_outcomes(attempt_dir: Path) -> Outcome | None:
    """One outcome for the whole attempt from every rank's file: the worst status wins (an OOM in rank 3 is
    the attempt's OOM even though rank 0 was only stopped because of it). Steps and checkpoint come from
    rank 0 (it saves the checkpoints); the peak is the largest of any rank. None when no rank wrote one."""
    attempt_dir = Path(attempt_dir)
    found: list[tuple[int, Outcome]] = []
    for path in [attempt_dir / OUTCOME_FILE, *sorted(attempt_dir.glob(RANK_OUTCOME_GLOB))]:
        outcome = Outcome.read(path)
        if outcome is not None:
            found.append((rank_of_outcome_file(path), outcome))
    if not found:
        return None
    worst_rank, worst = min(found, key=lambda item: (STATUS_ORDER.index(item[1].status), item[0]))
    main = next((o for rank, o in found if rank == 0), worst)
    peaks = [o.peak_gib for _rank, o in found if isinstance(o.peak_gib, (int, float))]
    merged = Outcome(**asdict(worst))
    merged.steps = main.steps
    merged.checkpoint = main.checkpoint or worst.checkpoint
    merged.peak_gib = max(peaks) if peaks else None
    merged.rank = worst_rank
    merged.ranks = len({rank for rank, _o in found})
    merged.stopped_by = main.stopped_by or worst.stopped_by
    if worst.status != OK and merged.error and len(found) > 1:
        merged.error = f"rank {worst_rank}: {merged.error}"
    return merged


# ---------------------------------------------------------------------------------------------------
# Checkpoints


def checkpoint_step(path: str | Path | None) -> int:
    """The global step of a checkpoint-N folder (0 for anything else)."""
    if path is None:
        return 0
    try:
        return int(Path(path).name.rsplit("-", 1)[-1])
    except (TypeError, ValueError):
        return 0


# Written last into a checkpoint folder, once every file in it is on disk: the files and their sizes. A folder
# without it was cut short (a kill, a full disk) and is never resumed from.
COMPLETE_MARKER = "checkpoint-complete.json"
# Files a checkpoint must hold to resume training (the weights under one of their names, and the state).
_STATE_FILE = "trainer_state.json"
_WEIGHT_FILES = (
    "adapter_model.safetensors",
    "model.safetensors",
    "model.safetensors.index.json",
    "adapter_model.bin",
    "pytorch_model.bin",
)


def mark_checkpoint_complete(folder: Path) -> Path:
    """Flush every file of a just-written checkpoint to disk, then record them in COMPLETE_MARKER (written to a
    temporary name and renamed): the marker exists only when the checkpoint does, whole."""
    folder = Path(folder)
    files = flushed_files(folder, but=COMPLETE_MARKER)
    marker = write_atomic(
        folder / COMPLETE_MARKER, json.dumps({"step": checkpoint_step(folder), "files": files}, indent=1)
    )
    fsync_path(folder, directory=True)
    return marker


def _safetensors_header_ok(path: Path) -> bool:
    """The safetensors header (8-byte length, then JSON) reads and its tensors lie inside the file."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as handle:
            length = int.from_bytes(handle.read(8), "little")
            if length <= 0 or 8 + length > size:
                return False
            header = json.loads(handle.read(length))
    except (OSError, ValueError):
        return False
    ends = [
        info["data_offsets"][1]
        for key, info in header.items()
        if key != "__metadata__" and isinstance(info, dict) and "data_offsets" in info
    ]
    return 8 + length + max(ends, default=0) <= size


def checkpoint_problem(folder: Path) -> str | None:
    """Why a checkpoint cannot be resumed from, or None when it can: the completeness marker, every file it
    lists at its recorded size, the trainer state readable, and the weights' headers whole."""
    folder = Path(folder)
    if not folder.is_dir():
        return "not a folder"
    marker = folder / COMPLETE_MARKER
    if marker.is_file():
        try:
            files = json.loads(marker.read_text(encoding="utf-8"))["files"]
        except (OSError, ValueError, KeyError, TypeError):
            return f"{COMPLETE_MARKER} is damaged"
        for name, size in files.items():
            path = folder / name
            if not path.is_file():
                return f"{name} is missing"
            if path.stat().st_size != size:
                return f"{name} is {path.stat().st_size} bytes, {size} when it was saved"
    else:
        return f"no {COMPLETE_MARKER}: the save was cut short"
    try:
        json.loads((folder / _STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return f"{_STATE_FILE} is missing or unreadable"
    weights = [folder / name for name in _WEIGHT_FILES if (folder / name).is_file()]
    if not weights:
        return "no weights (adapter_model.safetensors or model.safetensors)"
    for path in weights:
        if path.suffix == ".safetensors" and not _safetensors_header_ok(path):
            return f"{path.name} is damaged (its header does not read)"
    return None


def latest_checkpoint(attempt_dir: Path, skipped: list[str] | None = None) -> Path | None:
    """The newest checkpoint-N folder of an attempt that can be resumed from. Newer ones that cannot are
    passed over, and why is appended to `skipped` (for the user: which one, and the reason)."""
    found = []
    for path in Path(attempt_dir).glob(CHECKPOINT_PREFIX + "*"):
        step = checkpoint_step(path)
        if step and path.is_dir() and path.name == f"{CHECKPOINT_PREFIX}{step}":
            found.append((step, path))
    for _step, path in sorted(found, reverse=True):
        problem = checkpoint_problem(path)
        if problem is None:
            return path
        if skipped is not None:
            skipped.append(f"{path.name}: {problem}")
    return None


# ---------------------------------------------------------------------------------------------------
# The environment an attempt starts with


def attempt_environment(profile, base: dict | None = None) -> dict:
    """The attempt's environment: expandable segments against fragmentation, except under vLLM standby
    (Unsloth's standby allocator does not work with them), where UNSLOTH_VLLM_STANDBY is set instead. A
    user's own allocator settings are kept. Used by the supervisor for the child and by the trainer on
    itself (an attempt started by hand gets the same)."""
    env = dict(os.environ if base is None else base)
    env["PYTHONUNBUFFERED"] = "1"  # the child's output reaches the log as it happens
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    # CUDA numbers GPUs fastest first by default, NVML (which the plan read) by PCI bus: make them agree
    env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    parts = [p for p in env.get(ENV_ALLOC_CONF, "").split(",") if p.strip()]
    if profile.vllm_standby:
        parts = [p for p in parts if not p.strip().startswith("expandable_segments")]
        env[ENV_VLLM_STANDBY] = "1"
    else:
        env.pop(ENV_VLLM_STANDBY, None)
        if profile.device == "cuda" and not any(p.strip().startswith("expandable_segments") for p in parts):
            parts.append("expandable_segments:True")
    if parts:
        env[ENV_ALLOC_CONF] = ",".join(parts)
    else:
        env.pop(ENV_ALLOC_CONF, None)
    if profile.device == "cpu":
        env.setdefault(ENV_GOMP_SPINCOUNT, CPU_SPINCOUNT)  # why: contract.environment.CPU_SPINCOUNT
    return env


def apply_attempt_environment(profile) -> None:
    """Set `attempt_environment` on this process (before `import unsloth`, which reads it at import)."""
    wanted = attempt_environment(profile)
    for key in (ENV_ALLOC_CONF, ENV_VLLM_STANDBY):
        if key not in wanted:
            os.environ.pop(key, None)
    os.environ.update(wanted)


def _positive_from_env(name: str, environ: dict | None) -> float | None:
    raw = (os.environ if environ is None else environ).get(name, "")
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if value > 0 and value == value and value != float("inf") else None


def estimate_from_env(environ: dict | None = None) -> float | None:
    """The supervisor's estimate for this attempt (ENV_ESTIMATE_GIB), or None when run without one."""
    return _positive_from_env(ENV_ESTIMATE_GIB, environ)


def predicted_step_from_env(environ: dict | None = None) -> float | None:
    """The seconds per step the plan predicted for this attempt (ENV_PREDICTED_STEP_S), or None."""
    return _positive_from_env(ENV_PREDICTED_STEP_S, environ)


def expected_tokens_from_env(environ: dict | None = None) -> int | None:
    """The tokens the plan expects a completion of this attempt to run (ENV_EXPECTED_TOKENS), or None."""
    value = _positive_from_env(ENV_EXPECTED_TOKENS, environ)
    return int(round(value)) if value is not None else None


def length_replan_allowed(environ=None) -> bool:
    """Whether the supervisor re-plans an attempt whose length probe finds its answers cut (ENV_LENGTH_REPLAN)."""
    return (os.environ if environ is None else environ).get(ENV_LENGTH_REPLAN, "") == "1"


def run_budget_from_env(environ: dict | None = None) -> tuple[float, float] | None:
    """(the run's deadline in seconds since the epoch, its whole budget in seconds) under train --hours, else
    None."""
    deadline = _positive_from_env(ENV_RUN_DEADLINE, environ)
    budget = _positive_from_env(ENV_RUN_BUDGET_S, environ)
    return (deadline, budget) if deadline is not None and budget is not None else None


def random_weights_requested(environ=None) -> bool:
    """Whether this attempt runs on random weights (the supervisor sets ENV_RANDOM_WEIGHTS)."""
    return (os.environ if environ is None else environ).get(ENV_RANDOM_WEIGHTS, "") not in ("", "0")


# ---------------------------------------------------------------------------------------------------
# GRPO_INJECT_OOM's value: which profiles' attempts raise a real OOM, and where

INJECT_AT_PROBE = "probe"  # NAME@probe: inside the worst-case probe before training (trainer.probe)


def parse_inject(text: str | None) -> dict[str, int | str]:
    """{profile name: step number, or INJECT_AT_PROBE}; malformed parts are refused (ValueError) with the
    variable's name and the expected form."""
    targets: dict[str, int | str] = {}
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        name, _, step = part.partition("@")
        name = name.strip()
        if not name:
            raise ValueError(f"{ENV_INJECT_OOM}={text!r}: empty profile name (expected NAME[@STEP][,NAME[@STEP]...])")
        value: int | str
        if step.strip().lower() == INJECT_AT_PROBE:
            value = INJECT_AT_PROBE
        elif step.strip():
            try:
                value = int(step)
            except ValueError:
                raise ValueError(
                    f"{ENV_INJECT_OOM}={text!r}: step {step!r} of {name!r} is neither a whole number "
                    f"nor '{INJECT_AT_PROBE}' (expected NAME[@STEP] or NAME@{INJECT_AT_PROBE})"
                ) from None
            if value < 1:
                raise ValueError(f"{ENV_INJECT_OOM}={text!r}: step of {name!r} must be >= 1")
        else:
            value = 1
        targets[name] = value
    return targets


# ---------------------------------------------------------------------------------------------------
# Paths in a run's records: relative to the folder that holds them, so that a moved run folder resumes


def relative_path(path: str | Path | None, base: Path) -> str | None:
    """`path` as written in a record kept in `base` (attempts.jsonl: the run folder; outcome.json: the attempt
    folder): relative to it, `..` included where it lies beside it. None stays None."""
    if not path:
        return None
    return os.path.relpath(os.path.abspath(path), os.path.abspath(base))


def resolve_path(value: str | Path | None, base: Path) -> Path | None:
    """A path read from a record kept in `base`: a relative one against `base`; an absolute one (older runs)
    as it is when it exists, else by its last parts inside `base`'s run folder (the folder was moved)."""
    if not value:
        return None
    path = Path(value)
    if not path.is_absolute():
        return Path(os.path.normpath(Path(base) / path))
    if path.exists():
        return path
    # an old record of a moved run: .../run-X/attempt-NN-P/checkpoint-N -> <run folder>/attempt-NN-P/...
    run_dir = Path(base).parent if Path(base).name.startswith("attempt-") else Path(base)
    for index, part in enumerate(path.parts):
        if part.startswith("attempt-") and run_dir.joinpath(*path.parts[index:]).exists():
            return run_dir.joinpath(*path.parts[index:])
    return path
