"""HOW the ranks of a distributed attempt meet: on several machines each rank checks in before the process
group forms (a lost machine is named at once, not after DDP's timeout of hours), then the group starts on every
rank together, and the ranks wait for each other where rank 0 works alone."""

from __future__ import annotations

import time

# The words a lost machine's missing ranks are reported with (contract.failure reads them as a lost node)
MACHINE_LOST = "a machine of the run is lost"


def check_in(timeout_s: float | None = None, environ=None) -> None:
    """On several machines, before the process group forms: every rank counts itself in at torch elastic's
    store (hosted by machine 0's agent) and waits until all have, at most the rendezvous timeout. A rank whose
    machine is gone never comes; without this the group would wait for it the whole DDP timeout (hours), as it
    does after a restart whose rendezvous still counted the lost machine. RuntimeError naming how many are
    missing, in words contract.failure reads as a lost node."""
    import os

    from contract.attempt import DEFAULT_RDZV_TIMEOUT_S
    from contract.environment import ENV_RDZV_TIMEOUT, ENV_RESTART_COUNT
    from trainer.backends import world_size

    environ = os.environ if environ is None else environ
    world = world_size()
    if (
        world <= 1
        or int(environ.get("GROUP_WORLD_SIZE", "1") or 1) <= 1
        or environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True"
    ):
        return  # one machine: its processes start together, under one agent
    if timeout_s is None:
        timeout_s = float(environ.get(ENV_RDZV_TIMEOUT) or DEFAULT_RDZV_TIMEOUT_S)
    from datetime import timedelta

    from torch.distributed import TCPStore

    store = TCPStore(
        environ["MASTER_ADDR"], int(environ["MASTER_PORT"]), is_master=False, timeout=timedelta(seconds=timeout_s)
    )
    key = f"grpo-train/checked-in/{environ.get(ENV_RESTART_COUNT) or 0}"  # a restart counts afresh
    joined = store.add(key, 1)
    deadline = time.monotonic() + timeout_s
    while joined < world:
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"{world - joined} of {world} ranks did not check in within {timeout_s:.0f} s "
                f"({ENV_RDZV_TIMEOUT}): {MACHINE_LOST}"
            )
        time.sleep(0.5)
        joined = store.add(key, 0)


def join_ranks(on_cpu: bool = False) -> None:
    """Under accelerate, start the process group on every rank now. TrainingArguments.__post_init__ would
    start it (its device set-up builds accelerate's PartialState, which calls init_process_group), but only
    when the GRPOConfig is built, after rank 0's evaluation: the other ranks would wait inside it instead.
    PartialState skips init_process_group when it has already run, so GRPOConfig joins this group."""
    from datetime import timedelta

    from trainer.backends import world_size
    from trainer.config import DDP_TIMEOUT_S  # rank 0 evaluates alone meanwhile: longer than the 30 min default

    if world_size() > 1:
        check_in()
        from accelerate import PartialState

        # cpu=True as GRPOConfig's use_cpu will ask: gloo, not the "cuda:nccl,cpu:gloo" pair of a GPU machine
        PartialState(cpu=on_cpu, timeout=timedelta(seconds=DDP_TIMEOUT_S))


def wait_for_ranks() -> None:
    """A barrier for every rank of a distributed attempt (none when alone)."""
    from trainer.backends import world_size

    if world_size() > 1:
        from accelerate import PartialState

        PartialState().wait_for_everyone()
