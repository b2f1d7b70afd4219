"""`serve`: the vLLM server's own node in a multi-node run. It follows machine 0's decisions in the shared
output folder, starts `trl vllm-serve` on this node's GPUs for each attempt that generates through a server, and
stops it when the attempt ends; it exits with machine 0's exit status (docs/scale-out.md)."""

from __future__ import annotations

from pathlib import Path

from commands import options

SUMMARY = "run the vLLM server node of a multi-node run (machine 0 decides what it serves)"
EXAMPLES = ("GRPO_RUN_ID=run7 python train.py serve --output-dir /shared/outputs",)


def add_arguments(parser) -> None:
    options.add_output_dir(parser)


def run(args) -> int:
    from launcher.run.folder import check_output_dir
    from launcher.run.follow import serve_run

    check_output_dir(Path(options.output_dir_of(args)))
    return serve_run(Path(options.output_dir_of(args)))
