"""HOW the machines of a multi-node run act as one: machine 0's supervisor takes every decision (the first
attempt from its plan, each later one after the last ended) and writes it into the shared run folder; every
other machine (the other training machines, and the vLLM server's own node) reads it and follows, so that all
of them run the same attempt, shrink or fall back the same way, and stop together.

The handshake, on the output folder every machine shares (nothing else is shared, no clock is compared):

  OUTPUT/job-<name>.json           machine 0: which run folder this job uses, and its session token
  RUN/machines/machine-0.json      machine 0: its session and a heartbeat counter, rewritten every few seconds
  RUN/machines/<machine>.json      each other machine: its own token, and the session it answers
  RUN/machines/decision.json       machine 0: the latest decision (run attempt N, or stop with an exit status),
                                   naming the token of each machine it heard from; decisions.jsonl keeps them all

<name> is the run's name on every machine (GRPO_RUN_ID, else SLURM_JOB_ID). A machine follows a decision only
when it names its own token (fresh per process), and machine 0 counts an answer only when it answers its own
session (fresh per process), so files left by an earlier session of the same job are never taken for new ones.
A machine that cannot see machine 0's word within GRPO_MACHINE_TIMEOUT seconds (counted from machine 0's last
heartbeat) stops, naming the file it waited for: the output folder must be shared by every machine.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from contract.environment import ENV_MACHINE_TIMEOUT, ENV_RUN_ID
from contract.safe_write import append_line, write_atomic

MACHINES_DIR = "machines"
DECISION_FILE = "decision.json"
DECISIONS_LOG = "decisions.jsonl"
MAIN_FILE = "machine-0.json"
SERVER = "server"  # the vLLM server's own node, among the machines
HEARTBEAT_S = 5.0
POLL_S = 0.5
RUN, STOP = "run", "stop"

SHARED_FIX = (
    "every machine must run with the same --output-dir on a file system they all share (the same "
    f"path on each), and the same run name ({ENV_RUN_ID}, else SLURM_JOB_ID)"
)


def machine_name(rank: int) -> str:
    return f"machine-{rank}"


def job_file(output_dir: Path, name: str) -> Path:
    return Path(output_dir) / f"job-{name}.json"


def read_json(path: Path) -> dict | None:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class MachineTimeout(RuntimeError):
    """A machine did not hear from another within the timeout (the text names the file and the fix)."""


@dataclass
class Decision:
    seq: int  # 1, 2, ... within machine 0's session
    action: str  # RUN or STOP
    session: str
    machines: dict  # machine name -> the token machine 0 heard from it
    attempt: int | None = None
    attempt_dir: str | None = None  # relative to the run folder
    profile: str | None = None
    resume_from: str | None = None  # relative to the run folder
    text: str | None = None  # why (the fallback's words), as attempts.jsonl `decided` says it
    estimate_gib: float | None = None  # the plan's estimate, given to every machine's attempt
    exit_code: int | None = None  # STOP: the exit status every machine ends with

    @classmethod
    def from_dict(cls, data: dict | None) -> Decision | None:
        if not data or data.get("action") not in (RUN, STOP):
            return None
        try:
            fields: dict[str, Any] = {k: data.get(k) for k in cls.__dataclass_fields__ if k in data}
            return cls(**fields)
        except TypeError:
            return None


class Coordinator:
    """Machine 0's side: names the run folder for the job, hears from every other machine, writes decisions,
    and beats a heartbeat while it runs."""

    def __init__(
        self,
        output_dir: Path,
        run_dir: Path,
        name: str,
        others: list[str],
        timeout_s: float,
        say=print,
        command: dict | None = None,
    ):
        self.output_dir, self.run_dir, self.name = Path(output_dir), Path(run_dir), name
        self.command = command  # machine 0's --profile and --set, for the others to compare with theirs
        self.others = list(others)
        self.timeout_s = timeout_s
        self.say = say
        self.session = uuid.uuid4().hex
        self.folder = self.run_dir / MACHINES_DIR
        self.heard: dict[str, str] = {}
        self.seq = 0
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    def open(self) -> Coordinator:
        self.folder.mkdir(parents=True, exist_ok=True)
        self._write_beat(0)
        pointer: dict[str, Any] = {"run": self.run_dir.name, "session": self.session}
        if self.command is not None:
            pointer["command"] = self.command
        write_atomic(job_file(self.output_dir, self.name), json.dumps(pointer) + "\n")
        self._beat = threading.Thread(target=self._beating, name="machine-0 heartbeat", daemon=True)
        self._beat.start()
        return self

    def _write_beat(self, beat: int) -> None:
        write_atomic(
            self.folder / MAIN_FILE,
            json.dumps({"session": self.session, "beat": beat, "host": socket.gethostname(), "pid": os.getpid()})
            + "\n",
        )

    def _beating(self) -> None:
        beat = 0
        while not self._stop.wait(HEARTBEAT_S):
            beat += 1
            try:
                self._write_beat(beat)
            except OSError:  # a full or gone disk: the run's own writes will say so
                pass

    def gather(self, stopped=lambda: False) -> dict[str, str]:
        """Wait for every other machine's answer to this session; {machine: token}. MachineTimeout names the
        machines that did not answer and where their answer was expected."""
        deadline = time.monotonic() + self.timeout_s
        waiting = [m for m in self.others if m not in self.heard]
        if waiting:
            self.say(
                f"waiting for {', '.join(waiting)} to join the run in {self.folder} (up to {self.timeout_s:.0f} s)"
            )
        while True:
            for machine in self.others:
                answer = read_json(self.folder / f"{machine}.json") or {}
                if answer.get("answering") == self.session and answer.get("token"):
                    self.heard[machine] = answer["token"]
            missing = [m for m in self.others if m not in self.heard]
            if not missing or stopped():
                return dict(self.heard)
            if time.monotonic() > deadline:
                where = ", ".join(str(self.folder / f"{m}.json") for m in missing)
                raise MachineTimeout(
                    f"machine 0: no word from {', '.join(missing)} within {self.timeout_s:.0f} s "
                    f"(waited for {where}): {SHARED_FIX}, and each machine started "
                    f"(fix, or raise {ENV_MACHINE_TIMEOUT})"
                )
            time.sleep(POLL_S)

    def _write(self, decision: Decision) -> Decision:
        write_atomic(self.folder / DECISION_FILE, json.dumps(asdict(decision), indent=1) + "\n")
        append_line(self.folder / DECISIONS_LOG, json.dumps(asdict(decision)))
        return decision

    def decide(
        self,
        attempt: int,
        attempt_dir: str | None,
        profile: str,
        resume_from: str | None,
        text: str | None,
        estimate_gib: float | None = None,
    ) -> Decision:
        self.seq += 1
        return self._write(
            Decision(
                self.seq,
                RUN,
                self.session,
                dict(self.heard),
                attempt=attempt,
                attempt_dir=attempt_dir,
                profile=profile,
                resume_from=resume_from,
                text=text,
                estimate_gib=estimate_gib,
            )
        )

    def stop(self, exit_code: int, text: str) -> Decision:
        self.seq += 1
        return self._write(Decision(self.seq, STOP, self.session, dict(self.heard), exit_code=exit_code, text=text))

    def close(self) -> None:
        self._stop.set()
        if self._beat is not None:
            self._beat.join(timeout=HEARTBEAT_S + 1)


@dataclass
class Follower:
    """Another machine's side: finds the job's run folder, answers machine 0's session, and waits for each
    decision that names it."""

    output_dir: Path
    name: str  # the run's name (GRPO_RUN_ID / SLURM_JOB_ID)
    machine: str  # machine-N, or SERVER
    timeout_s: float
    role: str = "training"
    token: str = field(default_factory=lambda: uuid.uuid4().hex)
    run_dir: Path | None = None
    session: str | None = None
    seq: int = 0
    _alive_at: float = 0.0
    _beat: int | None = None  # machine 0's heartbeat as last read

    @property
    def folder(self) -> Path:
        assert self.run_dir is not None
        return self.run_dir / MACHINES_DIR

    def join(self, stopped=lambda: False) -> Path:
        """Wait for machine 0 to name the job's run folder, answer it; the run folder."""
        pointer = job_file(self.output_dir, self.name)
        deadline = time.monotonic() + self.timeout_s
        while not self._refresh():
            if stopped():
                raise KeyboardInterrupt("a signal")
            if time.monotonic() > deadline:
                raise MachineTimeout(
                    f"{self.machine}: machine 0 did not name the run within {self.timeout_s:.0f} s "
                    f"(waited for {pointer}): {SHARED_FIX}, and machine 0 started "
                    f"(fix, or raise {ENV_MACHINE_TIMEOUT})"
                )
            time.sleep(POLL_S)
        assert self.run_dir is not None  # what _refresh read
        return self.run_dir

    def _refresh(self) -> bool:
        """Read the job's pointer; answer a session not answered yet. False while there is none."""
        pointer = read_json(job_file(self.output_dir, self.name)) or {}
        run, session = pointer.get("run"), pointer.get("session")
        if not run or not session:
            return False
        if session != self.session:
            self.run_dir = Path(self.output_dir) / run
            self.session, self.seq = session, 0
            self.folder.mkdir(parents=True, exist_ok=True)
            write_atomic(
                self.folder / f"{self.machine}.json",
                json.dumps(
                    {
                        "token": self.token,
                        "answering": session,
                        "role": self.role,
                        "host": socket.gethostname(),
                        "pid": os.getpid(),
                    }
                )
                + "\n",
            )
            self._alive_at = time.monotonic()
        return True

    def _machine_0_alive(self) -> None:
        beat = (read_json(self.folder / MAIN_FILE) or {}).get("beat")
        if beat != self._beat:
            self._beat, self._alive_at = beat, time.monotonic()

    def _newer(self) -> Decision | None:
        decision = Decision.from_dict(read_json(self.folder / DECISION_FILE))
        if (
            decision is not None
            and decision.session == self.session
            and decision.seq > self.seq
            and (decision.machines or {}).get(self.machine) == self.token
        ):
            return decision
        return None

    def moved_on(self) -> bool:
        """Whether machine 0 has decided again since the decision this machine runs (its attempt is over
        there: this machine's part of it can only wait for peers that are gone)."""
        return self._newer() is not None

    def next_decision(self, stopped=lambda: False) -> Decision:
        """The next decision of machine 0 that names this machine. MachineTimeout when machine 0 has not beaten
        its heartbeat for the timeout (it is gone, or this machine cannot see the shared folder)."""
        path = self.folder / DECISION_FILE
        while True:
            self._refresh()
            self._machine_0_alive()
            decision = self._newer()
            if decision is not None:
                self.seq = decision.seq
                return decision
            if stopped():
                raise KeyboardInterrupt("a signal")
            if time.monotonic() - self._alive_at > self.timeout_s:
                raise MachineTimeout(
                    f"{self.machine}: no decision from machine 0 within {self.timeout_s:.0f} s of "
                    f"its last heartbeat (waited for {path}): machine 0 may be gone; "
                    f"{SHARED_FIX} (fix, or raise {ENV_MACHINE_TIMEOUT})"
                )
            time.sleep(POLL_S)
