"""HOW LONG completions are planned: the cap the task needs (memory is planned at it) and the length a
completion is expected to run (time is planned at it), from what this machine measured of the model's answers
on the task with the same chat-template switches (the ledger) when it has, else from the task's reference
solutions under the model's tokenizer (tasks.reference_lengths gives the characters; the rate is measured from the
tokenizer's own file when it is on this machine, profiles.tokenizer, else profiles.catalog's estimate).

A template that thinks writes its thinking before the answer, and its cap is at least a thinking cap until
measured: THINKING_CAP for Qwen3 with enable_thinking on; ALWAYS_THINKING_CAP for a template that thinks with no
switch to stop it (DeepSeek-R1's distillations, QwQ, Phi-4-reasoning); EFFORT_CAPS by reasoning_effort for
gpt-oss's (its analysis channel at every level). The template's own text says which where it is on this machine
(profiles.tokenizer), else the model's family and name (profiles.architecture.thinking_of).

A model's worked solution runs longer than the terse reference: published GRPO runs on GSM8K log mean
completions of 157-203 tokens (docs/planning.md) against reference solutions of 69-85 tokens under the same
tokenizers, about 2.5 times. The cap the task needs is that ratio on the 99th percentile of the references,
with a quarter more as margin, rounded up to CAP_STEP tokens; the expected length is the ratio on their mean.
Data whose answers are not worked solutions (or that cannot be read at plan time) takes DEFAULT_CAP and half
of it as the expected length. A pinned max_completion_length or a set expected_completion_length wins.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

from contract.length_rule import CAP_MARGIN, CAP_STEP, planned_from
from launcher.plan.turns import TurnPlan, turn_plan
from profiles.catalog import Architecture, chars_per_token
from profiles.tokenizer import measured_chars_per_token, template_thinking
from tasks.prompts import (
    EFFORT_SWITCH,
    THINKING_SWITCH,
    THINKS_ALWAYS,
    THINKS_NEVER,
    effort_level,
    template_switches,
    thinks,
)
from tasks.reference_lengths import SHIPPED, reference_lengths

__all__ = [
    "CAP_MARGIN",
    "CAP_STEP",
    "CompletionPlan",
    "completion_plan",
    "expected_length",
    "planned_switches",
    "planned_thinking",
]

WORKED_SOLUTION_RATIO = 2.5  # a model's worked solution, in tokens, over the reference solution's
FORMAT_TOKENS = 24  # the <reasoning> and <answer> tags around it and the answer line
DEFAULT_CAP = 1024  # data without worked solutions: a stated default
DEFAULT_EXPECTED_SHARE = 0.5  # ... and half of it expected
TEMPLATE_TOKENS = 24  # a chat template's role markers around the system and user turns
PROMPT_SHARE_UNKNOWN = 0.75  # prompts of data not read at plan time: this share of max_prompt_length
# A thinking template's answers, until measured: published Qwen3 GRPO runs think for one to two thousand tokens
THINKING_CAP = 2048
THINKING_EXPECTED_SHARE = 0.5  # ... half the cap expected (every thinking template)
# A template that always thinks: distilled reasoners think at length, and nothing shortens them. open-r1's
# DeepSeek-R1-Distill-Qwen-1.5B and -7B GRPO demos (recipes/DeepSeek-R1-Distill-Qwen-*/grpo/config_demo.yaml)
# cap completions at 1024 tokens and its full runs at 32768 (config_remote_grpo.yaml); twice the Qwen3 figure
# here, and the length probe raises it from the answers
ALWAYS_THINKING_CAP = 4096
# gpt-oss by reasoning_effort: verl's gpt-oss-20b GRPO example on GSM8K (examples/grpo_trainer/run_gptoss_20b.sh)
# samples up to 8192 tokens at medium and asks for more at high; low keeps the Qwen3 figure, each level doubles
EFFORT_CAPS = {"low": THINKING_CAP, "medium": 2 * THINKING_CAP, "high": 4 * THINKING_CAP}
MEASURED = "measured on this machine"
ESTIMATED = "estimated"


@dataclass(frozen=True)
class CompletionPlan:
    cap: int  # tokens: the completion cap the task needs (or the pinned one)
    expected: int  # tokens a completion is expected to run on average
    prompt_expected: int  # tokens a prompt is expected to take (its cap is max_prompt_length)
    basis: str  # where the figures come from, in words
    switches: dict = field(default_factory=dict)  # the chat template's switches the answers are planned with
    source: str = ESTIMATED  # MEASURED (the ledger's measurement of the answers) or ESTIMATED
    thinking: bool = False  # the template writes a thinking block before the answer
    kind: str = THINKS_NEVER  # what the template does about thinking (planned_thinking)
    rate: str = ""  # the characters per token estimated from, and where that figure comes from
    turns: TurnPlan | None = None  # with tools: the turns assumed (launcher.plan.turns), in cap and expected
    record: str = ""  # MEASURED: the ledger record read, and how to forget it

    def to_json(self) -> dict:
        out = {
            "cap": self.cap,
            "expected": self.expected,
            "prompt_expected": self.prompt_expected,
            "basis": self.basis,
            "switches": dict(self.switches),
            "source": self.source,
            "thinking": self.thinking,
            "thinking_kind": self.kind or None,
            "rate": self.rate,
            "record": self.record or None,
        }
        if self.turns is not None:
            out["turns"] = self.turns.to_json()
        return out

    def text(self) -> str:
        """One line: the cap, the expected length, where they come from, the template's switches."""
        switches = ", ".join(f"{k} {str(v).lower()}" for k, v in self.switches.items()) or "none"
        return f"cap {self.cap}, expected {self.expected} tokens ({self.source}); template switches: {switches}" + (
            thinking_words(self)
        )


