"""WHEN an attempt stops for the run's time budget (train --hours), and what the run will take at the pace it
measures: the ETA re-predicted from the measured step times, a word once when the run will overrun its budget
by more than OVERRUN_SHARE, and at the budget a stop with a checkpoint (the adapter and the report follow, as
at max_steps).

The budget is the whole run's (the supervisor passes its deadline and length: contract.attempt
run_budget_from_env); an attempt stops when its next step and its finishing (saving, the final evaluation,
about as long as the first evaluation took) would not end inside it. Under accelerate every rank takes the
same decision (the stop is agreed over the process group), so no rank waits on one that has stopped.
"""

from __future__ import annotations

import time

from transformers import TrainerCallback

from trainer.progress import duration_text, eta_seconds, pace

OVERRUN_SHARE = 0.10  # a run predicted to end later than its budget by more than this share says so, once
FINISH_MARGIN_S = 20.0  # saving the checkpoint and the adapter, beyond the final evaluation


class BudgetCallback(TrainerCallback):
    """At each step's end: the overrun warning (once) and, when the next step would end past the budget, a
    checkpoint and the stop. `clock` gives seconds since the epoch (injected by tests)."""

    def __init__(self, deadline: float, budget_s: float, finish_s: float = 0.0, clock=time.time, say=None):
        self.deadline = float(deadline)
        self.budget_s = float(budget_s)
        self.finish_s = float(finish_s) + FINISH_MARGIN_S
        self.clock = clock
        self.say = say
        self.step_times: list[float] = []
        self.stopped = False
        self.warned = False
        self._last: float | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        self._last = self.clock()
        return control

    def decide(self, step: int, max_steps: int) -> bool:
        """Record the step just ended and say whether training stops now."""
        now = self.clock()
        if self._last is not None:
            self.step_times.append(now - self._last)
        self._last = now
        each = pace(self.step_times) or 0.0
        left = eta_seconds(self.step_times, step, max_steps) or 0.0
        started = self.deadline - self.budget_s
        if not self.warned and now + left + self.finish_s - started > self.budget_s * (1.0 + OVERRUN_SHARE):
            self.warned = True
            if self.say is not None:
                reached = step + max(0, int((self.deadline - now - self.finish_s) // each)) if each else step
                self.say(
                    f"at the measured {each:.1f} s a step, the {max_steps} steps take "
                    f"{duration_text(now + left + self.finish_s - started)}, more than the "
                    f"{duration_text(self.budget_s)} budget by over {OVERRUN_SHARE:.0%}: the run stops at the budget (about step "
                    f"{min(reached, max_steps)}) with a checkpoint, the adapter and the report"
                )
        return step < max_steps and now + each + self.finish_s > self.deadline

    def on_step_end(self, args, state, control, **kwargs):
        stop = self.decide(state.global_step, state.max_steps)
        stop = _agreed(stop, getattr(args, "device", None))
        if stop and not self.stopped:
            self.stopped = True
            control.should_save = True
            control.should_training_stop = True
            if self.say is not None:
                self.say(
                    f"the run's budget ends before another step and the finishing fit: stopping at step "
                    f"{state.global_step} of {state.max_steps} with a checkpoint"
                )
        return control


def _agreed(stop: bool, device) -> bool:
    """Every rank's stop decision agreed (any rank stopping stops them all); the local one on one process."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - torch is there wherever a trainer runs
        return stop
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return stop
    flag = torch.tensor([1.0 if stop else 0.0], device=device if device is not None else "cpu")
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item() > 0)
