"""One "machine" of a multi-machine run for the vLLM tests: the project's own supervisor, follower and server
node, with tests_vllm/server_rank.py in place of the attempt (a CPU cannot train a cuda profile) and vLLM's CPU
build as the server (ENGINE_SERVER_COMMAND, a JSON list, in place of `trl vllm-serve`).

    machine.py train [train options...]   # machine 0 plans and decides; the others follow
    machine.py serve --output-dir DIR      # the vLLM server's own node
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RANK_SCRIPT = [sys.executable, str(HERE / "server_rank.py")]


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(HERE.parent))
    from commands import options, parser_for
    from launcher.card.topology import topology
    from launcher.run.follow import follow_run, serve_run
    from launcher.run.request import RunRequest
    from launcher.run.supervise import supervise

    role, rest = argv[0], argv[1:]
    args = parser_for("serve" if role == "serve" else "train").parse_args(rest)
    if role == "serve":
        return serve_run(Path(args.output_dir), server_command=json.loads(os.environ["ENGINE_SERVER_COMMAND"]))
    if topology().machine_rank > 0:
        return follow_run(Path(args.output_dir), child_command=RANK_SCRIPT)
    plan, _profiles = options.plan_of(args)
    return supervise(
        plan, RunRequest(Path(args.output_dir), overrides=tuple(args.overrides or ())), child_command=RANK_SCRIPT
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