@lru_cache(maxsize=64)
def _reference(dataset: str, answer_field: str, question_field: str):
    return reference_lengths(dataset, answer_field, question_field)


def planned_thinking(profile, arch: Architecture) -> str:
    """What the model's chat template does about thinking (tasks.prompts.template_thinking's kinds): its own file
    where it is on this machine says, else the family and name (Architecture.thinking). A model known by name to
    think always does so even where its file says nothing of it (the weights think: an R1 distillation's older
    template has no <think> in its generation prompt)."""
    found = template_thinking(profile.model)
    if found is None:
        return arch.thinking
    if found == THINKS_NEVER and arch.thinking == THINKS_ALWAYS:
        return THINKS_ALWAYS
    return found


def planned_switches(profile, arch: Architecture) -> tuple[dict, str]:
    """(the chat template's switches the model's prompts will be rendered with, what its template does about
    thinking: planned_thinking)."""
    kind = planned_thinking(profile, arch)
    return template_switches(profile.chat_template_kwargs, kind), kind


def thinking_floor(kind: str, switches: dict) -> tuple[int, str]:
    """(the cap a thinking template's answers take at least until measured, the words that say why), or
    (0, "") when the template does not think with these switches."""
    if not thinks(switches, kind):
        return 0, ""
    if kind == EFFORT_SWITCH:
        level = effort_level(switches)
        cap = EFFORT_CAPS[level]
        said = "" if EFFORT_SWITCH in switches else " (the template's default)"
        shorter = f"; chat_template_kwargs: {{{EFFORT_SWITCH}: low}} shortens it" if level != "low" else ""
        return cap, (
            f"; the chat template thinks on its analysis channel before the answer, at {EFFORT_SWITCH} "
            f"{level}{said}: at least {cap} tokens until measured{shorter}"
        )
    if kind == THINKS_ALWAYS:
        return ALWAYS_THINKING_CAP, (
            "; the chat template always thinks (its generation prompt opens a <think> block, or it asks for one; "
            f"no switch turns it off): the thinking comes before the answer, so at least {ALWAYS_THINKING_CAP} "
            "tokens until measured"
        )
    return THINKING_CAP, (
        f"; the chat template thinks ({THINKING_SWITCH} is not false): a <think> block comes before the "
        f"answer, so at least {THINKING_CAP} tokens until measured"
    )


