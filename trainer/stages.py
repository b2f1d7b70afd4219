"""HOW one attempt trains, stage by stage: load (backend, model, data, tools: trainer.load), build the GRPO
trainer, probe the worst case, train, finish (save, evaluate, summary and report). trainer.run strings them
together and records the outcome.

Each stage imports the heavy libraries inside itself, after `load` has opened the backend: the order is
the one trainer.backends states.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contract import attempt as contract
from contract.attempt import INTERRUPTED, OK
from trainer.load import Loaded, load, offered_tools  # noqa: F401 - load re-exported: the first stage
from trainer.state import AttemptState, say
from trainer.summary import build_summary

if TYPE_CHECKING:  # they import transformers, which each stage imports in its turn
    from trainer.best_model import BestKeeper
    from trainer.budget import BudgetCallback
    from trainer.callbacks import EvaluateDuringTraining


@dataclass
class Session:
    """The trainer and the callbacks whose records the finish stage reads."""

    trainer: Any
    reward_names: list
    telemetry: Any = None
    progress: Any = None
    evaluation: EvaluateDuringTraining | None = None  # when the profile evaluates during training
    eval_every: int = 0
    eval_why: str = ""
    budget: BudgetCallback | None = None  # under train --hours
    best: BestKeeper | None = None  # the best evaluation so far and best-adapter/ (the main process)


def evaluate_rows(
    state: AttemptState, loaded: Loaded, rows: list, lora_path: str | None = None, signals=None, live: bool = False
) -> dict:
    """Accuracy on `rows`: through Unsloth's engine when there is one, else through `generate`. A signal
    (signals.stopped) between two batches raises evaluation.generate.EvaluationStopped. `live`: during
    training, the adapter as it is now (vLLM reads it from the training model)."""
    from evaluation.generate import Greedy
    from evaluation.score import evaluate

    stop = (lambda: signals.stopped) if signals is not None else None
    if live and loaded.unsloth_vllm and state.profile.uses_lora:
        lora_path = str(state.attempt_dir / EVAL_LORA_NAME)
    greedy = Greedy(
        state.profile.max_completion_length,
        use_vllm=loaded.unsloth_vllm,
        lora_path=lora_path,
        stop=stop,
        live_lora=live,
        switches=loaded.switches,
    )
    return evaluate(
        loaded.model,
        loaded.tokenizer,
        rows,
        greedy,
        reward=loaded.correctness,
        tools=loaded.tools,
        environment=loaded.environment,
        max_tool_calls=state.profile.max_tool_calls,
    )


# transformers' TensorBoardCallback writes where this variable says (read when the trainer is built)
TENSORBOARD_DIR_VARIABLE = "TENSORBOARD_LOGGING_DIR"
# The name Unsloth's vLLM engine knows the live adapter by during training's evaluations (no file is needed)
EVAL_LORA_NAME = ".eval-lora"


def save_model(loaded: Loaded, folder: Path) -> None:
    """The model as it is now (the LoRA adapter, or the whole model at lora_rank 0) and the tokenizer, in
    `folder`: adapter/ at the end, best-adapter/ during training. Rank 0 alone, with no collective call: during
    training only where rank 0 holds every weight (never under ZeRO-3, which evaluates nothing during it)."""
    loaded.model.save_pretrained(str(folder))
    loaded.tokenizer.save_pretrained(str(folder))


def nothing_left_to_train(state: AttemptState) -> bool:
    """The checkpoint resumed from already holds max_steps (a run stopped during its final evaluation or
    report): training would only add steps past max_steps. Single-process attempts only: under accelerate the
    weights load into the wrapped (and, with ZeRO, sharded) model inside train() itself."""
    return (
        bool(state.resume_from)
        and not state.profile.distributed
        and contract.checkpoint_step(state.resume_from) >= state.profile.max_steps
    )


def load_trained_checkpoint(state: AttemptState, session: Session) -> None:
    """Put the resumed checkpoint's weights in the model without a training step (what train() would load
    before its first step), for an attempt with nothing left to train."""
    session.trainer._load_from_checkpoint(state.resume_from)
    state.measures_peak = False
    if state.memory is not None:
        state.memory.sample()  # for the report; the outcome leaves the peak out (measures_peak)
    say(
        f"{Path(state.resume_from).name} already holds max_steps ({state.profile.max_steps}): nothing left to "
        "train; saving, evaluating and reporting it"
    )


def build_trainer(state: AttemptState, loaded: Loaded, signals) -> Session:
    """TRL's GRPOTrainer with the profile's rewards, settings and our callbacks."""
    profile = state.profile
    from datasets import Dataset
    from transformers import PrinterCallback
    from trl import GRPOTrainer

    from rewards import get_reward_funcs
    from trainer.callbacks import MarkCheckpointComplete, StopOnSignal, TelemetryCallback
    from trainer.config import build_grpo_config
    from trainer.group_signal import GroupSignal
    from trainer.inject import make_injector
    from trainer.progress import Progress

    reward_funcs, weights = get_reward_funcs(profile.rewards)  # the weights go in through the config
    from rewards.user import check_columns

    for reward in reward_funcs:  # a parameter no column gives: said now, not as TRL's TypeError at the first step
        check_columns(reward, loaded.train_rows[0] if loaded.train_rows else ())
    reward_names = [f.__name__ for f in reward_funcs]
    args = build_grpo_config(
        profile,
        str(state.attempt_dir),
        device=loaded.backend.device,
        bf16=loaded.backend.bf16,
        use_vllm=loaded.use_vllm,
        switches=loaded.switches,
    )
    session = Session(trainer=None, reward_names=reward_names)
    callbacks = [StopOnSignal(signals), MarkCheckpointComplete()]
    if state.main:
        correctness = getattr(loaded.correctness, "__name__", None)
        signal = GroupSignal(dict(zip(reward_names, weights)), profile.num_generations, correctness)
        reward_funcs = [signal.wrap(name, fn) for name, fn in zip(reward_names, reward_funcs)]
        from trainer.answer_lengths import LengthRecorder

        state.length_recorder = LengthRecorder()  # the answers' lengths, from the first reward's calls
        reward_funcs[0] = state.length_recorder.wrap(reward_funcs[0])
        session.progress = Progress(profile.name, profile.max_steps, loaded.backend.device)
        session.telemetry = TelemetryCallback(
            state.attempt_dir / contract.METRICS_FILE,
            reward_names,
            state.memory,
            session.progress,
            signal,
            lengths=state.length_recorder,
            cap=profile.max_completion_length,
            masks_cut=bool(profile.mask_truncated_completions),
        )
        callbacks.insert(0, session.telemetry)
    from profiles.evaluation_steps import eval_interval

    session.eval_every, session.eval_why = eval_interval(profile)
    if state.main:
        from trainer.best_model import BestKeeper

        session.best = BestKeeper(state.attempt_dir, lambda folder: save_model(loaded, folder), say)
    if session.eval_every and state.main and loaded.eval_rows:
        from trainer.callbacks import EvaluateDuringTraining

        session.evaluation = EvaluateDuringTraining(
            session.eval_every,
            lambda: evaluate_rows(state, loaded, loaded.eval_rows, signals=signals, live=True),
            signals,
            say,
            best=session.best,
        )
        session.telemetry.evaluation = session.evaluation
        callbacks.append(session.evaluation)
        say(f"evaluation during training: {len(loaded.eval_rows)} test prompts, {session.eval_why}")
    elif state.main:
        say(f"evaluation during training: off ({session.eval_why if not session.eval_every else 'no test rows'})")
    injector = make_injector(profile, state.estimate_gib)
    if injector is not None:
        callbacks.append(injector)
    budget = contract.run_budget_from_env()
    if budget is not None:  # train --hours: stop at the run's budget with a checkpoint
        from trainer.budget import BudgetCallback

        warn = session.progress.warn if session.progress is not None else (lambda text: None)
        session.budget = BudgetCallback(budget[0], budget[1], finish_s=state.eval_seconds or 0.0, say=warn)
        callbacks.append(session.budget)
    if profile.report_to in ("tensorboard", "all"):
        # event files in the attempt folder, where `tensorboard --logdir outputs` finds every run
        os.environ[TENSORBOARD_DIR_VARIABLE] = str(state.attempt_dir / contract.TENSORBOARD_DIR)
    session.trainer = GRPOTrainer(
        model=loaded.model,
        reward_funcs=reward_funcs,
        args=args,
        train_dataset=Dataset.from_list(loaded.train_rows),
        processing_class=loaded.tokenizer,
        callbacks=callbacks,
        **trainer_tool_kwargs(loaded),
    )
    session.trainer.remove_callback(PrinterCallback)  # our progress line replaces its raw dict per step
    handler = session.trainer.callback_handler
    for tracker in [c for c in handler.callbacks if type(c).__module__.endswith("integration_utils")]:
        handler.callbacks.remove(tracker)  # after ours: the evaluation adds its figures to the step's log first
        handler.callbacks.append(tracker)
    state.trainer = session.trainer
    return session


TOOL_FIGURES = (
    "tool_calls_per_answer",
    "answers_with_tool",
    "tool_success",
    "tool_calls",
    "model_turns_per_answer",
    "model_tokens_per_answer",
    "reply_tokens_per_call",
)


def tool_summary(state: AttemptState, loaded: Loaded, before: dict, after: dict) -> dict | None:
    """summary.json's `tools`: what was offered, the held-out answers' use of it before and after training,
    and the guard's count of every call of the run (tools.guard.RECORD)."""
    if not loaded.tools and loaded.environment is None:
        return None
    from tools.guard import RECORD

    offered = [t.__name__ for t in loaded.tools or []]
    if loaded.environment is not None:
        offered.append(f"environment {loaded.environment.__name__}")
    return {
        "offered": offered,
        "max_tool_calls": state.profile.max_tool_calls,
        "before": {key: before.get(key) for key in TOOL_FIGURES},
        "after": {key: after.get(key) for key in TOOL_FIGURES},
        "guard": RECORD.to_json(),
    }


