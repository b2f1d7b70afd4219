"""HOW the fit solver judges a configuration on a card: whether it fits the budget (this machine's measurement
of the shape, else the estimate within the part of the budget an estimate alone may use), how long its step
takes, and the vLLM share it can have beside training (one group at once at the least, the whole step's
completions at the most). launcher.plan.search builds the search on this."""

from __future__ import annotations

import math
from dataclasses import dataclass

from launcher.card.detect import GpuInfo, Machine, bf16_supported
from launcher.memory.estimate import GIB, Estimate, estimate, standby_utilisation, vllm_sizes, weights_bytes
from launcher.memory.ledger.weigh import Measured, measured_for
from launcher.plan.completion_lengths import CompletionPlan
from launcher.plan.levers import SHARE_CAP
from launcher.plan.margins import estimate_limit, margin_for
from launcher.plan.speed import StepTime, predict
from profiles.catalog import Architecture, vllm_refuses
from profiles.schema import LEVER_KEYS, MEMORY_KEYS


def live_gib(est: Estimate, not_live) -> float:
    """The estimate without the components that are not held at one moment of the step."""
    return est.total_gib - sum(est.components.get(name, 0.0) for name in not_live)


def usable_of(gpu: GpuInfo) -> float:
    return gpu.free_gib - margin_for(gpu.total_gib, "cuda")


KEY_FIELDS = tuple(dict.fromkeys(MEMORY_KEYS + LEVER_KEYS))


def profile_key(p) -> tuple:
    return tuple(tuple(v) if isinstance(v, list) else v for v in (getattr(p, k) for k in KEY_FIELDS))


@dataclass(frozen=True)
class Ledger:
    """This machine's measurements of shapes (launcher.memory.ledger) and the machine they must have been
    taken on to count."""

    machine: Machine | None = None
    measurements: list | None = None


NO_LEDGER = Ledger()


