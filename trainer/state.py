"""WHAT one attempt knows so far (its profile, folder, trainer, memory probe, the model it loaded), so that a
failure at any stage still reports steps, peak and checkpoint; and `say`, the attempt's one way to print."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from contract import attempt as contract


class AttemptState:
    """What is known so far, so that a failure at any point still reports steps, peak and checkpoint."""

    def __init__(
        self,
        profile,
        attempt_dir: Path,
        resume_from: str | None,
        main: bool = True,
        resolve_model=None,
        estimate_gib: float | None = None,
    ):
        self.profile = profile
        self.attempt_dir = attempt_dir
        self.resume_from = resume_from
        self.main = main  # the one process that writes the attempt's shared files and prints
        self.trainer = None
        self.memory = None
        self.estimate_gib = estimate_gib  # the figure the plan judged this attempt by, when known
        self.predicted_step_s = contract.predicted_step_from_env()  # the plan's seconds per step, when known
        # profile -> (path to load, the project's build record or None); the command that starts the attempt
        # gives it (it knows the offline models); without one, the profile's model is loaded as it is
        self.resolve_model = resolve_model or (lambda profile: (profile.model, None))
        self.probe = None  # the worst-case probe's figures (trainer.probe), once it has run
        self.lengths = None  # the length probe's figures (trainer.answer_lengths), once it has run
        self.length_recorder = None  # trainer.answer_lengths.LengthRecorder: the training steps' answer lengths
        self.switches: dict = {}  # the chat template's switches the prompts are rendered with
        self.model_built = None  # how the project built the model, when it did (resolve_model says)
        # False for an attempt that only finishes a run (nothing left to train): its memory peak measures no
        # training step, so it is not reported as the shape's peak (the ledger would take it as one)
        self.measures_peak = True
        self.started = time.time()
        self.stopped_by: str | None = None  # contract.attempt.STOPPED_BY_BUDGET: stopped at the run's budget
        self.eval_seconds: float | None = None  # how long the evaluation before training took
        self.phases: dict[str, float] = {}  # seconds each stage took, in order (summary.json's `phases`)
        self._phase_mark = self.started

    def phase_done(self, name: str) -> None:
        """The stage `name` ended now: its seconds since the previous one ended (or the attempt started)."""
        now = time.time()
        self.phases[name] = round(self.phases.get(name, 0.0) + now - self._phase_mark, 2)
        self._phase_mark = now

    @property
    def steps(self) -> int:
        # before train() loads the checkpoint (the probe runs then) the trainer still counts from 0
        resumed = contract.checkpoint_step(self.resume_from)
        if self.trainer is not None:
            return max(int(self.trainer.state.global_step), resumed)
        return resumed

    def latest_checkpoint(self) -> str | None:
        """This attempt's latest complete checkpoint, else the one it resumed from."""
        found = contract.latest_checkpoint(self.attempt_dir)
        if found is not None:
            return str(found)
        return str(self.resume_from) if self.resume_from else None


def say(text: str, error: bool = False) -> None:
    """Print a line; a closed pipe (the reader has gone) must not turn a good attempt into a failed one."""
    try:
        print(text, file=sys.stderr if error else sys.stdout, flush=True)
    except OSError:
        pass
