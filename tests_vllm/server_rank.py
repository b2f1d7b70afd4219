"""One rank of a server-mode attempt on a CPU, up to the weight sync. Called as the supervisor calls an
attempt (`server_rank.py attempt --profile P --attempt-dir D`, under accelerate), it does what GRPOTrainer does
first in server mode: TRL's own client at the host and ports the project's GRPOConfig names (read from this
machine's environment, as the trainer reads them), a generation through the server, and, on rank 0, the NCCL
weight-sync group, which vLLM's transfer engine only builds on CUDA. It writes server-rank<N>.json with what it
saw and an outcome like the trainer's."""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from contract.attempt import OK, Outcome
    from profiles.load import load_profile
    from trainer.config import grpo_config_kwargs

    attempt_dir = Path(argv[argv.index("--attempt-dir") + 1])
    profile = load_profile(argv[argv.index("--profile") + 1])
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    config = grpo_config_kwargs(profile, str(attempt_dir), device="cpu", bf16=False, use_vllm=True)
    from trl.generation.vllm_client import VLLMClient

    client = VLLMClient(
        base_url=f"http://{config['vllm_server_host']}:{config['vllm_server_port']}",
        group_port=config["vllm_group_port"],
        connection_timeout=config["vllm_server_timeout"],
    )
    generated = client.generate(
        ["Ava has 7 apples and gets 5 more. How many apples now?"], n=2, max_tokens=8, temperature=1.0
    )
    refusal = None
    if rank == 0:  # the main process alone joins the weight-sync group, as TRL's trainer does
        try:
            client.init_communicator(device="cpu")
        except Exception as exc:
            refusal = f"{type(exc).__name__}: {exc}"
    seen = {
        "rank": rank,
        "world_size": world,
        "machine": os.environ.get("GRPO_MACHINE_RANK"),
        "group_rank": os.environ.get("GROUP_RANK"),
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "config_mode": config["vllm_mode"],
        "server": [config["vllm_server_host"], config["vllm_server_port"]],
        "group_port": config["vllm_group_port"],
        "completion_ids": generated.get("completion_ids"),
        "weight_sync": refusal,
    }
    (attempt_dir / f"server-rank{rank}.json").write_text(json.dumps(seen, indent=1) + "\n", encoding="utf-8")
    Outcome(status=OK, steps=0, rank=rank, ranks=world).write(attempt_dir, rank)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