class Judge:
    """One model, one card, one budget (GiB the need must stay under), optionally this machine's ledger.
    `shrink` (the OOM shrink): the components not held at the moment the OOM struck; its budget already holds
    the headroom, so a shape judged by the estimate alone keeps no second one (a plan's judging, None, does)."""

    def __init__(
        self,
        arch: Architecture,
        gpu: GpuInfo,
        budget_gib: float,
        ledger: Ledger = NO_LEDGER,
        shrink: tuple | None = None,
        lengths: CompletionPlan | None = None,
    ):
        self.arch, self.gpu, self.budget = arch, gpu, budget_gib
        self.limit = estimate_limit(budget_gib) if shrink is None else budget_gib
        self.machine, self.measurements = ledger.machine, ledger.measurements
        self.not_live = tuple(shrink or ())  # components not held at the moment judged (an OOM's site)
        self.vllm_refused = vllm_refuses(arch, bf16_supported(gpu))
        self.share_cap = SHARE_CAP
        self.lengths = lengths
        self.calls = 0
        self._needs: dict[tuple, tuple[float, Estimate, Measured | None]] = {}
        self._speeds: dict[tuple, StepTime] = {}

    # --- judging ------------------------------------------------------------------------------------
    def need(self, p) -> tuple[float, Estimate, Measured | None]:
        key = profile_key(p)
        found = self._needs.get(key)
        if found is not None:
            return found
        self.calls += 1
        est = estimate(p, self.arch, self.gpu)
        measured = None
        if self.measurements and self.machine is not None:
            measured = measured_for(self.measurements, p, self.machine)
        need = measured.need_gib if measured is not None and measured.need_gib is not None else est.total_gib
        if self.not_live:
            need = live_gib(est, self.not_live)
        self._needs[key] = (need, est, measured)
        return need, est, measured

    def fits(self, p) -> bool:
        need, est, measured = self.need(p)
        if est.vllm_problem:
            return False
        if est.vllm_share_gib is not None and est.vllm_share_gib > self.gpu.free_gib:
            return False
        if est.server is not None and (
            est.server.vllm_problem or est.server.total_gib > estimate_limit(usable_of(self.gpu))
        ):
            return False  # a vLLM server GPU holds its share and its own context
        measured_here = measured is not None and measured.need_gib is not None
        return need <= (self.budget if measured_here else self.limit)

    def speed(self, p) -> StepTime:
        key = profile_key(p)
        found = self._speeds.get(key)
        if found is None:
            _, est, measured = self.need(p)
            found = predict(p, self.arch, self.gpu, est, self.lengths, measured)
            self._speeds[key] = found
        return found

    # --- the vLLM share -----------------------------------------------------------------------------
    def _engine_bytes(self, p, sequences: int, share: float | None = None) -> float:
        """Weights, workspace (of an engine of `sequences` at once) and the KV cache of `sequences`
        full-length sequences: the share that holds them all at once. TRL's own colocated engine (several
        training GPUs) holds 1/tp of the weights and vLLM's own workspace, as the estimate counts it."""
        if p.distributed:
            tp = max(1, p.vllm_tensor_parallel)
            workspace, kv_token, _ = vllm_sizes(p, self.arch, tp)
            weights = weights_bytes(self.arch, p.load_in_4bit, "cuda") / tp
            return weights + workspace + max(1, sequences) * p.max_seq_length * kv_token
        weights = weights_bytes(self.arch, p.load_in_4bit, "cuda")
        guess = share if share is not None else weights
        for _ in range(2):  # the workspace depends on the engine's tier, which depends on the share
            workspace, kv_token, _ = vllm_sizes(p, self.arch, share_bytes=guess, seqs=max(1, sequences))
            guess = weights + workspace + sequences * p.max_seq_length * kv_token
        return guess

    def _sequences_in(self, p, share_bytes: float, most: int) -> int:
        """How many full-length sequences a share holds beside the weights and its workspace (at most `most`)."""
        weights = weights_bytes(self.arch, p.load_in_4bit, "cuda")
        sequences = most
        for _ in range(2):
            workspace, kv_token, one = vllm_sizes(p, self.arch, share_bytes=share_bytes, seqs=max(1, sequences))
            sequences = max(0, min(most, int((share_bytes - weights - workspace) // one)))
        return sequences

    def with_share(self, p, pinned: frozenset, at: str = "best"):
        """`p` with its vLLM share and sequences at once: at "floor" one group at once, at "best" the whole
        step's completions at once where they fit, else the largest share that fits. None when not even the
        floor fits."""
        if not p.fast_inference:
            return p if self.fits(p) else None
        if p.uses_vllm_server:  # GPUs of its own: the largest share beside its CUDA context and NCCL buffers
            if "gpu_memory_utilization" not in pinned:
                rest = estimate(p.model_copy(update={"gpu_memory_utilization": 0.01}), self.arch, self.gpu).server
                assert rest is not None  # a server-mode profile's estimate has its server's
                room = estimate_limit(usable_of(self.gpu)) - (rest.total_gib - 0.01 * self.gpu.total_gib)
                share = min(math.floor(room / self.gpu.total_gib * 100) / 100, self.share_cap)
                if share <= 0:
                    return None
                p = p.model_copy(update={"gpu_memory_utilization": share})
            return p if self.fits(p) else None
        total = self.gpu.total_gib * GIB
        group = p.num_generations
        wanted = group if at == "floor" else p.effective_batch
        own_seqs = "vllm_max_num_seqs" in pinned or p.distributed  # TRL's own engine sizes itself
        if p.vllm_standby:  # Unsloth's standby sets the share itself; the profile says what it will be
            share = min(round(standby_utilisation(self.gpu.total_gib), 2), SHARE_CAP)
        elif "gpu_memory_utilization" in pinned:
            share = p.gpu_memory_utilization
        else:
            floor = math.ceil(self._engine_bytes(p, group) / total * 100 - 1e-9) / 100
            full = math.ceil(self._engine_bytes(p, wanted) / total * 100 - 1e-9) / 100
            if floor > self.share_cap:
                return None
            probe = p.model_copy(
                update={
                    "gpu_memory_utilization": floor,
                    "vllm_max_num_seqs": p.vllm_max_num_seqs if own_seqs else group,
                }
            )
            need, est, _ = self.need(probe)
            # the need grows one for one with the share (it holds the weights, then vLLM's own memory)
            room = (self.limit - (need - floor * self.gpu.total_gib)) / self.gpu.total_gib
            top = min(math.floor(room * 100 + 1e-9) / 100, self.share_cap)
            share = floor if at == "floor" else max(floor, min(full, top))
        update = {"gpu_memory_utilization": share}
        if not own_seqs:
            update["vllm_max_num_seqs"] = (
                max(1, self._sequences_in(p, share * total, wanted)) if not p.distributed else 0
            )
        q = p.model_copy(update=update)
        if self.fits(q):
            return q
        if p.vllm_standby or "gpu_memory_utilization" in pinned or at == "floor":
            return None
        lower = round(share - 0.01, 2)  # the closed form rounds; one step down settles it
        if lower < floor:
            return None
        update["gpu_memory_utilization"] = lower
        if not own_seqs:
            update["vllm_max_num_seqs"] = max(1, self._sequences_in(p, lower * total, wanted))
        q = p.model_copy(update=update)
        return q if self.fits(q) else None

    def least_share(self, p, pinned):
        """`p` with vLLM holding one group at once (whatever the card can give)."""
        if not p.fast_inference or p.vllm_standby or p.uses_vllm_server or "gpu_memory_utilization" in pinned:
            return p
        share = self._engine_bytes(p, p.num_generations) / (self.gpu.total_gib * GIB)
        seqs = p.vllm_max_num_seqs if "vllm_max_num_seqs" in pinned or p.distributed else p.num_generations
        return p.model_copy(
            update={"gpu_memory_utilization": min(math.ceil(share * 100 - 1e-9) / 100, 0.99), "vllm_max_num_seqs": seqs}
        )
