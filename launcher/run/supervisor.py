"""HOW one run's attempts follow each other: the supervisor's loop. Each attempt runs in a fresh child process
(launcher.run.child); the loop reads what it ended as and appends its line to the run's attempts.jsonl
(launcher.run.attempts), and decides (launcher.run.fallback):

  ok            done (exit 0)
  oom           shrink what the OOM site names, once per profile, keeping the effective batch; otherwise the
                next profile on the ladder that the estimate says fits and that is estimated below every
                attempt that ran out of memory; nothing left: exit 3 with the table of attempts
  unsupported   the next profile (an architecture the stack cannot load says nothing about memory)
  error         stop (exit 1): a bug or bad data would fail the same way on every profile
  node          stop (exit 1): a machine of a multi-node run was lost; `train --resume` on every machine continues
  interrupted   stop (exit 130); `train --resume` continues from the last checkpoint
  replanned     the length probe found the answers cut at the cap before any step: the cap (and the memory
                and time that follow from it) is planned again from what was measured, and the next attempt
                runs it, or the next configuration that fits; at most MAX_LENGTH_REPLANS times a run

An attempt with the same model and LoRA shape as an earlier one continues from its last checkpoint
(`--resume-from`), so the global step goes on; otherwise it starts fresh. Nothing is deleted: a checkpoint
that cannot be resumed from (cut short, damaged) is named, with why, and renamed checkpoint-N.damaged. A
server-mode attempt's vLLM server (launcher.run.vllm_server) is started and health-checked before it and
stopped after it; on several machines each decision goes to the others (launcher.run.machines).
"""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path

from rich.markup import escape

from contract import failure
from contract import oom as oomlib
from contract.attempt import (
    ERROR,
    INTERRUPTED,
    LOG_FILE,
    NODE,
    OK,
    OOM,
    PROFILE_FILE,
    REPLANNED,
    SERVER_LOG,
    STOPPED_BY_BUDGET,
    checkpoint_step,
    latest_checkpoint,
    relative_path,
    resolve_path,
)
from contract.environment import ENV_ALLOC_CONF, ENV_INJECT_OOM
from contract.errors import EXIT_BAD_INPUT, EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK, EXIT_OUT_OF_MEMORY
from contract.safe_write import write_atomic
from contract.shell import command_line
from launcher.card.topology import server_node, topology
from launcher.memory.ledger import record as ledger_record
from launcher.run import machines as machineslib
from launcher.run import narrate
from launcher.run.attempts import AttemptRecord, AttemptResult, read_attempts, read_result, server_failure_result
from launcher.run.child import ChildRunner, attempt_command
from launcher.run.environment import attempt_env
from launcher.run.fallback import Decision, decide, estimate_of, estimate_profile
from launcher.run.folder import point_final, set_aside
from launcher.run.request import RunRequest
from launcher.run.vllm_server import SERVER_STATE, ServerError, ServerWatch, start_server
from profiles.rules import remote_code_notice
from profiles.schema import Profile, shape_of

# Times a run re-plans the cap after a length probe found its answers cut; then it trains with what it has
MAX_LENGTH_REPLANS = 2


def written_keys(path: str | Path) -> frozenset[str]:
    """The keys a profile file writes (a value, not `auto` or empty), in the project's names: `--profile FILE`
    runs the file as written, so these are pinned as --set keys are."""
    from profiles.load import read_profile_data
    from profiles.schema import AUTO

    data = read_profile_data(Path(path))
    return frozenset(
        str(key)
        for key, value in data.items()
        if value is not None and not (isinstance(value, str) and value.strip().lower() == AUTO)
    )


def pins_of_run(run_dir: Path) -> frozenset[str]:
    """The pinned keys a run's plan.json holds (written when the run started): none for a new run."""
    import json

    from contract.attempt import PLAN_FILE

    try:
        pins = json.loads((Path(run_dir) / PLAN_FILE).read_text(encoding="utf-8")).get("pinned")
    except (OSError, ValueError, AttributeError):
        return frozenset()
    return frozenset(k for k in pins if isinstance(k, str)) if isinstance(pins, list) else frozenset()