def trainer_tool_kwargs(loaded: Loaded) -> dict:
    """GRPOTrainer's tools and environment_factory, when the profile has them (TRL runs the turns itself)."""
    kwargs: dict[str, Any] = {}
    if loaded.tools:
        kwargs["tools"] = list(loaded.tools)
    if loaded.environment is not None:
        kwargs["environment_factory"] = loaded.environment
    return kwargs


def probe(state: AttemptState, loaded: Loaded, asked: bool = False) -> dict | None:
    """One step at the largest shapes the attempt will see (trainer.probe), before training starts or
    resumes; its figures, or None when the profile turns it off (unless `asked`: `calibrate`) or accelerate
    runs the processes (the model is wrapped, and ZeRO shards it, only inside train())."""
    profile = state.profile
    from trainer.probe import probe_enabled, run_probe

    if not asked and not probe_enabled(profile):
        if state.main:
            say("probe: skipped (profile key probe is false)")
        return None
    if profile.distributed:
        if state.main:
            say("probe: skipped under accelerate (the model is wrapped and sharded only inside training)")
        return None
    offered = offered_tools(loaded.tools or [], loaded.environment)
    figures = run_probe(
        state.trainer,
        loaded.train_rows,
        loaded.tokenizer,
        profile,
        state.memory,
        state.estimate_gib,
        tools=offered or None,
    )
    state.probe = figures
    if state.main:
        say(
            f"probe: {figures['batch']} x ({figures['prompt_tokens']} prompt + {figures['completion_tokens']} "
            f"completion) tokens, peak {figures['peak_gib']:.2f} GiB ({figures['measure']}) in "
            f"{figures['seconds']:.2f} s"
        )
    return figures


