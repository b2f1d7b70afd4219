"""Under accelerate, every rank joins the process group before rank 0 evaluates alone.

TrainingArguments.__post_init__ starts the group (accelerate's PartialState calls init_process_group) when the
GRPOConfig is built. Ranks without evaluation rows reach that first and would wait there, inside the
rendezvous' 30-minute default, while rank 0 evaluates. trainer.ranks.join_ranks starts the group on every
rank first, with the long timeout the GRPOConfig then states, and GRPOConfig reuses it. Two CPU processes
(gloo) stand in for two GPUs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from launcher.card.topology import free_port
from support.waiting import finish_all

REPO = Path(__file__).resolve().parents[3]

RANK_CODE = r"""
import json, os, time
import torch.distributed as dist
from trainer.ranks import join_ranks, wait_for_ranks
from trainer.config import DDP_TIMEOUT_S, grpo_config_kwargs
from profiles.load import load_profile

join_ranks(on_cpu=True)
joined = dist.is_initialized()
backend = dist.get_backend()
group = dist.group.WORLD
if int(os.environ["RANK"]) == 0:
    time.sleep(2)  # rank 0 evaluates alone
wait_for_ranks()
profile = load_profile("profiles/cpu-tiny-4gen.yaml").replace(num_gpus=2)
kwargs = grpo_config_kwargs(profile, os.environ["OUT"], device="cpu", bf16=False, use_vllm=False)
from trl import GRPOConfig
config = GRPOConfig(**kwargs)
print(json.dumps({"joined": joined, "backend": backend, "same_group": dist.group.WORLD is group, "world": dist.get_world_size(),
                  "ddp_timeout": config.ddp_timeout, "stated": DDP_TIMEOUT_S}))
"""


def test_every_rank_joins_before_rank_0_evaluates(tmp_path):
    port = str(free_port())
    ranks = []
    for rank in range(2):
        env = {
            **os.environ,
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": "2",
            "LOCAL_WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
            "OUT": str(tmp_path),
            "PYTHONPATH": str(REPO),
            "CUDA_VISIBLE_DEVICES": "",
        }
        ranks.append(
            subprocess.Popen(
                [sys.executable, "-c", RANK_CODE],
                cwd=REPO,
                env=env,
                text=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        )
    results = []
    for proc, (out, err) in zip(ranks, finish_all(ranks)):  # one piece of work: each rank waits on the other
        assert proc.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    for result in results:
        assert result["joined"] and result["same_group"] and result["world"] == 2 and result["backend"] == "gloo"
        assert result["ddp_timeout"] == result["stated"] > 1800  # longer than the rendezvous' default