def thinking_words(plan: CompletionPlan) -> str:
    """The notes' words on a thinking template: that it thinks, and the switch that shortens it where it has one."""
    if not plan.thinking:
        return ""
    if plan.kind == EFFORT_SWITCH:
        level = effort_level(plan.switches)
        return f"; the template thinks before answering ({EFFORT_SWITCH} {level}" + (
            f": chat_template_kwargs: {{{EFFORT_SWITCH}: low}} shortens it)" if level != "low" else ")"
        )
    if plan.kind == THINKS_ALWAYS:
        return "; the template always thinks before answering (no switch turns it off)"
    return "; the template thinks before answering"


def tokenizer_rate(profile, arch: Architecture) -> tuple[float, str]:
    """(characters per token of worked maths under the model's tokenizer, where the figure comes from)."""
    measured = measured_chars_per_token(profile.model)
    if measured is not None:
        return measured[0], f"its tokenizer, measured: {measured[1]}"
    rate, family = chars_per_token(arch)
    return rate, f"{family} tokenizer, an estimate"


def completion_plan(profile, arch: Architecture, pinned=(), measurements=None) -> CompletionPlan:
    """The cap and expected length of `profile`'s completions on its task with `arch`'s tokenizer and its chat
    template's switches. `pinned`: the keys the user set (a pinned max_completion_length is the cap);
    `measurements`: the ledger's records, whose newest measurement of these answers replaces the estimate."""
    switches, kind = planned_switches(profile, arch)
    thinking = thinks(switches, kind)
    rate, rate_source = tokenizer_rate(profile, arch)
    rate_text = f"{rate:g} characters a token ({rate_source})"
    ref = _reference(profile.dataset, profile.answer_field or "", profile.question_field or "")
    usable = ref is not None and (ref.task in SHIPPED or ref.worked)
    if usable:
        need = CAP_MARGIN * (WORKED_SOLUTION_RATIO * ref.answer_p99_chars / rate + FORMAT_TOKENS)
        cap = max(CAP_STEP, math.ceil(need / CAP_STEP) * CAP_STEP)
        expected = WORKED_SOLUTION_RATIO * ref.answer_mean_chars / rate + FORMAT_TOKENS
        basis = (
            f"{ref.task}: reference solutions of {ref.answer_mean_chars:.0f} characters on average, "
            f"{ref.answer_p99_chars:.0f} at the 99th percentile, at {rate_text}, x{WORKED_SOLUTION_RATIO:g} "
            "for a worked solution"
        )
    else:
        cap = DEFAULT_CAP
        expected = DEFAULT_EXPECTED_SHARE * cap
        basis = (
            f"{profile.dataset}: "
            + ("its answers are not worked solutions" if ref is not None else "not readable at plan time")
            + f"; the default cap {DEFAULT_CAP} tokens, half of it expected"
        )
    floor, floor_words = thinking_floor(kind, switches)
    if floor:
        cap = max(cap, floor)
        expected = max(expected, THINKING_EXPECTED_SHARE * cap)
        basis += floor_words
    turns = turn_plan(profile, rate)
    if turns is not None:  # the calls and the replies share the completion's tokens with the answer
        cap = math.ceil((cap + turns.extra_tokens) / CAP_STEP) * CAP_STEP
        expected += turns.extra_tokens
        basis += f"; with tools: {turns.basis}"
    source = ESTIMATED
    found = None
    if measurements:
        from launcher.memory.ledger.weigh import measured_lengths

        found = measured_lengths(measurements, profile, switches)
    if found is not None:
        measured = found.measured
        # a cut measurement is a lower bound: it raises the estimate, never lowers it
        cap, expected = planned_from(measured, (cap, int(round(expected))))
        source = MEASURED
        basis = (
            f"{MEASURED} ({found.day}): {measured.samples} answers ({measured.source}) of {measured.mean:.0f} tokens "
            f"on average, {measured.p95} at the 95th percentile, {measured.cut_share:.0%} cut at {measured.cap}"
            + (
                "; they were cut, so they run longer than measured: the cap doubles until they are measured whole, "
                "and neither figure falls below the estimate"
                if measured.censored
                else ""
            )
            + f"; {found.record_text()}"
        )
    if "max_completion_length" in pinned:
        cap = profile.max_completion_length
        basis += f"; the cap pinned at {cap}"
    if profile.expected_completion_length:
        expected = profile.expected_completion_length
        basis += f"; expected length set to {expected}"
    expected = max(1, min(int(round(expected)), cap))
    if ref is not None and ref.question_mean_chars:
        chars = ref.question_mean_chars + len(profile.system_prompt or "")
        prompt = min(profile.max_prompt_length, int(round(chars / rate + TEMPLATE_TOKENS)))
    else:  # prompts not known: three quarters of their cap
        prompt = int(PROMPT_SHARE_UNKNOWN * profile.max_prompt_length)
    if turns is not None:  # TRL renders the tools into every prompt
        prompt = min(profile.max_prompt_length, prompt + turns.schema_tokens)
    rate_note = f"{rate:g} characters a token, {rate_source}"
    return CompletionPlan(
        int(cap),
        expected,
        max(prompt, 1),
        basis,
        switches=switches,
        source=source,
        thinking=thinking,
        kind=kind,
        rate=rate_note,
        turns=turns,
        record=found.record_text() if found is not None else "",
    )


