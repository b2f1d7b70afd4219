"""Trainer callbacks: per-step telemetry (metrics.jsonl, fed by trainer.memory_meter and shown by
trainer.progress), a clean stop on SIGINT / SIGTERM, and the mark of a complete checkpoint. Each does O(1) cheap work per step: no blocking driver calls; one line flushed per step."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

from transformers import TrainerCallback

from contract.safe_write import append_line


def _number(value):
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return None if (isinstance(value, float) and not math.isfinite(value)) else value
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


# Steps in a row whose every completion was cut at the cap, with mask_truncated_completions, before the attempt
# stops: each of them had a loss of 0, so the policy (and what it generates) cannot change.
ALL_CUT_STEPS = 3


class TelemetryCallback(TrainerCallback):
    """One JSON line per optimizer step in metrics.jsonl, from TRL's per-step log and our own timers. `cap`:
    max_completion_length, what an answer is cut at (the cut share's warning); `masks_cut`: whether
    mask_truncated_completions leaves cut completions out of the loss, where ALL_CUT_STEPS steps in a row with
    every completion cut stop the attempt as bad input."""

    def __init__(
        self,
        path: Path,
        reward_names: list[str],
        memory,
        progress=None,
        signal=None,
        evaluation=None,
        lengths=None,
        cap: int | None = None,
        masks_cut: bool = False,
    ):
        self.evaluation = evaluation  # EvaluateDuringTraining: the evaluation made at this step, if any
        self.lengths = lengths  # trainer.answer_lengths.LengthRecorder: the answers' lengths, step by step
        self.cap = cap  # max_completion_length: what an answer is cut at
        self.masks_cut = masks_cut
        self.cut_warning: str | None = None  # the "answers are cut" line, once it has been said
        self.path = Path(path)
        self.reward_names = list(reward_names)
        self.memory = memory
        self.progress = progress
        self.signal = signal  # trainer.group_signal.GroupSignal: the rewards each step's groups got
        self.warning: str | None = None  # the run's "cannot learn" line, once it has been said
        self.rows: list[dict] = []
        self.final_logs: dict = {}
        self._step_started = None
        self._last_log_time = None

    def on_train_begin(self, args, state, control, **kwargs):
        self._last_log_time = time.perf_counter()
        if self.signal is not None:
            self.signal.clear()  # the probe's step scored completions too; they are not training's
        if self.lengths is not None:
            self.lengths.clear()

    def on_step_begin(self, args, state, control, **kwargs):
        self._step_started = time.perf_counter()

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        if "reward" not in logs and "loss" not in logs:
            self.final_logs.update(logs)  # the closing summary (train_runtime, train_loss, ...)
            return
        now = time.perf_counter()
        scored = self.evaluation.at(state.global_step) if self.evaluation is not None else None
        # the evaluation ran between the step and this log: its time is its own, not the step's
        spent = scored["seconds"] if scored else 0.0
        row = {
            "step": state.global_step,
            "rewards": {name: _number(logs.get(f"rewards/{name}/mean")) for name in self.reward_names},
            "reward": _number(logs.get("reward")),
            "reward_std": _number(logs.get("reward_std")),
            "completion_length": _number(logs.get("completions/mean_length")),
            # the share of this step's answers cut at max_completion_length (TRL's, over every process)
            "cut_share": _number(logs.get("completions/clipped_ratio")),
            "loss": _number(logs.get("loss")),
            "kl": _number(logs.get("kl")),
            "entropy": _number(logs.get("entropy")),
            "grad_norm": _number(logs.get("grad_norm")),
            "learning_rate": _number(logs.get("learning_rate")),
            "group_signal": self.signal.take() if self.signal is not None else None,
            "clipped_ratio": _number(logs.get("completions/clipped_ratio")),
            "step_time": round(now - self._last_log_time - spent, 4),
            "time": round(time.time(), 3),
            "memory": self.memory.sample(),
        }
        if "tools/call_frequency" in logs:  # TRL's own counts over the step's completions
            row["tools"] = {
                "calls_per_completion": _number(logs.get("tools/call_frequency")),
                "failure_share": _number(logs.get("tools/failure_frequency")),
            }
        if scored:
            row["eval"] = scored
        self._last_log_time = now
        self.rows.append(row)
        # one whole line per step (never half a record on a full disk or a kill); a step takes seconds, so
        # the flush to disk costs nothing that shows
        append_line(self.path, json.dumps(row))
        if self.progress is not None:
            self.progress.update(state.global_step, state.max_steps, row)
        self._stop_if_all_cut()
        if self.warning is None:
            from trainer.group_signal import no_signal_warning

            self.warning = no_signal_warning(self.rows)
            if self.warning is not None and self.progress is not None:
                self.progress.warn(self.warning)
        if self.cut_warning is None and self.cap:
            from trainer.answer_lengths import cut_share_warning

            self.cut_warning = cut_share_warning(self.rows, self.cap)
            if self.cut_warning is not None and self.progress is not None:
                self.progress.warn(self.cut_warning)

    def _stop_if_all_cut(self) -> None:
        if not self.masks_cut or self.cap is None or len(self.rows) < ALL_CUT_STEPS:
            return
        if all(row.get("clipped_ratio") == 1.0 for row in self.rows[-ALL_CUT_STEPS:]):
            from contract.errors import UsageError

            raise UsageError(
                f"every completion of the last {ALL_CUT_STEPS} steps ran to max_completion_length {self.cap}, and "
                "mask_truncated_completions leaves such completions out of the loss: the loss is 0 and nothing "
                "trains (fix: raise max_completion_length, or set mask_truncated_completions: false)"
            )

    def on_train_end(self, args, state, control, **kwargs):
        self.close()

    def close(self):
        pass  # nothing held open: each row was appended whole


class EvaluateDuringTraining(TrainerCallback):
    """Every `every` steps (profiles.evaluation_steps.eval_interval), score the test rows with the model as it is: the
    accuracy and the well-formed share go into that step's metrics.jsonl line (TelemetryCallback takes them).
    A signal during it stops it between two batches, as the final evaluation stops; the step's checkpoint is
    then saved and training stops. An evaluation that beats every earlier one keeps the model as it is now
    (`best`, trainer.best_model.BestKeeper: best-adapter/)."""

    def __init__(self, every: int, evaluate, signals, say=None, best=None):
        self.every = every
        self.evaluate = evaluate  # () -> evaluation.score.evaluate's result for the test rows
        self.signals = signals
        self.say = say
        self.best = best
        self.points: list[dict] = []
        self.seconds = 0.0

    def on_step_end(self, args, state, control, **kwargs):
        step = state.global_step
        if not self.every or step % self.every or step >= state.max_steps or self.signals.stopped:
            return control
        from evaluation.generate import EvaluationStopped

        # the phase first: a signal that follows the line below finds the evaluation already begun
        previous, self.signals.phase = self.signals.phase, "evaluating"
        if self.say is not None:
            self.say(f"evaluating at step {step} ...")
        started = time.perf_counter()
        try:
            result = self.evaluate()
        except EvaluationStopped:
            result = None
        finally:
            self.signals.phase = previous
            self.seconds += time.perf_counter() - started
        if result is None or self.signals.stopped:
            control.should_save = True
            control.should_training_stop = True
            if result is None:
                return control
        point = {
            "step": step,
            "accuracy": result["accuracy"],
            "well_formed": result.get("well_formed"),
            "correct": result["correct"],
            "total": result["total"],
        }
        keeping = time.perf_counter()
        kept = self.best is not None and self.best.offer(point)
        if kept:
            point["kept_best"] = True  # metrics.jsonl says which evaluation best-adapter/ holds
        # keeping the model counts with the evaluation: the step's step_time leaves both out
        self.seconds += time.perf_counter() - keeping
        point["seconds"] = round(time.perf_counter() - started, 3)
        self.points.append(point)
        if self.say is not None:
            self.say(
                f"evaluation at step {step}: accuracy {point['accuracy']}, well-formed {point['well_formed']} "
                f"({point['correct']}/{point['total']}, {point['seconds']:.1f} s)"
                + (f"; the best so far, kept in {self.best.folder.name}/" if kept else "")
            )
        return control

    def at(self, step: int) -> dict | None:
        """The evaluation made at `step`, if one was."""
        return self.points[-1] if self.points and self.points[-1]["step"] == step else None

    def on_log(self, args, state, control, logs=None, **kwargs):
        # into the step's log, for the trackers (report_to) that read it after this callback: transformers
        # files `eval_*` keys under eval/ (TensorBoard: eval/accuracy)
        point = self.at(state.global_step)
        if point is not None and logs is not None and ("reward" in logs or "loss" in logs):
            logs["eval_accuracy"] = point["accuracy"]
            if point["well_formed"] is not None:
                logs["eval_well_formed"] = point["well_formed"]
        return control


class StopOnSignal(TrainerCallback):
    """After a SIGINT / SIGTERM (trainer.signals.StopFlag), the next step end saves a checkpoint and stops."""

    def __init__(self, flag):
        self.flag = flag

    @property
    def received(self):
        return self.flag.received

    def on_step_end(self, args, state, control, **kwargs):
        if self.received is not None:
            control.should_save = True
            control.should_training_stop = True
        return control


class MarkCheckpointComplete(TrainerCallback):
    """After the trainer has written checkpoint-N, flush it to disk and add the completeness marker
    (contract.attempt): a folder cut short by a kill or a full disk never looks resumable."""

    def on_save(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return control
        from pathlib import Path

        from contract.attempt import CHECKPOINT_PREFIX, mark_checkpoint_complete

        folder = Path(args.output_dir) / f"{CHECKPOINT_PREFIX}{state.global_step}"
        if folder.is_dir():
            mark_checkpoint_complete(folder)
        return control
