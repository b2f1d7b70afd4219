"""HOW a run starts and ends: `supervise` runs the planned profile in child processes and survives
out-of-memory (shrink, fall back, resume), from the run folder's lock to the run's exit status.

Every attempt is a fresh `python train.py attempt --profile DIR/profile.yaml --attempt-dir DIR` process, so each one
starts with a clean GPU (vLLM does not give its memory back inside a process, and a caught OOM keeps tensors
alive through its traceback). A distributed profile (several GPUs, or a vLLM server) runs the same script under
accelerate, one process per training GPU, with its vLLM server started and health-checked before the attempt
and stopped after it. The child writes DIR/outcome.json (each further rank its own outcome-rank<N>.json); the
supervisor's loop (launcher.run.supervisor) reads them (or, when the child died without one, its exit status
and the tail of its output), appends one line to the run's attempts.jsonl, and decides what runs next.

On several machines this supervisor is machine 0's: it takes each decision and writes it into the shared run
folder, where the other machines' supervisors (launcher.run.follow) read it and run the same attempt
(launcher.run.machines holds the handshake).

Run folder: OUTPUT_DIR/run-YYYYmmdd-HHMMSS/{plan.json, attempts.jsonl, run.lock, attempt-NN-<profile>/}; the
paths in attempts.jsonl are relative to it, so that a moved run folder resumes. A full disk ends the run with
exit 1 and one line (the disk, the space, what was kept).

This module is the run's start and end: the run folder made or found again and locked (launcher.run.folder),
what must hold before the first attempt (launcher.run.preflight), the machines gathered, the plan's first
attempt or the resumed run (launcher.run.resume) handed to the loop, and at the close the other machines told,
the table of attempts printed (launcher.run.narrate) and the exit status returned.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from contract.attempt import PLAN_FILE, latest_checkpoint
from contract.errors import EXIT_BAD_INPUT, EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK, EXIT_OUT_OF_MEMORY
from contract.failure import write_failure_text, write_problem
from contract.safe_write import write_atomic
from launcher.card.topology import elastic, server_node, topology
from launcher.run import machines as machineslib
from launcher.run import narrate
from launcher.run.child import ChildRunner, signals_forwarded
from launcher.run.folder import RunLock, latest_run_dir, new_run_dir, point_latest
from launcher.run.preflight import idle_server_node, job_name, unwritable_cache
from launcher.run.request import RunRequest
from launcher.run.resume import resume_run
from launcher.run.supervisor import Supervisor

# ---------------------------------------------------------------------------------------------------
# Entry point


def supervise(
    plan,
    request: RunRequest,
    console=None,
    child_command: list[str] | None = None,
    server_command: list[str] | None = None,
) -> int:
    """Run the plan's chosen profile (or, with `request.resume`, continue a run); exit status per design.

    `child_command` (in place of `[python, train.py]`) and `server_command` (in place of `trl vllm-serve`)
    are the documented boundary where tests run small fakes of the attempt and of the vLLM server; a real
    run leaves both unset. `request.hours` is kept on one machine only: the attempts of several machines would
    each need machine 0's deadline, which they are not given. On several machines this is machine 0's
    supervisor (the others follow: launcher.run.follow).
    """
    console = console or narrate.make_console()
    runner = ChildRunner(child_command)
    topo = topology()
    others = [machineslib.machine_name(rank) for rank in range(1, topo.num_machines)]
    if server_node() is not None:
        others.append(machineslib.SERVER)
    job = job_name(others)
    starts = not request.resume  # a new run, from the plan's choice
    if starts and plan.chosen is None:
        _print_nothing_fits(console, plan)
        if not others:
            return EXIT_OUT_OF_MEMORY
    try:
        run_dir = _run_folder(request, job)
        lock = RunLock(run_dir).acquire()
    except OSError as exc:
        if not write_problem(exc):
            raise
        text = write_failure_text(exc, request.output_dir)
        console.print(f"error: {text}; nothing was started", markup=False, soft_wrap=True)
        return EXIT_FAILURE
    problem = unwritable_cache(plan.chosen if starts else None)
    if problem:
        console.print(f"error: {problem}; nothing was started", markup=False, soft_wrap=True)
        lock.release()
        return EXIT_FAILURE
    machines = None
    if job is not None:  # several machines: job_name named their run
        machines = machineslib.Coordinator(
            request.output_dir,
            run_dir,
            job,
            others,
            elastic().machine_timeout_s,
            say=lambda text: console.print(text, markup=False, highlight=False),
            command=request.machine_command,
        )
    if request.hours and others:
        console.print(
            f"note: --hours {request.hours:g} sets the run's length, but its wall-clock stop is kept on one "
            "machine only: on several machines the run ends at its steps",
            markup=False,
            highlight=False,
        )
        request = replace(request, hours=None)
    supervisor = Supervisor(plan, run_dir, console, runner, request, server_command=server_command, machines=machines)
    if starts:
        supervisor._say_problem(point_latest(request.output_dir, run_dir))  # OUTPUT_DIR/latest: this run
    code = EXIT_FAILURE  # what the other machines are told when this one fails unexpectedly
    try:
        with signals_forwarded(runner):
            try:
                code = _attempts(supervisor, request, topo.num_machines, stopped=lambda: bool(runner.signals))
            except machineslib.MachineTimeout as exc:
                console.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
                code = EXIT_FAILURE
            except OSError as exc:
                if not write_problem(exc):
                    raise
                code = _disk_failure(supervisor, exc)
    finally:
        if machines is not None:
            _tell_machines_to_stop(machines, code)
        lock.release()
    if supervisor.records:
        console.print(narrate.attempts_table(supervisor.records))
    if code == EXIT_OUT_OF_MEMORY:
        console.print(
            "[red]every profile that could run here ran out of memory or could not load[/red]; "
            "the table above lists the attempts. Try a profile with a smaller model, shorter "
            "max_completion_length or fewer num_generations (--set KEY=VALUE)."
        )
    return code


def _attempts(supervisor: Supervisor, request: RunRequest, num_machines: int, stopped) -> int:
    """From the locked run folder to the run's exit status: the machines gathered, then the plan's first attempt
    or the resumed run handed to the supervisor's loop."""
    plan, console, machines = supervisor.plan, supervisor.console, supervisor.machines
    idle_server = idle_server_node(plan) if not request.resume else None
    if machines is not None:
        machines.open()
    if idle_server:
        # said before any machine waits for the others: the server node is told to stop (exit 2)
        console.print(f"error: {idle_server}", markup=False, highlight=False, soft_wrap=True)
        return EXIT_BAD_INPUT
    if machines is not None:
        console.print(
            f"machine 0 of {num_machines} training machine(s)"
            f"{' and a vLLM server node' if server_node() else ''}; run folder {supervisor.run_dir}",
            markup=False,
            highlight=False,
        )
        machines.gather(stopped=stopped)
    if request.resume:

        def taken_up() -> None:  # OUTPUT_DIR/latest names the run once its resume is under way, never a refused one
            supervisor._say_problem(point_latest(request.output_dir, supervisor.run_dir))

        return resume_run(supervisor, request, taken_up)
    if plan.chosen is None:
        return EXIT_OUT_OF_MEMORY
    planned = {**plan.to_json(), "pinned": sorted(supervisor.pinned)}
    write_atomic(supervisor.run_dir / PLAN_FILE, json.dumps(planned, indent=2) + "\n")
    console.print(f"run folder: {supervisor.run_dir}", markup=False)
    narrate.print_plan_choice(console, plan)
    return supervisor.run(plan.chosen)


