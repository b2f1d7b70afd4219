"""Every environment variable grpo-train reads or sets, in one table: its name, who sets it, who reads it,
and what it means. The attempt's own variables are set by the supervisor for each child process; the user's
are read at start. `docs/interfaces.md` lists this table, and a test holds the code to it (every `GRPO_`
name in the source is a row here)."""

from __future__ import annotations

from dataclasses import dataclass

USER, SUPERVISOR, IMAGE = "user", "supervisor", "image"


@dataclass(frozen=True)
class Variable:
    name: str
    set_by: str     # USER: a person or a job script; SUPERVISOR: the launcher, for a child process; IMAGE: the Dockerfile
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
ENV_VLLM_HOST = "GRPO_VLLM_HOST"
ENV_VLLM_PORT = "GRPO_VLLM_PORT"
# The GPU image's: set by the Dockerfile
ENV_IMAGE = "GRPO_TRAIN_IMAGE"
ENV_LLAMA_CPP = "GRPO_LLAMA_CPP"
# The supervisor's, for one attempt's process
ENV_ESTIMATE_GIB = "GRPO_ATTEMPT_ESTIMATE_GIB"
ENV_PREDICTED_STEP_S = "GRPO_ATTEMPT_PREDICTED_STEP_S"
ENV_PROBE_ONLY = "GRPO_PROBE_ONLY"
ENV_RANDOM_WEIGHTS = "GRPO_RANDOM_WEIGHTS"
# Other tools' variables that grpo-train sets for an attempt
ENV_ALLOC_CONF = "PYTORCH_CUDA_ALLOC_CONF"
ENV_VLLM_STANDBY = "UNSLOTH_VLLM_STANDBY"

VARIABLES: tuple[Variable, ...] = (
    Variable(ENV_CACHE, USER, "where grpo-train keeps what it builds and measures (the tiny model, the ledger, "
             "random-weight models); default ~/.cache/grpo-train"),
    Variable(ENV_LEDGER, USER, "a ledger file to read and write instead of $GRPO_TRAIN_CACHE/ledger.jsonl"),
    Variable(ENV_INJECT_OOM, USER, "NAME[@STEP|@probe][,...]: an attempt of that profile raises a real "
             "torch.OutOfMemoryError at that step (default its first) or inside the probe; for testing the "
             "fallback without a GPU. Such a run records nothing in the ledger unless GRPO_TRAIN_LEDGER is set"),
    Variable(ENV_NO_UNSLOTH, USER, "1: train through transformers + PEFT even where Unsloth imports"),
    Variable(ENV_NUM_MACHINES, USER, "several machines: how many run the same command"),
    Variable(ENV_MACHINE_RANK, USER, "several machines: this machine's rank, 0 for the first"),
    Variable(ENV_MAIN_ADDRESS, USER, "several machines: the address of machine 0"),
    Variable(ENV_MAIN_PORT, USER, "several machines: the rendezvous port on machine 0"),
    Variable(ENV_VLLM_HOST, USER, "server mode: the host of the vLLM server (also set by the supervisor for "
             "the trainers)"),
    Variable(ENV_VLLM_PORT, USER, "server mode: the port of the vLLM server (also set by the supervisor for "
             "the trainers)"),
    Variable(ENV_IMAGE, IMAGE, "1: this process runs in the grpo-train image; a folder it cannot write is "
             "explained as a mount, its fix given as `docker run` options"),
    Variable(ENV_LLAMA_CPP, USER, "export --gguf: a llama.cpp checkout (or its convert_hf_to_gguf.py); else the "
             "PATH, ~/llama.cpp and /opt/llama.cpp are looked in"),
    Variable(ENV_ESTIMATE_GIB, SUPERVISOR, "the memory estimate (GiB) the plan judged this attempt by"),
    Variable(ENV_PREDICTED_STEP_S, SUPERVISOR, "the seconds per optimizer step the plan predicted for this attempt"),
    Variable(ENV_PROBE_ONLY, SUPERVISOR, "1: load, run the worst-case probe, report it, stop (calibrate)"),
    Variable(ENV_RANDOM_WEIGHTS, SUPERVISOR, "1: the model's architecture with random weights, nothing "
             "downloaded (calibrate --random-weights)"),
    Variable(ENV_ALLOC_CONF, SUPERVISOR, "PyTorch's allocator settings: expandable_segments:True is added "
             "unless vLLM standby is on; a user's own settings are kept"),
    Variable(ENV_VLLM_STANDBY, SUPERVISOR, "Unsloth's vLLM standby, set from the profile's vllm_standby"),
)


def table() -> list[dict]:
    """The variables as rows (name, set_by, meaning), for the docs and `--help`."""
    return [{"name": v.name, "set_by": v.set_by, "meaning": v.meaning} for v in VARIABLES]


def markdown() -> str:
    """The table of docs/interfaces.md (`python -m contract.environment` prints it; a test keeps the page equal)."""
    rows = ["| variable | set by | meaning |", "| --- | --- | --- |"]
    rows += [f"| `{v.name}` | {v.set_by} | {v.meaning.replace('|', chr(92) + '|')} |" for v in VARIABLES]
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
