"""One "machine" of a multi-machine run, with the fake attempt (tests/fake_child.py) and the fake vLLM server
(tests/fake_vllm_server.py) in place of the real ones; everything else is the project's own code.

    fake_machine.py train [train options...]   # as `train.py train`: machine 0 plans and decides, others follow
    fake_machine.py serve [--output-dir DIR]   # as `train.py serve`: the vLLM server's own node

Where it stands comes from the environment (GRPO_* or SLURM's), as for the real commands. FAKE_SERVER_PIDS names
the file the fake servers write their pids to; FAKE_SERVER_FAIL_WITH a text a fake server fails with.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

FAKE_CHILD = [sys.executable, str(HERE / "fake_child.py")]


def fake_server() -> list[str]:
    command = [sys.executable, str(HERE / "fake_vllm_server.py")]
    if os.environ.get("FAKE_SERVER_PIDS"):
        command += ["--pid-file", os.environ["FAKE_SERVER_PIDS"]]
    if os.environ.get("FAKE_SERVER_FAIL_WITH"):  # a file whose text the server prints before it exits 1
        command += ["--fail-with", os.environ["FAKE_SERVER_FAIL_WITH"]]
    return command


def main(argv: list[str]) -> int:
    from commands import options, parser_for
    from contract.errors import UsageError
    from launcher.card.topology import topology
    from launcher.run.follow import follow_run, serve_run
    from launcher.run.request import RunRequest
    from launcher.run.supervise import supervise

    role, rest = argv[0], argv[1:]
    args = parser_for("serve" if role == "serve" else "train").parse_args(rest)
    try:
        if role == "serve":
            return serve_run(Path(options.output_dir_of(args)), server_command=fake_server())
        if topology().machine_rank > 0:
            return follow_run(Path(options.output_dir_of(args)), child_command=FAKE_CHILD)
        plan, _profiles = options.plan_of(args)
        return supervise(
            plan,
            RunRequest(Path(options.output_dir_of(args)), overrides=tuple(args.overrides or ()), resume=args.resume),
            child_command=FAKE_CHILD,
            server_command=fake_server(),
        )
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