def cap_may_grow(profile: Profile, pinned) -> bool:
    """Whether a re-plan may raise this profile's completion cap: the cap is not pinned, nor a pinned
    max_seq_length already full with the prompt and the cap."""
    if "max_completion_length" in pinned:
        return False
    room = profile.max_seq_length - profile.max_prompt_length
    return "max_seq_length" not in pinned or room > profile.max_completion_length


class Supervisor:
    """One run folder's attempts: what was tried, shrunk and checkpointed, and the next attempt."""

    def __init__(
        self,
        plan,
        run_dir: Path,
        console,
        runner: ChildRunner,
        request: RunRequest,
        server_command: list[str] | None = None,
        machines: machineslib.Coordinator | None = None,
        clock=time.time,
    ):
        self.plan = plan
        # train --hours: the run's deadline and length, from when this supervisor started (a resumed run gets
        # the budget given when it resumes)
        hours = request.hours
        self.budget = (clock() + hours * 3600.0, hours * 3600.0) if hours else None
        self.machines = machines  # several machines: where this supervisor's decisions go for the others
        self.server_command = server_command  # stands in for `trl vllm-serve` in tests
        self.run_dir = run_dir
        self.console = console
        self.runner = runner
        from profiles.load import parse_overrides

        # the keys the user set (--set) or wrote (the --profile file, `request.pinned`): never re-planned; a
        # resumed run keeps those its plan.json holds
        self.pinned = frozenset(parse_overrides(list(request.overrides))) | request.pinned | pins_of_run(run_dir)
        self.records = [AttemptRecord.from_dict(data) for data in read_attempts(run_dir)]
        self.shrunk: set[str] = {r.profile for r in self.records if r.shrink}
        self.tried: set[str] = {r.profile for r in self.records}
        self.ceiling: tuple[float, str] | None = None
        # (shape, attempt folder) per attempt, in order: where a later attempt of the same shape resumes
        self.attempt_shapes: list[tuple[tuple, Path | None]] = []
        self.resume_floor = 0  # attempts before this index are not resumed from (--fresh-attempt)
        for record in self.records:
            self._remember(record)

    # -- bookkeeping ----------------------------------------------------------------------------------
    def _remember(self, record: AttemptRecord) -> None:
        """Count a finished attempt: tried, shrunk, its folder, and the OOM ceiling it sets."""
        self.tried.add(record.profile)
        if record.shrink:
            self.shrunk.add(record.profile)
        self.attempt_shapes.append((shape_of(record.settings or {}), self.path_of(record.attempt_dir)))
        oom_kind = (record.oom or {}).get("kind")
        est = record.estimate_gib
        if record.status == OOM and est is not None and oom_kind != oomlib.KIND_HOST:
            if self.ceiling is None or est < self.ceiling[0]:
                self.ceiling = (float(est), record.profile)

    def path_of(self, value: str | None) -> Path | None:
        """A path of attempts.jsonl (relative to the run folder; absolute in older runs) on this disk."""
        return resolve_path(value, self.run_dir)

    def in_run(self, path: str | Path | None) -> str | None:
        """A path as attempts.jsonl holds it: relative to the run folder, which may be moved."""
        return relative_path(path, self.run_dir)

    def next_number(self) -> int:
        numbers = [int(r.attempt or 0) for r in self.records]
        for path in self.run_dir.glob("attempt-*"):
            try:
                numbers.append(int(path.name.split("-")[1]))
            except (IndexError, ValueError):
                pass
        return max(numbers, default=0) + 1

    def resume_point(self, profile: Profile) -> Path | None:
        """The newest checkpoint that can be resumed from, of an earlier attempt with the same model and LoRA
        shape. Newer ones that cannot (cut short, damaged) are named, with why, and set aside."""
        shape = shape_of(profile)
        for earlier_shape, attempt_dir in reversed(self.attempt_shapes[self.resume_floor :]):
            if earlier_shape == shape and attempt_dir is not None and attempt_dir.is_dir():
                found = self.valid_checkpoint(attempt_dir)
                if found is not None:
                    return found
        return None

    def valid_checkpoint(self, attempt_dir: Path) -> Path | None:
        """latest_checkpoint of one attempt folder, telling the user which newer ones it passed over and
        renaming those to checkpoint-N.damaged (kept, never picked again)."""
        skipped: list[str] = []
        found = latest_checkpoint(attempt_dir, skipped)
        for line in skipped:
            name, _, reason = line.partition(": ")
            moved = set_aside(attempt_dir / name)
            kept = f"renamed to {moved.name}" if moved is not None else "left in place"
            instead = f"{self.in_run(found)} (step {checkpoint_step(found)})" if found else "an earlier attempt"
            self.console.print(
                f"passing over {attempt_dir.name}/{name}: {reason}; {kept}; resuming from {instead} instead",
                markup=False,
                highlight=False,
            )
        return found

    def _estimate_for(self, profile: Profile) -> float | None:
        """The estimate the plan judged this profile by (a shrunk profile's is estimated afresh)."""
        for cand in self.plan.candidates:
            if cand.profile == profile:
                return estimate_of(cand)
        est = estimate_profile(profile, self.plan.machine)
        return float(est.total_gib) if est is not None else None

    def _expected_for(self, profile: Profile) -> int | None:
        """The tokens the plan expects a completion of this profile to run: its own expected_completion_length,
        else this machine's measurement of its answers (the ledger), else the task's estimate."""
        if profile.expected_completion_length:
            return profile.expected_completion_length
        try:
            from launcher.memory.ledger.store import read as read_ledger
            from launcher.plan.completion_lengths import expected_length
            from profiles.catalog import resolve

            return expected_length(profile, resolve(profile.model), read_ledger(warn=lambda text: None))
        except Exception:  # an expected length informs the attempt's probe; it never stops a run
            return None

    def _replans_left(self) -> bool:
        """Whether an attempt whose answers are cut may still stop for a re-plan (MAX_LENGTH_REPLANS a run)."""
        return sum(1 for r in self.records if r.status == REPLANNED) < MAX_LENGTH_REPLANS

    def _predicted_for(self, profile: Profile) -> float | None:
        """The seconds per step the plan predicted for this profile (a shrunk profile's predicted afresh)."""
        for cand in self.plan.candidates:
            if cand.profile == profile and getattr(cand, "speed", None) is not None:
                return float(cand.speed.step_s)
        gpu = self.plan.machine.primary
        if profile.device != "cuda" or gpu is None:
            return None
        try:
            from launcher.plan.speed import predict
            from profiles.catalog import resolve

            return float(
                predict(profile, resolve(profile.model), gpu, estimate_profile(profile, self.plan.machine)).step_s
            )
        except Exception:  # a prediction informs the record; it never stops a run
            return None

    # -- one attempt, step by step --------------------------------------------------------------------
    def attempt(
        self, profile: Profile, changes: dict | None, decision_text: str | None, replanned: dict | None = None
    ) -> AttemptRecord:
        number = self.next_number()
        resume_from = self.resume_point(profile)
        if resume_from is None and self._has_checkpoints(profile):
            self.console.print("no complete checkpoint of this shape is left: starting at step 1", markup=False)
        attempt_dir = self._open_attempt_dir(number, profile)
        estimate_gib = self._estimate_for(profile)
        predicted = self._predicted_for(profile)
        notice = remote_code_notice(profile)
        if notice and profile.model not in self.runner.remote_code_said:  # once, before the first load runs it
            self.runner.remote_code_said.add(profile.model)
            self.console.print(f"note: {notice}", markup=False, soft_wrap=True)
        if self.machines is not None:  # the other machines start the same attempt from here
            self.machines.decide(
                number, self.in_run(attempt_dir), profile.name, self.in_run(resume_from), decision_text, estimate_gib
            )
        narrate.print_start(self.console, number, profile, estimate_gib, self.in_run(resume_from))
        started = time.time()
        env = self._environment(
            profile,
            estimate_gib,
            predicted,
            expected_tokens=self._expected_for(profile),
            replan_lengths=self._replans_left() and cap_may_grow(profile, self.pinned),
            budget=self.budget,
        )
        result = self._run(profile, attempt_dir, str(resume_from) if resume_from else None, env, started)
        record = AttemptRecord(
            attempt=number,
            profile=profile.name,
            status=result.status,
            steps=result.steps,
            started=datetime.fromtimestamp(started).isoformat(timespec="seconds"),
            duration_s=result.duration_s,
            exit_code=result.exit_code,
            attempt_dir=self.in_run(attempt_dir),
            resumed_from=self.in_run(resume_from),
            checkpoint=self.in_run(result.checkpoint),
            shrink=changes or None,
            replanned=replanned or None,
            estimate_gib=estimate_gib,
            peak_gib=result.peak_gib,
            probe=result.probe,
            predicted_step_s=predicted,
            step_s=(result.timing or {}).get("step_s"),
            timing=result.timing,
            lengths=result.lengths,
            stopped_by=result.stopped_by,
            oom=result.report.to_dict() if result.report else None,
            error=result.error,
            decided=decision_text,
            settings=profile.to_dict(),
            env={ENV_ALLOC_CONF: env.get(ENV_ALLOC_CONF), ENV_INJECT_OOM: env.get(ENV_INJECT_OOM)},
        )
        self.records.append(record)
        self._remember(record)
        record.append_to(self.run_dir)
        ledger_record.record_attempt(
            profile, self.plan, record, attempt_dir, warn=lambda text: self.console.print(text, markup=False)
        )
        narrate.print_result(self.console, number, profile, result)
        return record

    def _has_checkpoints(self, profile: Profile) -> bool:
        """Whether an earlier attempt of this shape left checkpoint folders (damaged ones included)."""
        shape = shape_of(profile)
        return any(
            earlier == shape and folder is not None and any(folder.glob("checkpoint-*"))
            for earlier, folder in self.attempt_shapes[self.resume_floor :]
        )

    def _open_attempt_dir(self, number: int, profile: Profile) -> Path:
        """DIR/attempt-NN-<profile>/ holding the profile as it runs (the child reads it from there)."""
        attempt_dir = self.run_dir / f"attempt-{number:02d}-{profile.name}"
        attempt_dir.mkdir(parents=True, exist_ok=False)
        write_atomic(attempt_dir / PROFILE_FILE, profile.to_yaml())
        return attempt_dir

    @staticmethod
    def _environment(
        profile: Profile,
        estimate_gib: float | None,
        predicted_step_s: float | None = None,
        expected_tokens: int | None = None,
        replan_lengths: bool = False,
        budget=None,
    ) -> dict:
        return attempt_env(
            profile,
            estimate_gib,
            predicted_step_s=predicted_step_s,
            expected_tokens=expected_tokens,
            replan_lengths=replan_lengths,
            budget=budget,
        )

    def _run(
        self, profile: Profile, attempt_dir: Path, resume_from: str | None, env: dict, started: float
    ) -> AttemptResult:
        """The attempt's vLLM server (server mode) and its process, to their end; what came of them."""
        argv = attempt_command(profile, attempt_dir, resume_from, self.runner.override, env=env)
        server = None
        try:
            try:
                server = self._start_server(profile, attempt_dir, env)
            except ServerError as exc:
                return server_failure_result(str(exc), resume_from, time.time() - started, bool(self.runner.signals))
            kills_before = failure.oom_kill_count()
            watch = None
            if profile.uses_vllm_server and profile.device == "cuda" and server_node(env) is not None:
                # the server on its own node: when it fails to start, stop this attempt instead of letting
                # the trainers wait out TRL's connection timeout
                watch = ServerWatch(attempt_dir / SERVER_STATE, self.runner).start()
            try:
                returncode, tail = self.runner.run_argv(argv, attempt_dir, env)
            finally:
                if watch is not None:
                    watch.stop()
            if watch is not None and watch.failure:
                return server_failure_result(
                    watch.failure, resume_from, time.time() - started, bool(self.runner.signals)
                )
            kernel_oom = (
                failure.killed_by_kernel_oom(self.runner.last_pid, kills_before)
                if returncode in oomlib.SIGKILL_CODES
                else None
            )
            return read_result(
                attempt_dir, returncode, tail, time.time() - started, bool(self.runner.signals), kernel_oom=kernel_oom
            )
        finally:
            if server is not None:
                server.stop()

    def _start_server(self, profile: Profile, attempt_dir: Path, env: dict):
        """The attempt's vLLM server, up and healthy (None without server mode); ServerError otherwise."""
        if (
            not profile.uses_vllm_server
            or profile.device != "cuda"
            or topology(env).machine_rank
            or server_node(env) is not None
        ):
            return None  # only machine 0 of a run serves, unless the server has a node of its own
        self.console.print(
            f"starting the vLLM server for {profile.name} (log: {attempt_dir / SERVER_LOG})", markup=False
        )
        self.runner.waiting_for_server = True
        try:
            server = start_server(profile, attempt_dir, env=env, command=self.server_command)
        except KeyboardInterrupt as exc:  # start_server has stopped the server already
            raise ServerError(f"stopped by {exc or 'a signal'} while the vLLM server was starting") from exc
        finally:
            self.runner.waiting_for_server = False
        if server is not None:
            self.console.print(f"vLLM server ready at {server.url}", markup=False)
        return server

    # -- the loop -------------------------------------------------------------------------------------
    def run(self, profile: Profile, changes: dict | None = None, decision_text: str | None = None) -> int:
        replanned = None
        while True:
            if self.runner.signals:
                self.console.print("interrupted before the next attempt started")
                return EXIT_INTERRUPTED
            record = self.attempt(profile, changes, decision_text, replanned)
            code = self._stop_code(record)
            if code is not None:
                return code
            decision = self.decide_after(profile, record.status, record.report, record.lengths)
            for line in decision.skipped:
                self.console.print(f"  {line}")
            failed = record.report.summary() if record.report else record.status
            self.console.print(
                f"attempt {record.attempt}: {profile.name} {failed}: {decision.text}", highlight=False, markup=False
            )
            if decision.action == "stop":
                return EXIT_OUT_OF_MEMORY
            assert decision.profile is not None  # every decision but "stop" names the profile to run
            profile, decision_text = decision.profile, decision.text
            changes, replanned = (None, decision.changes) if decision.action == "replan" else (decision.changes, None)
            changes = changes or None

    def _stop_code(self, record: AttemptRecord) -> int | None:
        """The run's exit status when this attempt ends it (ok, interrupted, an error); None to fall back."""
        attempt_dir = self.path_of(record.attempt_dir) or self.run_dir
        if record.status == OK:
            if record.stopped_by == STOPPED_BY_BUDGET:
                self.console.print(
                    f"stopped at the run's time budget after {record.steps} steps (--hours); "
                    f"`python train.py train --resume --hours H` goes on from {record.checkpoint or 'its checkpoint'}",
                    markup=False,
                    highlight=False,
                )
            self.console.print(f"[green]done[/green]: {escape(str(attempt_dir))}")
            self._say_problem(point_final(self.run_dir, attempt_dir))  # RUN_DIR/final: the run's adapter
            return EXIT_OK
        if record.status == ERROR and record.exit_code == EXIT_BAD_INPUT:
            # bad input the planner could not see (the data, a setting only the trainer checks): same exit 2
            self.console.print(
                f"[red]attempt {record.attempt} refused its input[/red]: {escape(str(record.error))}"
                "\n  not falling back: every profile would refuse it the same way"
            )
            return EXIT_BAD_INPUT
        if record.status == NODE:
            where = f"{record.checkpoint} is kept" if record.checkpoint else "no checkpoint was saved yet"
            self.console.print(
                f"attempt {record.attempt} lost a machine: {record.error}\n  not falling back: "
                f"this is no memory problem; {where}. Once every machine is up, continue with "
                "`python train.py train --resume` (the same command on every machine, as the "
                "job script runs it)",
                markup=False,
                highlight=False,
            )
            return EXIT_FAILURE
        if record.status == INTERRUPTED:
            where = record.checkpoint or "no checkpoint yet"
            self.console.print(
                f"interrupted after {record.steps} steps ({where}); continue with "
                f"`{command_line('python', 'train.py', 'train', '--resume', self.run_dir)}`",
                markup=False,
            )
            return EXIT_INTERRUPTED
        if record.status == ERROR:
            self.console.print(
                f"[red]attempt {record.attempt} failed with an error that is not about "
                f"memory[/red]: {escape(str(record.error))}\n  see "
                f"{escape(str(attempt_dir / LOG_FILE))}; not falling back: another "
                "profile would most likely fail the same way"
            )
            return EXIT_FAILURE
        return None

    def _say_problem(self, problem: str | None) -> None:
        if problem:
            self.console.print(f"note: {problem}", markup=False, highlight=False)

    def decide_after(self, profile: Profile, status: str, report, lengths: dict | None = None) -> Decision:
        if status == REPLANNED:
            from launcher.run.fallback import replan_lengths

            return replan_lengths(self.plan, profile, lengths, self.pinned, self.tried, self.ceiling)
        return decide(self.plan, profile, status, report, self.shrunk, self.tried, self.ceiling)
