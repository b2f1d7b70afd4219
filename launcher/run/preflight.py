"""WHAT must hold before a run's first attempt starts, beyond its inputs (launcher.run.inputs): a name every
machine of a multi-machine run finds the run folder by, a server node that has something to serve, and the
cache folders an attempt writes outside the run folder writable by this user. Each check gives one line
that names what is wrong and the fix; the supervisor (launcher.run.supervise) says it and starts nothing.
"""

from __future__ import annotations

from pathlib import Path

from contract.errors import UsageError
from contract.failure import write_failure_text, write_problem
from launcher.card.topology import run_name, server_node


def idle_server_node(plan) -> str | None:
    """Why a server node (GRPO_SERVER_NODE) would serve nothing: the chosen profile generates inside its
    training processes (no vLLM server), so that node would only wait; None when it is needed or not set."""
    node = server_node()
    if node is None or plan.chosen is None or plan.chosen.uses_vllm_server:
        return None
    from contract.environment import ENV_SERVER_NODE

    return (
        f"{ENV_SERVER_NODE}={node} names a vLLM server node, and '{plan.chosen.name}' generates inside its "
        f"training processes (vllm_mode {plan.chosen.vllm_mode}, fast_inference {plan.chosen.fast_inference}): "
        "that node would serve nothing (fix: SERVER_NODE=0 sbatch slurm/grpo-train.sbatch ..., or unset "
        f"{ENV_SERVER_NODE}; or a profile with vllm_mode: server)"
    )


def cache_folders(profile=None) -> list[Path]:
    """The caches an attempt writes outside the run folder: grpo-train's own (the tiny model, random weights,
    the ledger's folder) and, for a model from the hub, Hugging Face's (contract.environment.hub_cache)."""
    from contract.environment import cache_root, hub_cache

    folders = [cache_root()]
    from profiles.catalog import is_tiny

    model = str(getattr(profile, "model", "tiny"))
    if profile is not None and not is_tiny(model) and not Path(model).expanduser().is_dir():
        folders.append(hub_cache())
    return folders


def unwritable_cache(profile=None) -> str | None:
    """One line naming the first cache folder this user cannot write (its owner and the fix), else None: checked
    before an attempt starts, so that a mount owned by another uid is named at once, not read later as a
    failed download or a full disk."""
    import tempfile

    for folder in cache_folders(profile):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-test-"):
                pass
        except OSError as exc:
            if not write_problem(exc):
                raise
            return write_failure_text(exc, folder)
    return None


def job_name(others: list[str]) -> str | None:
    """The name every machine gives a multi-machine run; None on one machine. UsageError when the machines
    would have nothing in common to find the run folder by."""
    if not others:
        return None
    name = run_name()
    if name is None:
        from contract.environment import ENV_RUN_ID

        raise UsageError(
            f"several machines ({', '.join(others)} besides this one) must find the same run folder: "
            f"set {ENV_RUN_ID} to the same name on every machine (inside SLURM, SLURM_JOB_ID serves)"
        )
    return name
