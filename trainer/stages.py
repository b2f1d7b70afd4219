"""HOW one attempt trains, stage by stage: load (backend, model, data), build the GRPO trainer, probe the
worst case, train, finish (save, evaluate, summary and report). trainer.run strings them together and
records the outcome.

Each stage imports the heavy libraries inside itself, after `load` has opened the backend: the order is
the one trainer.backends states.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contract import attempt as contract
from contract.attempt import INTERRUPTED, OK
from contract.errors import UsageError
from trainer.state import AttemptState, say
from trainer.summary import build_summary


@dataclass
class Loaded:
    """What the load stage gives the others."""

    backend: Any
    model: Any
    tokenizer: Any
    train_rows: list
    dropped: int
    eval_rows: list
    unsloth_vllm: bool  # Unsloth's own vLLM engine generates (single GPU)
    use_vllm: bool  # generation goes through vLLM at all (Unsloth's, or TRL's under accelerate)
    correctness: Any = None  # the reward that judges an answer correct in evaluation (profile.correctness)
    generation: str = "transformers"  # trainer.backends.generation_path: which engine generated


@dataclass
class Session:
    """The trainer and the callbacks whose records the finish stage reads."""

    trainer: Any
    reward_names: list
    telemetry: Any = None
    progress: Any = None
    evaluation: Any = None  # trainer.callbacks.EvaluateDuringTraining, when the profile evaluates during training
    eval_every: int = 0
    eval_why: str = ""
    budget: Any = None  # trainer.budget.BudgetCallback, under train --hours


def load(state: AttemptState) -> Loaded:
    """The backend, the model and tokenizer, and the training and test rows that fit max_prompt_length."""
    profile = state.profile
    from trainer.backends import load_model, open_backend

    backend = open_backend(profile)  # first: see trainer.backends for the import order
    from tasks import load_task
    from tasks.prompts import filter_by_length
    from trainer.memory_meter import MemoryMeter

    state.memory = MemoryMeter(backend.device)
    train_rows = load_task(profile, "train", limit=profile.train_samples, seed=profile.seed)
    eval_rows = (
        load_task(profile, "test", limit=profile.eval_samples, seed=profile.seed)
        if profile.eval_samples and state.main
        else []
    )
    from rewards import get_reward
    from rewards import user as user_rewards

    if state.main:  # a process ended inside the user's reward is then named (contract.REWARD_RUNNING_FILE)
        user_rewards.attach(state.attempt_dir, say)
    correctness = get_reward(profile.correctness)  # the user's own reward is imported here, in the attempt
    model_path, state.model_built = state.resolve_model(profile)
    if state.main:
        say(
            f"attempt '{profile.name}': {backend.name} on {backend.gpu_name or 'CPU'}, model {profile.model}, "
            f"estimate {'n/a' if state.estimate_gib is None else f'{state.estimate_gib:.2f}'} GiB"
        )
    model, tokenizer = load_model(backend, profile, model_path)

    kept, dropped = filter_by_length(train_rows, tokenizer, profile.max_prompt_length)
    if not kept:
        raise UsageError(
            f"dataset '{profile.dataset}': every prompt is longer than max_prompt_length "
            f"({profile.max_prompt_length} tokens) (fix: raise max_prompt_length)"
        )
    # test prompts obey the same limit: prompt + completion must fit max_seq_length (vLLM's max_model_len)
    eval_rows, eval_dropped = filter_by_length(eval_rows, tokenizer, profile.max_prompt_length)
    if state.main:
        say(
            f"dataset {profile.dataset}: {len(kept)} training prompts ({dropped} dropped as longer than "
            f"max_prompt_length {profile.max_prompt_length}), {len(eval_rows)} test prompts "
            f"({eval_dropped} dropped)"
        )
    # What Unsloth loaded decides, not the profile: it may have turned fast_inference off by itself.
    from trainer.backends import generation_path

    generation = generation_path(profile, backend, model)
    unsloth_vllm, use_vllm = generation == "unsloth-vllm", generation != "transformers"
    if backend.name == "unsloth" and profile.fast_inference and not unsloth_vllm and state.main:
        say(
            "note: no vLLM engine was started (see Unsloth's lines above); completions are generated with "
            "transformers, slower, and the KV cache lives beside training instead of in vLLM's share"
        )
    return Loaded(backend, model, tokenizer, kept, dropped, eval_rows, unsloth_vllm, use_vllm, correctness, generation)


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


def evaluate_rows(
    state: AttemptState, loaded: Loaded, rows: list, lora_path: str | None = None, signals=None, live: bool = False
) -> dict:
    """Accuracy on `rows`: through Unsloth's engine when there is one, else through `generate`. A signal
    (signals.stopped) between two batches raises evaluation.generate.EvaluationStopped. `live`: during
    training, the adapter as it is now (vLLM reads it from the training model)."""
    from evaluation.score import evaluate

    stop = (lambda: signals.stopped) if signals is not None else None
    if live and loaded.unsloth_vllm and state.profile.uses_lora:
        lora_path = str(state.attempt_dir / EVAL_LORA_NAME)
    return evaluate(
        loaded.model,
        loaded.tokenizer,
        rows,
        max_new_tokens=state.profile.max_completion_length,
        use_vllm=loaded.unsloth_vllm,
        lora_path=lora_path,
        reward=loaded.correctness,
        stop=stop,
        live_lora=live,
    )


# transformers' TensorBoardCallback writes where this variable says (read when the trainer is built)
TENSORBOARD_DIR_VARIABLE = "TENSORBOARD_LOGGING_DIR"
# The name Unsloth's vLLM engine knows the live adapter by during training's evaluations (no file is needed)
EVAL_LORA_NAME = ".eval-lora"


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
    reward_names = [f.__name__ for f in reward_funcs]
    args = build_grpo_config(
        profile,
        str(state.attempt_dir),
        device=loaded.backend.device,
        bf16=loaded.backend.bf16,
        use_vllm=loaded.use_vllm,
    )
    session = Session(trainer=None, reward_names=reward_names)
    callbacks = [StopOnSignal(signals), MarkCheckpointComplete()]
    if state.main:
        correctness = getattr(loaded.correctness, "__name__", None)
        signal = GroupSignal(dict(zip(reward_names, weights)), profile.num_generations, correctness)
        reward_funcs = [signal.wrap(name, fn) for name, fn in zip(reward_names, reward_funcs)]
        session.progress = Progress(profile.name, profile.max_steps, loaded.backend.device)
        session.telemetry = TelemetryCallback(
            state.attempt_dir / contract.METRICS_FILE, reward_names, state.memory, session.progress, signal
        )
        callbacks.insert(0, session.telemetry)
    from trainer.config import eval_interval

    session.eval_every, session.eval_why = eval_interval(profile)
    if session.eval_every and state.main and loaded.eval_rows:
        from trainer.callbacks import EvaluateDuringTraining

        session.evaluation = EvaluateDuringTraining(
            session.eval_every,
            lambda: evaluate_rows(state, loaded, loaded.eval_rows, signals=signals, live=True),
            signals,
            say,
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
    )
    session.trainer.remove_callback(PrinterCallback)  # our progress line replaces its raw dict per step
    handler = session.trainer.callback_handler
    for tracker in [c for c in handler.callbacks if type(c).__module__.endswith("integration_utils")]:
        handler.callbacks.remove(tracker)  # after ours: the evaluation adds its figures to the step's log first
        handler.callbacks.append(tracker)
    state.trainer = session.trainer
    return session


def probe(state: AttemptState, loaded: Loaded, asked: bool = False) -> dict | None:
    """One step at the largest shapes the attempt will see (trainer.probe), before training starts or
    resumes; its figures, or None when the profile turns it off (unless `asked`: --calibrate) or accelerate
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
    figures = run_probe(state.trainer, loaded.train_rows, loaded.tokenizer, profile, state.memory, state.estimate_gib)
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
        model.save_pretrained(str(adapter_dir))
        tokenizer.save_pretrained(str(adapter_dir))
    signals.phase = "finishing"
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
    from trainer.config import PROFILE_LOSS_KEYS

    # what the trainer itself holds (TRL's GRPOConfig, or Unsloth's patched one): the objective trained
    summary["loss_settings"] = {key: getattr(session.trainer.args, key, None) for key in PROFILE_LOSS_KEYS}
    summary["loss_settings"]["trainer"] = type(session.trainer).__name__
    from trainer.publish import push
    from trainer.report import evaluation_figures, write_plots, write_report

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
    )
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
    write_report(attempt_dir, summary)
    trained = (
        f"reward {summary['rewards']['total']['first']} -> {summary['rewards']['total']['last']}"
        if rows
        else "no step trained in this attempt"
    )
    say(
        f"attempt '{profile.name}' done: {summary['steps']} steps in {train_seconds:.1f} s, {trained}, accuracy "
        f"{before['accuracy']} -> {after['accuracy']}, peak "
        f"{summary['memory']['peak_gib']:.2f} GiB ({summary['memory']['measure']}); report: "
        f"{attempt_dir / 'report.md'}"
    )
    return OK
