"""WHAT the terminal shows while an attempt trains: step, reward and memory, as a live bar on a terminal and
a plain line every LINE_EVERY_S seconds otherwise (logs, pipes, the supervisor's tee)."""

from __future__ import annotations

import statistics
import sys
import time

LINE_EVERY_S = 30.0
RECENT_STEPS = 20  # the pace is the median of the last steps (the first, which compiles, left out)


def pace(step_times: list[float]) -> float | None:
    """Seconds per step at the measured pace: the median of the recent steps, the first left out once others
    are known (it compiles and warms up)."""
    times = [t for t in step_times if t > 0]
    if len(times) > 1:
        times = times[1:]
    if not times:
        return None
    return statistics.median(times[-RECENT_STEPS:])


def eta_seconds(step_times: list[float], step: int, max_steps: int) -> float | None:
    """Seconds left to max_steps at the measured pace (None before a step is measured)."""
    each = pace(step_times)
    return None if each is None else each * max(max_steps - step, 0)


def duration_text(seconds: float) -> str:
    """A duration in words: seconds under a minute and a half, minutes under an hour and a half, else hours."""
    seconds = int(round(seconds))
    if seconds < 90:
        return f"{seconds} s"
    if seconds < 5400:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


class Progress:
    """Step, reward and memory: a live bar on a terminal, a plain line now and then otherwise."""

    def __init__(self, name: str, total: int, device: str):
        self.name = name
        self.total = total
        self.device = device
        self._bar = None
        self._task = None
        self._every = max(1, total // 20)
        self._printing = True
        self._started = time.time()
        self._last_line = 0.0
        self._step_times: list[float] = []  # measured: the ETA is re-predicted from them
        if sys.stdout.isatty():
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
            from rich.progress import Progress as RichProgress

            self._bar = RichProgress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[info]}"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                transient=False,
            )
            self._task = self._bar.add_task(name, total=total, info="")
            self._bar.start()

    def _memory_text(self, memory: dict) -> str:
        if "peak_reserved_gib" in memory:
            return f"gpu {memory['peak_reserved_gib']:.2f} GiB"
        return f"rss {memory.get('rss_gib', 0.0):.2f} GiB"

    def update(self, step: int, total: int, row: dict):
        if isinstance(row.get("step_time"), (int, float)):
            self._step_times.append(float(row["step_time"]))
        reward = row.get("reward")
        info = f"reward {reward:.3f}  " if reward is not None else ""
        signal = row.get("group_signal")
        if signal:  # what GRPO learns from: groups whose completions differ
            info += f"alike groups {signal['groups_alike']:.0%}  spread {signal['group_reward_spread']:.2f}  "
        info += self._memory_text(row["memory"])
        if self._bar is not None:
            self._bar.update(self._task, completed=step, total=total or self.total, info=info)
        elif self._printing:
            now = time.time()
            # every twentieth of the run, and at least every LINE_EVERY_S when steps are slow (a GPU run)
            if not (step == 1 or step % self._every == 0 or step == total or now - self._last_line >= LINE_EVERY_S):
                return
            self._last_line = now
            left = eta_seconds(self._step_times, step, total or self.total)
            if left is None:
                left = (now - self._started) / max(step, 1) * max((total or self.total) - step, 0)
            try:
                print(
                    f"[{self.name}] step {step}/{total}  {info}  ({row['step_time']:.2f} s/step, "
                    f"~{duration_text(left)} left)",
                    flush=True,
                )
            except OSError:  # whoever read our output has gone (a closed pipe): keep training, stop printing
                self._printing = False

    def warn(self, line: str):
        """One line that stays on screen, above a live bar or between the plain lines."""
        text = f"[{self.name}] warning: {line}"
        if self._bar is not None:
            self._bar.console.print(text)
        elif self._printing:
            try:
                print(text, flush=True)
            except OSError:
                self._printing = False

    def close(self):
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
