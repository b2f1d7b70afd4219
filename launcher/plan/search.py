"""HOW the fit solver searches: the values each lever may take for an ambition; the learning levers in their
order of value, each at the most ambitious value that fits with every throughput lever at its least; then
prompts per step upward, each with its fastest micro-batch, checkpointing, standby and vLLM share; and the
ambition itself at its least throughput, with what was given up against it (launcher.plan.solve: why this
order)."""

from __future__ import annotations

from launcher.memory.estimate import estimate
from launcher.plan.ambition import Ambition
from launcher.plan.judge import Judge
from launcher.plan.levers import (
    COMPLETION_STEP,
    GENERATION_CHOICES,
    GENERATIONS_AMBITION,
    LARGE_GROUP_COST,
    MAX_GENERATIONS,
    MIN_COMPLETION_LENGTH,
    MIN_GENERATIONS,
    MIN_LORA_RANK,
    PROMPT_CHOICES,
    REUSE_CHOICES,
    pinned_prompts,
)
from launcher.plan.outcome import Choice, GivenUp
from profiles.keys import VLLM_LORA_RANKS


def learned_levers(learned: tuple) -> dict:
    """The learning levers (completion length, generations, LoRA rank, 4-bit) as the profile keys they set."""
    length, gens, rank, four_bit = learned
    return {"max_completion_length": length, "num_generations": gens, "lora_rank": rank, "load_in_4bit": four_bit}