def _run_folder(request: RunRequest, job: str | None) -> Path:
    """A new run folder, or with resume the one to continue: the one --resume RUN names, on several machines
    the one this job already named (its job file), else the latest."""
    if not request.resume:
        return new_run_dir(request.output_dir)
    if request.resume_dir is not None:
        return request.resume_dir
    if job is not None:
        named = (machineslib.read_json(machineslib.job_file(request.output_dir, job)) or {}).get("run")
        if named and (request.output_dir / named).is_dir():
            return request.output_dir / named
    return latest_run_dir(request.output_dir)


_STOP_TEXT = {
    EXIT_OK: "the run is done",
    EXIT_OUT_OF_MEMORY: "nothing left that fits",
    EXIT_INTERRUPTED: "interrupted",
    EXIT_BAD_INPUT: "bad input",
    EXIT_FAILURE: "the run failed",
}


def _tell_machines_to_stop(machines: machineslib.Coordinator, code: int) -> None:
    """The last decision: every machine ends with machine 0's exit status."""
    try:
        machines.stop(code, _STOP_TEXT.get(code, f"exit {code}"))
    except OSError:
        pass  # the folder cannot be written: the others stop at their timeout, naming it
    machines.close()


def _disk_failure(supervisor: Supervisor, exc: OSError) -> int:
    """Say which disk is full, what was needed when known, and what the run folder keeps; exit 1."""
    needed = None
    record = supervisor.records[-1] if supervisor.records else None
    if record is not None:
        needed = len(json.dumps(record.to_dict())) + 1
    kept = []
    for _shape, folder in reversed(supervisor.attempt_shapes):
        found = latest_checkpoint(folder) if folder is not None and folder.is_dir() else None
        if found is not None:
            kept.append(f"checkpoint {supervisor.in_run(found)} (`python train.py train --resume` once there is space)")
            break
    if record is not None:
        kept.append(
            f"attempt {record.attempt} ended {record.status} after {record.steps} steps "
            f"(its folder {record.attempt_dir})"
        )
    text = write_failure_text(exc, supervisor.run_dir, needed)
    supervisor.console.print(
        f"error: {text}; kept: {'; '.join(kept) or 'nothing new'}", markup=False, highlight=False, soft_wrap=True
    )  # one line, however long
    return EXIT_FAILURE


def _print_nothing_fits(console, plan) -> None:
    narrate.print_plan_choice(console, plan)
    console.print(
        "[red]nothing fits[/red]: no profile on the ladder is estimated to fit this machine "
        "(see `python train.py plan` for the estimates)"
    )
    for candidate in plan.candidates:
        console.print(f"  {candidate.profile.name}: {candidate.reason}", markup=False, highlight=False)