def expected_length(profile, arch: Architecture, measurements=None) -> int:
    """Tokens a completion of `profile` is expected to run, at most its cap: the profile's own
    expected_completion_length when set, else the measured or estimated one."""
    plan = completion_plan(profile, arch, measurements=measurements)
    return min(plan.expected, profile.max_completion_length)


def thinking_conflict(profile, plan: CompletionPlan) -> str | None:
    """What to change when the chat template thinks while the rewards expect an answer that opens with another
    layout (a thinking block first gives them 0), or None."""
    if not plan.thinking:
        return None
    from rewards.format import FORMAT_LAYOUTS
    from rewards.parse import THINK_LAYOUT

    other = [name for name in profile.rewards if FORMAT_LAYOUTS.get(name, THINK_LAYOUT) != THINK_LAYOUT]
    if not other:
        return None
    layout = FORMAT_LAYOUTS[other[0]]
    if plan.kind in (THINKS_ALWAYS, EFFORT_SWITCH):
        how = "always" if plan.kind == THINKS_ALWAYS else f"on its analysis channel at every {EFFORT_SWITCH}"
        return (
            f"{profile.name}: {profile.model}'s chat template thinks {how}, and no switch turns it off: its answers "
            f"open with the thinking, and {', '.join(other)} expect the {layout} layout, so they score 0 (fix: "
            "rewards that read the answer after the thinking, e.g. accuracy alone; or a model that does not think)"
        )
    return (
        f"{profile.name}: {profile.model}'s chat template thinks ({THINKING_SWITCH} is true): its answers open "
        f"with a <think> block, and {', '.join(other)} expect the {layout} layout, so they score 0 (fix: "
        f"chat_template_kwargs: {{{THINKING_SWITCH}: false}}, the default; or a system_prompt asking for "
        "<think>/<answer> with the think_format / think_count rewards)"
    )


def lengths_notes(profile, measurements=None) -> list[str]:
    """For the plan's chosen profile: one line with its completion cap and expected length, where they come
    from and the chat template's switches; and one more when its template thinks against its rewards."""
    if profile is None:
        return []
    from contract.errors import UsageError
    from profiles.catalog import resolve

    try:
        arch = resolve(profile.model)
    except UsageError:
        return []
    plan = completion_plan(profile, arch, measurements=measurements)
    cap = profile.max_completion_length
    needs = f" (the answers need {plan.cap})" if plan.cap != cap else ""
    task = profile.dataset if profile.dataset in SHIPPED else profile.dataset.rsplit("/", 1)[-1]
    source = plan.source if plan.source == MEASURED else f"{plan.source}; {plan.rate}"
    record = f", {plan.record}" if plan.source == MEASURED and plan.record else ""
    notes = [
        f"lengths of {profile.model} on {task}: cap {cap}{needs}, expected {min(plan.expected, cap)} tokens "
        f"({source}){record}; template switches: "
        + (", ".join(f"{k} {str(v).lower()}" for k, v in plan.switches.items()) or "none")
        + thinking_words(plan)
    ]
    conflict = thinking_conflict(profile, plan)
    if conflict:
        notes.append(conflict)
    return notes
