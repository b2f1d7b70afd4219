"""WHAT the fit solver answers, as data: its choice for one ambition on one card, what was given up against
the ambition (GiB per lever), and, when nothing fits, the figures of why (Shortfall). The words are elsewhere:
launcher.plan.wording for what `plan --json` carries, the commands for the rest."""

from __future__ import annotations

from dataclasses import dataclass, field

from launcher.memory.estimate import Estimate
from launcher.memory.ledger.weigh import Measured
from launcher.plan.ambition import Ambition
from launcher.plan.levers import objective, quality_key
from launcher.plan.speed import StepTime
from profiles.schema import Profile

# What stopped a configuration short of its least throughput (Shortfall.kind)
BATCH, VLLM, REFUSED, MEMORY = "batch", "vllm", "refused", "memory"


@dataclass
class GivenUp:
    lever: str
    before: str
    after: str
    saves_gib: float
    gain: float = 0.0  # taken for the objective, not for memory: its learning per hour over the ambition's

    def text(self) -> str:
        why = f" for {self.gain:.2f}x the learning per hour" if self.gain else ""
        return f"{self.lever.replace('_', ' ')} {self.before} -> {self.after}{why} saves {self.saves_gib:.2f} GiB"

    def to_json(self) -> dict:
        out = {"lever": self.lever, "from": self.before, "to": self.after, "saves_gib": round(self.saves_gib, 3)}
        if self.gain:
            out["learning_gain"] = round(self.gain, 3)
        return out


@dataclass
class Choice:
    """The solver's pick for one ambition: the profile (not yet validated), its predicted step and why it
    stopped there."""

    profile: Profile
    speed: StepTime
    limited_by: str
    smaller: Choice | None = None  # the same learning at its least throughput: a fallback that needs far less
    four_bit_gain: float = 0.0  # 4-bit where 16-bit fits too: its learning per hour over 16-bit's

    @property
    def prompts_per_hour(self) -> float:
        return self.speed.prompts_per_hour

    @property
    def value(self) -> float:
        """Learning per hour, the objective."""
        return objective(self.profile, self.speed)


@dataclass(frozen=True)
class Shortfall:
    """Why not even the least configuration of an ambition fits: that configuration, what it needs, and the
    pinned keys to blame. `kind`: BATCH (the pinned batch cannot cut its completions into whole groups), VLLM
    (vLLM cannot start in it), REFUSED (it fits by itself; this machine's ledger or a pinned key rules out every
    larger step) or MEMORY (it needs more than an estimate may use)."""

    kind: str
    generations: int
    completion: int
    prompts: int
    rank: int = 0
    four_bit: bool = False
    batch: int = 0
    vllm: bool = False  # vLLM holding one group; False: transformers generating
    need_gib: float = 0.0  # its estimate
    limit_gib: float = 0.0  # what an estimate may use
    usable_gib: float = 0.0
    largest: tuple[tuple[str, float], ...] = ()  # its three largest components (name, GiB)
    card_gib: float = 0.0  # the least card that would hold it
    vllm_problem: str = ""  # why vLLM cannot start (the estimate's words)
    pins: tuple[str, ...] = ()  # the --set keys without which a configuration fits on this card; () otherwise


@dataclass
class Fit:
    """The solver's answer for one ambition on one card."""

    ambition: Ambition
    profile: Profile | None  # the derived profile (validated), None when nothing fits
    estimate: Estimate | None
    need_gib: float | None  # what it is judged by (measured or estimated)
    usable_gib: float
    ambition_need_gib: float  # the learning ambition at its least throughput
    card_for_ambition_gib: float  # the least card whose usable memory holds that
    given_up: list[GivenUp] = field(default_factory=list)
    measured: Measured | None = None
    speed: StepTime | None = None
    limited_by: str = ""
    # (validated profile, quality key): the same with fewer prompts
    fallbacks: list[tuple[Profile, tuple]] = field(default_factory=list)
    shortfall: Shortfall | None = None  # why nothing fits (None when a profile does)

    @property
    def at_ambition(self) -> bool:
        """True when nothing of the experiment (generations, length, rank, precision) was given up for memory
        (4-bit taken because it learns more per hour is not given up)."""
        return self.profile is not None and not any(
            g.lever in ("generations", "completion_length", "lora_rank", "4-bit") and not g.gain for g in self.given_up
        )

    @property
    def use(self) -> float | None:
        """The share of usable memory the chosen configuration needs."""
        return None if self.need_gib is None else self.need_gib / self.usable_gib

    def key(self) -> tuple:
        return (
            self.profile is not None,
            quality_key(self.profile, self.speed, self.ambition.completion) if self.profile is not None else (),
        )