def train(state: AttemptState, session: Session) -> float:
    """Run (or resume) training; the seconds it took."""
    started = time.time()
    try:
        session.trainer.train(resume_from_checkpoint=state.resume_from)
        if session.budget is not None and session.budget.stopped:
            state.stopped_by = contract.STOPPED_BY_BUDGET
    finally:
        if session.progress is not None:
            session.progress.close()
        if session.telemetry is not None:
            session.telemetry.close()
    return time.time() - started


def finish(state: AttemptState, loaded: Loaded, session: Session, before: dict, train_seconds: float, signals) -> str:
    """Save the adapter (every rank takes part where ZeRO holds pieces of it), then, on rank 0, evaluate
    the trained model and write the summary, plots and report."""
    profile, attempt_dir, model, tokenizer = state.profile, state.attempt_dir, loaded.model, loaded.tokenizer
    adapter_dir = attempt_dir / contract.ADAPTER_DIR
    if profile.distributed:
        session.trainer.save_model(str(adapter_dir))  # ZeRO gathers the weights; the main process writes
    elif state.main:
        save_model(loaded, adapter_dir)
    signals.phase = "finishing"
    state.phase_done("adapter")
    if signals.stopped:
        return INTERRUPTED
    if not state.main:
        return OK
    if profile.save_merged and loaded.backend.device == "cuda" and hasattr(model, "save_pretrained_merged"):
        model.save_pretrained_merged(str(attempt_dir / "merged"), tokenizer, save_method="merged_16bit")
    elif profile.save_merged:
        say(
            f"note: save_merged is set, but {loaded.backend.name} has no merged save here: only the adapter is saved "
            "(merge it with peft's merge_and_unload)"
        )

    eval_rows = loaded.eval_rows
    if profile.zero_stage == 3 and eval_rows:
        # ZeRO-3 keeps each weight in pieces across the ranks: generating alone would wait on them forever
        say("note: no evaluation after training under ZeRO-3 (the weights are partitioned across the ranks)")
        eval_rows = []
    from evaluation.generate import EvaluationStopped

    try:
        after = evaluate_rows(
            state, loaded, eval_rows, lora_path=str(adapter_dir) if profile.uses_lora else None, signals=signals
        )
    except EvaluationStopped:
        return INTERRUPTED
    state.phase_done("evaluation_after")
    if signals.stopped:  # during the last batch: what was promised is a stop without the report
        return INTERRUPTED
    signals.phase = "reporting"
    rows = session.telemetry.rows
    summary = build_summary(
        state,
        loaded.backend,
        rows,
        session.reward_names,
        before,
        after,
        train_seconds,
        len(loaded.train_rows),
        loaded.dropped,
        OK,
    )
    summary["generation"] = loaded.generation
    summary["tools"] = tool_summary(state, loaded, before, after)
    from trainer.answer_lengths import completion_lengths

    summary["completion_lengths"] = completion_lengths(state, state.length_recorder, rows)
    from trainer.config import PROFILE_LOSS_KEYS

    # what the trainer itself holds (TRL's GRPOConfig, or Unsloth's patched one): the objective trained
    summary["loss_settings"] = {key: getattr(session.trainer.args, key, None) for key in PROFILE_LOSS_KEYS}
    summary["loss_settings"]["trainer"] = type(session.trainer).__name__
    from trainer.plots import write_plots
    from trainer.publish import push
    from trainer.report import evaluation_figures, write_report

    during = session.evaluation
    summary["evaluation"] = evaluation_figures(
        before,
        during.points if during else [],
        after,
        state.steps,
        session.eval_every,
        session.eval_why,
        during.seconds if during else 0.0,
        train_seconds,
        attempt_dir,
        kept=session.best.kept if session.best is not None else None,
    )
    if session.best is not None:
        session.best.settle(summary["evaluation"]["best"])
    summary["hub"] = push(profile, attempt_dir, say)
    summary["plots"] = write_plots(
        attempt_dir,
        rows,
        session.reward_names,
        loaded.backend.device,
        state.estimate_gib,
        profile.name,
        summary["evaluation"]["points"],
    )
    state.phase_done("report")
    summary["phases"] = dict(state.phases)
    write_report(attempt_dir, summary)
    trained = (
        f"reward {summary['rewards']['total']['first']} -> {summary['rewards']['total']['last']}"
        if rows
        else "no step trained in this attempt"
    )
    best = summary["evaluation"]["best"] or {}
    elsewhere = best.get("saved_in") not in (None, contract.ADAPTER_DIR)
    kept = f" (best {best['accuracy']} at step {best['step']}, in {best['saved_in']}/)" if elsewhere else ""
    say(
        f"attempt '{profile.name}' done: {summary['steps']} steps in {train_seconds:.1f} s, {trained}, accuracy "
        f"{before['accuracy']} -> {after['accuracy']}{kept}, peak "
        f"{summary['memory']['peak_gib']:.2f} GiB ({summary['memory']['measure']}); report: "
        f"{attempt_dir / 'report.md'}"
    )
    return OK
