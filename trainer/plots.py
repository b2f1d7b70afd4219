"""WHAT an attempt's plots show, one PNG each beside report.md: the rewards per step (rolling means over the
raw total), the mean completion length, the learning signal GRPO had, the held-out evaluation over the run, and
the memory per step against the estimate (matplotlib, Agg, no display needed). trainer.report links them.
"""

from __future__ import annotations

import io
from contextlib import contextmanager
from pathlib import Path

from contract.safe_write import write_atomic

SMOOTH = 10  # steps in the plots' rolling mean


def _rolling(values: list[float], span: int) -> list[float]:
    """Trailing mean over up to `span` steps, skipping missing (NaN) values."""
    out = []
    for i in range(len(values)):
        window = [v for v in values[max(0, i - span + 1) : i + 1] if v == v]
        out.append(sum(window) / len(window) if window else float("nan"))
    return out


def _memory_series(rows: list[dict], device: str):
    key = "peak_reserved_gib" if device == "cuda" else "rss_gib"
    label = "peak reserved (torch)" if device == "cuda" else "process RSS"
    return (
        [r["step"] for r in rows if key in r.get("memory", {})],
        [r["memory"][key] for r in rows if key in r.get("memory", {})],
        label,
    )


@contextmanager
def _plot(plt, attempt_dir: Path, name: str, written: list[str], height: float, ylabel: str, title: str, legend: str):
    """One 9-inch-wide plot: the caller draws on the axes; then labels, grid and legend, and the PNG is
    written (its name added to `written`) and the figure closed."""
    fig, ax = plt.subplots(figsize=(9, height), dpi=110)
    try:
        yield ax
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(loc=legend, fontsize=9)
        fig.tight_layout()
        image = io.BytesIO()
        fig.savefig(image, format="png")
        write_atomic(attempt_dir / name, image.getvalue())  # whole or absent, even on a full disk
    finally:
        plt.close(fig)
    written.append(name)


def write_plots(
    attempt_dir: Path,
    rows: list[dict],
    reward_names: list[str],
    device: str,
    estimate_gib: float | None,
    title: str,
    curve: list[dict] | None = None,
) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    if not rows:
        return written
    steps = [r["step"] for r in rows]

    # Per-step rewards are noisy (a handful of completions each): draw the rolling mean bold, the raw total faint.
    span = max(1, min(SMOOTH, len(rows) // 5))
    with _plot(
        plt,
        attempt_dir,
        "rewards.png",
        written,
        5,
        f"mean reward per completion ({span}-step rolling mean)",
        f"{title}: rewards",
        "upper left",
    ) as ax:
        totals = [float("nan") if r["reward"] is None else r["reward"] for r in rows]
        ax.plot(steps, totals, color="0.6", linewidth=0.8, alpha=0.6, label="total, per step")
        for name in reward_names:
            values = [float("nan") if r["rewards"].get(name) is None else r["rewards"][name] for r in rows]
            ax.plot(steps, _rolling(values, span), label=f"{name}", linewidth=1.4)
        ax.plot(steps, _rolling(totals, span), label="total (weighted)", color="black", linewidth=2.4)

    with _plot(
        plt,
        attempt_dir,
        "completion_length.png",
        written,
        4,
        "tokens",
        f"{title}: mean completion length",
        "lower right",
    ) as ax:
        lengths = [float("nan") if r["completion_length"] is None else r["completion_length"] for r in rows]
        ax.plot(steps, lengths, color="tab:blue", linewidth=0.8, alpha=0.5, label="per step")
        ax.plot(steps, _rolling(lengths, span), color="tab:blue", linewidth=2.0, label=f"{span}-step rolling mean")
        ax.set_ylim(0, max([v for v in lengths if v == v] + [1.0]) * 1.1)

    signal_rows = [r for r in rows if r.get("group_signal")]
    if signal_rows:
        _plot_signal(plt, attempt_dir, signal_rows, span, title, written)

    if curve and any(p["when"] == "during" for p in curve):
        with _plot(
            plt,
            attempt_dir,
            "evaluation.png",
            written,
            4,
            "share of test prompts",
            f"{title}: held-out evaluation",
            "lower right",
        ) as ax:
            steps_at = [p["step"] for p in curve]
            ax.plot(
                steps_at, [p["accuracy"] for p in curve], marker="o", color="black", linewidth=2.0, label="accuracy"
            )
            formed = [(p["step"], p["well_formed"]) for p in curve if p["well_formed"] is not None]
            if formed:
                ax.plot(
                    [s for s, _ in formed],
                    [v for _, v in formed],
                    marker="s",
                    color="tab:blue",
                    linewidth=1.3,
                    linestyle="--",
                    label="well-formed answers",
                )
            ax.set_ylim(0, 1.02)

    mem_steps, mem_values, label = _memory_series(rows, device)
    with _plot(plt, attempt_dir, "memory.png", written, 4, "GiB", f"{title}: memory per step", "lower right") as ax:
        ax.plot(mem_steps, mem_values, label=label, color="tab:green", linewidth=1.5)
        if device == "cuda":
            nvml = [(r["step"], r["memory"]["nvml_used_gib"]) for r in rows if "nvml_used_gib" in r["memory"]]
            if nvml:
                ax.plot(
                    [s for s, _ in nvml], [v for _, v in nvml], label="used (NVML)", color="tab:purple", linewidth=1.2
                )
        if estimate_gib is not None:
            ax.axhline(estimate_gib, color="tab:red", linestyle="--", label=f"estimate {estimate_gib:.2f} GiB")
        top = max([*mem_values, estimate_gib or 0.0, 0.01])
        ax.set_ylim(0, top * 1.15)
    return written


def _plot_signal(plt, attempt_dir: Path, rows: list[dict], span: int, title: str, written: list[str]) -> None:
    """What GRPO learns from: the share of groups whose completions all scored alike (no advantage) and, with
    a correctness reward, all right / all wrong; the reward spread within groups on the right axis."""
    steps = [r["step"] for r in rows]

    def series(key):
        return _rolling(
            [float("nan") if r["group_signal"].get(key) is None else r["group_signal"][key] for r in rows], span
        )

    with _plot(
        plt,
        attempt_dir,
        "group_signal.png",
        written,
        4.5,
        f"share of groups ({span}-step rolling mean)",
        f"{title}: learning signal per step",
        "upper left",
    ) as ax:
        ax.plot(steps, series("groups_alike"), color="black", linewidth=2.2, label="one reward for the whole group")
        if "groups_all_correct" in rows[-1]["group_signal"]:
            ax.plot(steps, series("groups_all_correct"), color="tab:green", linewidth=1.3, label="all correct")
            ax.plot(steps, series("groups_all_wrong"), color="tab:red", linewidth=1.3, label="all wrong")
        ax.set_ylim(0, 1)
        right = ax.twinx()
        right.plot(steps, series("group_reward_spread"), color="tab:blue", linewidth=1.3, linestyle="--")
        right.set_ylabel("reward spread within a group (sd)", color="tab:blue")
        right.set_ylim(bottom=0)
        ax.plot([], [], color="tab:blue", linestyle="--", label="reward spread within a group (right axis)")