class Solver(Judge):
    """The search for one model, one card, one budget (launcher.plan.judge: how each configuration is judged)."""

    # --- the options --------------------------------------------------------------------------------
    def options(self, base, amb: Ambition) -> dict:
        pinned = amb.pinned
        if "num_generations" in pinned:
            gens = [amb.generations]
        else:
            gens = [g for g in GENERATION_CHOICES if MIN_GENERATIONS <= g <= amb.generations] or [amb.generations]
        most = amb.completion
        if "max_seq_length" in pinned:
            most = min(most, base.max_seq_length - amb.prompt)
        if "max_completion_length" in pinned:
            lengths = [amb.completion] if amb.completion <= most else []
        else:
            top = min(most, amb.completion)
            lengths = (
                [top]
                + [
                    n
                    for n in range(
                        (top - 1) // COMPLETION_STEP * COMPLETION_STEP, MIN_COMPLETION_LENGTH - 1, -COMPLETION_STEP
                    )
                    if n >= MIN_COMPLETION_LENGTH
                ]
                if top >= 1
                else []
            )
        if "lora_rank" in pinned or amb.rank == 0:
            ranks = [amb.rank]
        else:
            ranks = sorted({r for r in VLLM_LORA_RANKS if MIN_LORA_RANK <= r <= amb.rank} | {amb.rank}, reverse=True)
        if amb.rank == 0 or "load_in_4bit" in pinned:
            four_bit = [not amb.sixteen_bit]
        else:
            four_bit = [False, True]
        if "gradient_checkpointing" in pinned:
            checkpointing = [amb.checkpointing]
            if base.distributed and amb.checkpointing == "unsloth":
                checkpointing = []  # accelerate keeps checkpoints on the GPU: "unsloth" is Unsloth's
        elif base.distributed:
            checkpointing = ["false", "true"]
        else:
            checkpointing = ["false", "unsloth"]  # "true" runs as fast as "unsloth" and keeps more on the GPU
        if not base.fast_inference or base.distributed:
            standby = [False] if "vllm_standby" not in pinned or not amb.standby else []
        elif "vllm_standby" in pinned:
            standby = [amb.standby]
        elif "gpu_memory_utilization" in pinned:
            standby = [False]  # standby would replace the pinned share with Unsloth's own
        else:
            standby = [False, True]
        fixed = amb.prompts_per_step if pinned_prompts(base, pinned) is not None else None
        prompts = [fixed] if fixed is not None else [p for p in PROMPT_CHOICES if p >= amb.prompts_per_step]
        return {
            "gens": gens,
            "lengths": lengths,
            "lora_rank": ranks,
            "load_in_4bit": four_bit,
            "gradient_checkpointing": checkpointing,
            "vllm_standby": standby,
            "prompts": prompts,
        }

    @staticmethod
    def standby_allowed(amb: Ambition, four_bit: bool, option: bool) -> bool:
        """Standby as an option for these weights: never chosen by the solver with 4-bit (STANDBY_FAILURES)."""
        return not option or "vllm_standby" in amb.pinned or not four_bit

    def batches(self, base, amb: Ambition, completions: int) -> list[int]:
        """Per-device batches that divide the step's completions of one process, most first."""
        if "per_device_train_batch_size" in amb.pinned:
            return [base.per_device_train_batch_size] if completions % base.per_device_train_batch_size == 0 else []
        if "gradient_accumulation_steps" in amb.pinned:
            steps = base.gradient_accumulation_steps
            return [completions // steps] if completions % steps == 0 else []
        return [b for b in range(completions, 0, -1) if completions % b == 0]

    def shaped(self, base, amb: Ambition, levers: dict, prompts: int, batch: int):
        """`base` with `levers` (num_generations and max_completion_length among them) at `prompts` per step in
        micro-batches of `batch`, its sequence and expected length following the completion cap."""
        gens, length = levers["num_generations"], levers["max_completion_length"]
        completions = prompts * gens
        rank = levers["lora_rank"]
        seq = base.max_seq_length if "max_seq_length" in amb.pinned else amb.prompt + length
        expected = (
            base.expected_completion_length
            if "expected_completion_length" in amb.pinned
            else min(amb.expected, length)
            if amb.expected
            else 0
        )
        update = {
            "max_prompt_length": amb.prompt,
            "max_seq_length": seq,
            "per_device_train_batch_size": batch,
            "gradient_accumulation_steps": completions // batch,
            "expected_completion_length": expected,
            **levers,
        }
        if rank and base.lora_rank and "lora_alpha" not in amb.pinned:
            update["lora_alpha"] = max(1, round(base.lora_alpha * rank / base.lora_rank))
        return base.model_copy(update=update)

    # --- the search ---------------------------------------------------------------------------------
    def least_prompts(self, base, amb: Ambition, opts: dict, gens: int) -> int | None:
        """The fewest prompts per step whose completions a (pinned) batch cuts into whole groups."""
        return next((p for p in opts["prompts"] if self.batches(base, amb, p * gens)), None)

    def _least(self, base, amb, opts, learned: tuple) -> bool:
        """Whether the learning levers `learned` fit with every throughput lever at its least."""
        length, gens, rank, four_bit = learned
        prompts = self.least_prompts(base, amb, opts, gens)
        if prompts is None:
            return False
        batches = self.batches(base, amb, prompts * gens)
        for standby in opts["vllm_standby"]:
            if not self.standby_allowed(amb, four_bit, standby):
                continue
            levers = {
                **learned_levers(learned),
                "gradient_checkpointing": opts["gradient_checkpointing"][-1],
                "vllm_standby": standby,
            }
            p = self.shaped(base, amb, levers, prompts, batches[-1])
            if self.with_share(p, amb.pinned, "floor") is not None:
                return True
        return False

    def learning(self, base, amb: Ambition, opts: dict) -> tuple[int, int, int, bool] | None:
        """(completion length, generations, rank, 4-bit): each learning lever at its most valuable value that
        fits, in their order of value, with the throughput levers at their least."""
        cheapest_rank, cheapest_bits = opts["lora_rank"][-1], opts["load_in_4bit"][-1]
        for length in opts["lengths"]:
            for gens in opts["gens"]:
                if self._least(base, amb, opts, (length, gens, cheapest_rank, cheapest_bits)):
                    rank = next(
                        r for r in opts["lora_rank"] if self._least(base, amb, opts, (length, gens, r, cheapest_bits))
                    )
                    four_bit = next(
                        b for b in opts["load_in_4bit"] if self._least(base, amb, opts, (length, gens, rank, b))
                    )
                    return length, gens, rank, four_bit
        return None

    def best_at(self, base, amb: Ambition, opts: dict, learned: tuple, prompts: int) -> Choice | None:
        """The fastest configuration of `prompts` per step with the learning levers `learned`."""
        length, gens, rank, four_bit = learned
        batches = self.batches(base, amb, prompts * gens)
        best = None
        for checkpointing in opts["gradient_checkpointing"]:
            for standby in opts["vllm_standby"]:
                if not self.standby_allowed(amb, four_bit, standby):
                    continue
                levers = {**learned_levers(learned), "gradient_checkpointing": checkpointing, "vllm_standby": standby}

                def placed(batch, levers=levers):
                    return self.with_share(self.shaped(base, amb, levers, prompts, batch), amb.pinned)

                # the largest batch that fits (memory grows with the batch: a binary search), and the next
                # smaller one, whose vLLM share may be larger
                low, high, found = 0, len(batches) - 1, None
                while low <= high:
                    middle = (low + high) // 2
                    p = placed(batches[middle])
                    if p is not None:
                        found, high = (middle, p), middle - 1
                    else:
                        low = middle + 1
                if found is None:
                    continue
                candidates = [found[1]]
                if found[0] + 1 < len(batches):
                    smaller = placed(batches[found[0] + 1])
                    if smaller is not None:
                        candidates.append(smaller)
                for p in [q for c in candidates for q in self.reused(c, amb)]:
                    choice = Choice(p, self.speed(p), "")
                    if best is None or choice.value > best.value:
                        best = choice
        return best

    def reused(self, p, amb: Ambition) -> list:
        """`p`, and `p` with one generation batch serving each of REUSE_CHOICES optimizer steps where that fits
        (its memory: the larger generation batch, the old policy's log-probs). With vLLM only: transformers'
        generate of the larger batch took the time back where it was measured (benchmarks/generation_reuse.md)."""
        if "steps_per_generation" in amb.pinned or not p.fast_inference:
            return [p]
        out = [p]
        for served in REUSE_CHOICES[1:]:
            q = self.with_share(
                p.model_copy(update={"steps_per_generation": served * p.gradient_accumulation_steps}), amb.pinned
            )
            if q is not None:
                out.append(q)
        return out

    def search(self, base, amb: Ambition) -> Choice | None:
        """The solver's choice for `base` (unvalidated copy), or None when nothing fits."""
        if self.vllm_refused and base.uses_vllm_server:
            return None  # the server cannot start here, and it is nothing but vLLM
        if self.vllm_refused and base.fast_inference:
            base = base.model_copy(update={"fast_inference": False, "vllm_standby": False, "vllm_max_num_seqs": 0})
        found = self._search(base, amb)
        if found is None and base.fast_inference and not base.uses_vllm_server and "fast_inference" not in amb.pinned:
            found = self._search(
                base.model_copy(update={"fast_inference": False, "vllm_standby": False, "vllm_max_num_seqs": 0}), amb
            )
        return found

    def solve(self, base, amb: Ambition):
        """The chosen profile (unvalidated copy of `base`), or None."""
        found = self.search(base, amb)
        return found.profile if found is not None else None

    def _search(self, base, amb: Ambition) -> Choice | None:
        opts = self.options(base, amb)
        if not all(
            opts[k]
            for k in (
                "gens",
                "lengths",
                "lora_rank",
                "load_in_4bit",
                "gradient_checkpointing",
                "vllm_standby",
                "prompts",
            )
        ):
            return None  # a pinned key the configuration cannot take (e.g. offloaded checkpoints on accelerate)
        learned = self.learning(base, amb, opts)
        if learned is None:
            return None
        best = self._throughput(base, amb, opts, learned)
        standby_pinned = "vllm_standby" in amb.pinned and amb.standby  # with 4-bit it fails at start (levers)
        if best is not None and not learned[3] and True in opts["load_in_4bit"] and not standby_pinned:
            # 16-bit fits, and is weighed against 4-bit by the objective: 4-bit's memory buys prompts per step
            # and vLLM sequences, its bitsandbytes dequantisation costs every forward (launcher.plan.speed)
            quantised = self._throughput(base, amb, opts, (*learned[:3], True))
            if quantised is not None and quantised.value > best.value:
                quantised.four_bit_gain = quantised.value / best.value
                best = quantised
        return best

    def _throughput(self, base, amb: Ambition, opts: dict, learned: tuple) -> Choice | None:
        """The learning levers `learned` at the prompts per step (each at its fastest) that learn most per hour,
        with what limited the prompts and the fallback at the least throughput."""
        best, last, limited = None, None, "cap"
        for prompts in opts["prompts"]:
            if not self.batches(base, amb, prompts * learned[1]):
                continue  # a pinned batch does not cut these completions into whole groups
            choice = self.best_at(base, amb, opts, learned, prompts)
            if choice is None:
                limited = "memory" if best is not None else limited
                break
            last = choice
            if best is None or choice.value > best.value:
                best = choice
        if best is None:
            return None
        if best is not last:  # a larger step fitted, and learned less per hour
            limited = "objective"
        best.smaller = self._least_choice(base, amb, opts, learned)
        if len(opts["prompts"]) == 1:
            limited = "pinned"
        best.limited_by = limited
        length, gens, rank, four_bit = learned
        if gens == GENERATIONS_AMBITION and "num_generations" not in amb.pinned and limited == "cap":
            prompts = max(1, best.speed.prompts // max(best.profile.num_gpus, 1))
            larger = self.best_at(base, amb, opts, (length, MAX_GENERATIONS, rank, four_bit), prompts)
            if larger is not None and larger.value >= (1 - LARGE_GROUP_COST) * best.value:
                larger.limited_by = limited
                best = larger
        return best

    def _least_choice(self, base, amb: Ambition, opts: dict, learned: tuple) -> Choice | None:
        """The learning levers `learned` at the least throughput (the fallback rung): one prompt per step,
        micro-batch 1, the heaviest checkpointing, vLLM holding one group."""
        length, gens, rank, four_bit = learned
        prompts = self.least_prompts(base, amb, opts, gens) or opts["prompts"][0]
        batches = self.batches(base, amb, prompts * gens)
        levers = {
            **learned_levers(learned),
            "gradient_checkpointing": opts["gradient_checkpointing"][-1],
            "vllm_standby": opts["vllm_standby"][0] if "vllm_standby" in amb.pinned else False,
        }
        if not batches:
            return None
        p = self.with_share(self.shaped(base, amb, levers, prompts, batches[-1]), amb.pinned, "floor")
        return Choice(p, self.speed(p), "fallback") if p is not None else None

    # --- the ambition and what was given up ---------------------------------------------------------
    def ambitious(self, base, amb: Ambition):
        """The learning ambition as a profile at its least throughput: one prompt per step (or the pinned
        prompts), micro-batch 1, the heaviest checkpointing, vLLM holding one group."""
        if self.vllm_refused and base.fast_inference:
            base = base.model_copy(update={"fast_inference": False, "vllm_standby": False, "vllm_max_num_seqs": 0})
        checkpointing = "true" if base.distributed else "unsloth"
        if "gradient_checkpointing" in amb.pinned:
            checkpointing = amb.checkpointing
        levers = {
            **learned_levers((amb.completion, amb.generations, amb.rank, not amb.sixteen_bit)),
            "gradient_checkpointing": checkpointing,
            "vllm_standby": amb.standby and base.fast_inference and "vllm_standby" in amb.pinned,
        }
        completions = amb.prompts_per_step * amb.generations
        batches = self.batches(base, amb, completions) or [1]
        p = self.shaped(base, amb, levers, amb.prompts_per_step, batches[-1])
        return self.least_share(p, amb.pinned)

    def given_up(self, ambition_profile, chosen, four_bit_gain: float = 0.0) -> list[GivenUp]:
        """Each learning lever's change from the ambition to the choice, with the GiB it saved, taken from the
        last given up (the experiment) to the first, each at the least throughput (one group in vLLM); 4-bit
        with `four_bit_gain` when the objective chose it where 16-bit fits too."""
        steps = (
            ("generator", ("fast_inference",)),
            ("completion_length", ("max_completion_length", "max_seq_length")),
            ("generations", ("num_generations",)),
            ("lora_rank", ("lora_rank", "lora_alpha")),
            ("4-bit", ("load_in_4bit",)),
        )
        current = ambition_profile
        before = estimate(current, self.arch, self.gpu).total_gib
        out: list[GivenUp] = []
        for lever, keys in steps:
            if all(getattr(current, k) == getattr(chosen, k) for k in keys):
                continue
            update = {k: getattr(chosen, k) for k in keys}
            if lever == "generations":  # the same prompts per step, in whole groups
                prompts = max(1, current.effective_batch // current.num_generations)
                update.update(
                    {"per_device_train_batch_size": 1, "gradient_accumulation_steps": prompts * chosen.num_generations}
                )
            if lever == "generator":
                update.update({"vllm_standby": False, "vllm_max_num_seqs": 0})
            nxt = self.least_share(current.model_copy(update=update), frozenset())
            after = estimate(nxt, self.arch, self.gpu).total_gib
            gain = four_bit_gain if lever == "4-bit" else 0.0
            out.append(GivenUp(lever, _lever_text(lever, current), _lever_text(lever, nxt), before - after, gain))
            current, before = nxt, after
        return out


def _lever_text(lever: str, p) -> str:
    if lever == "generator":
        return "vLLM" if p.fast_inference else "transformers"
    if lever == "generations":
        return str(p.num_generations)
    if lever == "completion_length":
        return str(p.max_completion_length)
    if lever == "lora_rank":
        return str(p.lora_rank)
    if lever == "4-bit":
        return "4-bit" if p.load_in_4bit else "16-bit"
    return str(getattr(p, lever, "?"))
