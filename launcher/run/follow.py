"""WHAT the machines other than machine 0 do in a multi-node run: follow machine 0's decisions.

A training machine (rank N > 0) runs each attempt machine 0 decides, in the same attempt folder, with the same
profile, checkpoint and estimate, its own ranks joining machine 0's through the c10d rendezvous; its output
goes to train-machine-N.log there. When machine 0 decides again while this machine's part still runs (machine
0's ended first, e.g. its vLLM server node failed), this machine stops its part instead of waiting for peers
that are gone. The vLLM server's own node (`train.py serve`) starts `trl vllm-serve` for
each attempt that generates through a server, says in the attempt folder whether it came up, and stops it when
machine 0 decides the next step. Both end with the exit status machine 0 ends with. The handshake is
launcher.run.machines'.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

from contract.attempt import PROFILE_FILE, resolve_path
from contract.environment import ENV_RUN_ID
from contract.errors import EXIT_FAILURE, EXIT_INTERRUPTED, UsageError
from launcher.card.topology import elastic, run_name, topology
from launcher.run import narrate
from launcher.run.child import ChildRunner, StopWhen, attempt_command
from launcher.run.machines import SERVER, STOP, Follower, MachineTimeout, job_file, machine_name, read_json
from profiles.load import load_profile


def _job_name() -> str:
    name = run_name()
    if name is None:
        raise UsageError(
            f"a machine of a multi-machine run must find machine 0's run folder: set {ENV_RUN_ID} to "
            "the same name on every machine (inside SLURM, SLURM_JOB_ID serves)"
        )
    return name


def _handle_signals(handler) -> dict:
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, handler)
    return previous


def _restore(previous: dict) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)


def command_differences(mine: dict | None, theirs: dict | None) -> str | None:
    """How this machine's command line (launcher.run.request.machine_command) differs from machine 0's, in
    one line; None when they agree or either is not known."""
    if not mine or not theirs:
        return None
    said = []
    if mine.get("profile") != theirs.get("profile"):
        said.append(
            f"--profile {mine.get('profile') or '(the ladder)'} here, {theirs.get('profile') or '(the ladder)'} there"
        )
    if list(mine.get("overrides") or []) != list(theirs.get("overrides") or []):
        here = " ".join(f"--set {o}" for o in mine.get("overrides") or []) or "no --set"
        there = " ".join(f"--set {o}" for o in theirs.get("overrides") or []) or "no --set"
        said.append(f"{here} here, {there} on machine 0")
    return "; ".join(said) or None


def follow_run(
    output_dir: Path, console=None, child_command: list[str] | None = None, command: dict | None = None
) -> int:
    """Training machine N > 0: run every attempt machine 0 decides; machine 0's exit status. `command`: this
    machine's own --profile and --set, compared with machine 0's once it names the run (a difference is said:
    machine 0's profiles are what every machine runs)."""
    from launcher.run.environment import attempt_env

    console = console or narrate.make_console()
    say = lambda text: console.print(text, markup=False, highlight=False, soft_wrap=True)  # noqa: E731
    topo = topology()
    me = machine_name(topo.machine_rank)
    follower = Follower(Path(output_dir).absolute(), _job_name(), me, elastic().machine_timeout_s)
    runner = ChildRunner(child_command, log_name=f"train-{me}.log")
    stopped = lambda: bool(runner.signals)  # noqa: E731
    previous = _handle_signals(runner.handle_signal)
    try:
        run_dir = follower.join(stopped)
        say(f"{me} of {topo.num_machines}: following machine 0's decisions in {run_dir}")
        differs = command_differences(command, (read_json(job_file(output_dir, follower.name)) or {}).get("command"))
        if differs:
            say(
                f"warning: {me}'s command line differs from machine 0's ({differs}): machine 0 decides every attempt, and its profiles run here"
            )
        while True:
            decision = follower.next_decision(stopped)
            if decision.action == STOP:
                say(f"{me}: machine 0 stopped the run ({decision.text}); exit {decision.exit_code}")
                return int(decision.exit_code if decision.exit_code is not None else EXIT_FAILURE)
            attempt_dir = resolve_path(decision.attempt_dir, run_dir)
            assert attempt_dir is not None  # machine 0's every RUN decision names its attempt's folder
            profile = load_profile(attempt_dir / PROFILE_FILE)
            resume_from = resolve_path(decision.resume_from, run_dir)
            say(
                f"{me}: attempt {decision.attempt} {profile.name}"
                + (f" ({decision.text})" if decision.text else "")
                + (f", from {decision.resume_from}" if decision.resume_from else "")
                + f"; log {attempt_dir / runner.log_name}"
            )
            env = attempt_env(profile, decision.estimate_gib)
            argv = attempt_command(
                profile, attempt_dir, str(resume_from) if resume_from else None, runner.override, env=env
            )
            watch = StopWhen(
                lambda: "machine 0 moved on" if follower.moved_on() else None, runner, name="machine 0 watch"
            ).start()
            try:
                returncode, _tail = runner.run_argv(argv, attempt_dir, env)
            finally:
                watch.stop()
            said = " (machine 0 had moved on)" if watch.fired else ""
            say(
                f"{me}: attempt {decision.attempt} ended here with exit {returncode}{said}; waiting for machine "
                "0's decision"
            )
    except MachineTimeout as exc:
        say(f"error: {exc}")
        return EXIT_FAILURE
    except KeyboardInterrupt:
        say(f"{me}: interrupted while waiting for machine 0")
        return EXIT_INTERRUPTED
    finally:
        _restore(previous)


def serve_run(output_dir: Path, console=None, server_command: list[str] | None = None) -> int:
    """The vLLM server's own node: a server for each attempt machine 0 decides; machine 0's exit status.
    `server_command` replaces `trl vllm-serve` (tests run a small HTTP server)."""
    from launcher.run.vllm_server import FAILED, READY, STARTING, ServerError, start_server, write_server_state

    console = console or narrate.make_console()
    say = lambda text: console.print(text, markup=False, highlight=False, soft_wrap=True)  # noqa: E731
    follower = Follower(
        Path(output_dir).absolute(), _job_name(), SERVER, elastic().machine_timeout_s, role="vllm-server"
    )

    def interrupt(signum, frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = _handle_signals(interrupt)
    server = None
    try:
        run_dir = follower.join()
        say(f"vLLM server node: following machine 0's decisions in {run_dir}")
        decision = follower.next_decision()
        while True:
            if decision.action == STOP:
                say(f"server node: machine 0 stopped the run ({decision.text}); exit {decision.exit_code}")
                return int(decision.exit_code if decision.exit_code is not None else EXIT_FAILURE)
            attempt_dir = resolve_path(decision.attempt_dir, run_dir)
            assert attempt_dir is not None  # machine 0's every RUN decision names its attempt's folder
            profile = load_profile(attempt_dir / PROFILE_FILE)
            if profile.uses_vllm_server and profile.device == "cuda":
                write_server_state(attempt_dir, STARTING)
                say(f"server node: starting the vLLM server for attempt {decision.attempt} {profile.name}")
                try:
                    server = start_server(
                        profile, attempt_dir, env=dict(os.environ), command=server_command, own_node=True
                    )
                    write_server_state(attempt_dir, READY, url=server.url if server else None)
                    say(f"server node: ready at {server.url}" if server else "server node: no server to start")
                except (ServerError, UsageError) as exc:
                    write_server_state(attempt_dir, FAILED, error=str(exc))
                    say(f"server node: the vLLM server did not start: {exc}")
                    server = None
            else:
                say(f"server node: attempt {decision.attempt} ({profile.name}) generates without a server")
            try:
                decision = follower.next_decision()
            finally:
                if server is not None:
                    server.stop()
                    server = None
    except MachineTimeout as exc:
        say(f"error: {exc}")
        return EXIT_FAILURE
    except KeyboardInterrupt:
        say("server node: interrupted")
        return EXIT_INTERRUPTED
    finally:
        if server is not None:
            server.stop()
        _restore(previous)
