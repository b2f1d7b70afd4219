"""WHAT the run report says: summary.json's figures over the run (the rewards and the learning signal of the
first and last steps, the held-out accuracy before, during and after training, sample answers scored as GRPO
scored them) and report.md's sections, written from one summary. The PNG plots are trainer.plots'.
"""

from __future__ import annotations

import json
from pathlib import Path

from contract.attempt import ADAPTER_DIR, BEST_ADAPTER_DIR, CHECKPOINT_PREFIX
from contract.safe_write import write_atomic
from trainer.best_model import beats

WINDOW = 10  # steps averaged for the "first" and "last" reward figures


def _mean(values):
    values = [v for v in values if v is not None]
    return round(sum(values) / len(values), 4) if values else None


def reward_figures(rows: list[dict], reward_names: list[str]) -> dict:
    """Mean of each reward (and the weighted total) over the first and the last WINDOW steps; a run shorter
    than two windows compares its first and second halves (windows that overlap would show no change)."""
    window = max(1, min(WINDOW, len(rows) // 2))
    first, last = rows[:window], rows[-window:]
    out = {
        "window": min(window, len(rows)),
        "total": {"first": _mean(r["reward"] for r in first), "last": _mean(r["reward"] for r in last)},
    }
    for name in reward_names:
        out[name] = {
            "first": _mean(r["rewards"].get(name) for r in first),
            "last": _mean(r["rewards"].get(name) for r in last),
        }
    return out


SIGNAL_KEYS = ("groups_alike", "group_reward_spread", "groups_all_correct", "groups_all_wrong")


def signal_figures(rows: list[dict]) -> dict | None:
    """The learning signal (trainer.group_signal) averaged over the first and the last WINDOW steps that
    carry it, and the "cannot learn" line when the last ones say so; None when no step carries it."""
    from trainer.group_signal import no_signal_warning

    carried = [r for r in rows if r.get("group_signal")]
    if not carried:
        return None
    first, last = carried[:WINDOW], carried[-WINDOW:]
    out = {"window": min(WINDOW, len(carried))}
    for key in SIGNAL_KEYS:
        if key in carried[-1]["group_signal"]:
            out[key] = {
                "first": _mean(r["group_signal"].get(key) for r in first),
                "last": _mean(r["group_signal"].get(key) for r in last),
            }
    out["warning"] = no_signal_warning(carried)
    return out


def evaluation_figures(
    before: dict,
    points: list[dict],
    after: dict,
    final_step: int,
    every: int,
    why: str,
    seconds: float,
    train_seconds: float,
    attempt_dir: Path,
    kept: dict | None = None,
) -> dict:
    """The held-out accuracy over the run: before training (step 0), every evaluation during it, and after it
    (the final step); the final model and the best, with the folder that holds each; and what evaluating
    during training cost. The best before the final evaluation is the first of the highest accuracy, or the
    one best-adapter/ holds (`kept`, its marker: trainer.best_model, which may come from the attempt resumed);
    the final model is the best when it scores at least as well (adapter/ holds it)."""
    curve = []
    if before.get("accuracy") is not None:
        curve.append(
            {"step": 0, "accuracy": before["accuracy"], "well_formed": before.get("well_formed"), "when": "before"}
        )
    curve += [
        {"step": p["step"], "accuracy": p["accuracy"], "well_formed": p.get("well_formed"), "when": "during"}
        for p in points
    ]
    if after.get("accuracy") is not None:
        curve.append(
            {
                "step": final_step,
                "accuracy": after["accuracy"],
                "well_formed": after.get("well_formed"),
                "when": "after",
            }
        )
    earlier = None  # the best before the final evaluation
    for point in curve:
        if point["when"] != "after" and beats(point, earlier):
            earlier = point
    if kept is not None:
        earlier = {"step": kept["step"], "accuracy": kept["accuracy"], "well_formed": kept.get("well_formed")}
    final = None
    if curve and curve[-1]["when"] == "after":
        final = {key: curve[-1][key] for key in ("step", "accuracy", "well_formed")} | {"saved_in": ADAPTER_DIR}
    best = None
    if final is not None and (earlier is None or final["accuracy"] >= earlier["accuracy"]):
        best = dict(final)
    elif earlier is not None:
        holder = None
        if kept is not None:
            holder = BEST_ADAPTER_DIR
        elif earlier["step"] and (attempt_dir / f"{CHECKPOINT_PREFIX}{earlier['step']}").is_dir():
            holder = f"{CHECKPOINT_PREFIX}{earlier['step']}"  # a trainer checkpoint of that step
        best = {"step": earlier["step"], "accuracy": earlier["accuracy"], "well_formed": earlier["well_formed"]}
        best["saved_in"] = holder
        if kept is not None and kept.get("chosen_by"):
            best["chosen_by"] = kept["chosen_by"]  # an evaluation of the attempt this one resumed
    return {
        "every": every,
        "why": why,
        "points": curve,
        "best": best,
        "final": final,
        "seconds_during_training": round(seconds, 2),
        "share_of_training_time": round(seconds / train_seconds, 3) if train_seconds > 0 else None,
    }


def scored_examples(examples: list[dict], weights: dict) -> list[dict]:
    """Sample answers with each profile reward's score and the weighted total, as GRPO saw them."""
    from rewards import get_reward
    from rewards.user import scores_now

    out = []
    for example in examples or []:
        scores = {}
        for name in weights:
            try:
                given = {"prompts": [example["prompt"]]} if "prompt" in example else {}  # a reward model reads it
                value = scores_now(get_reward(name), [example["completion"]], answer=[example["answer"]], **given)[0]
            except Exception:  # a reward the registry cannot score (a user's file) is left out, not fatal
                continue
            if value is not None:  # None: it does not apply here (a reward that reads an environment's state)
                scores[name] = value
        total = round(sum(float(weights[name]) * value for name, value in scores.items()), 4)
        out.append({**example, "rewards": scores, "reward": total})
    return out


def _fmt(value, digits=3, unit=""):
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.{digits}f}{unit}"
    return f"{value}{unit}"


def _lengths_line(lengths: dict | None) -> str:
    """The answers' lengths against the plan's: summary.json's completion_lengths."""
    if not lengths or lengths.get("measured_mean") is None:
        return "- answer lengths: not measured"
    cut = lengths.get("cut_share")
    return (
        f"- answer lengths ({lengths.get('source')}, {lengths.get('samples')} answers): "
        f"{_fmt(lengths['measured_mean'], 1)} tokens on average, {lengths.get('measured_p95')} at the 95th "
        f"percentile, {'n/a' if cut is None else f'{cut:.0%}'} cut at the cap of {lengths.get('planned_cap')} "
        f"(the plan expected {lengths.get('planned_expected') or 'n/a'})"
    )


def _probe_line(probe: dict | None) -> str:
    """The worst-case probe before training: its shapes, peak and time."""
    if not probe:
        return "- worst-case probe: not run"
    return (
        f"- worst-case probe: {probe['batch']} x ({probe['prompt_tokens']} prompt + "
        f"{probe['completion_tokens']} completion) tokens, peak {_fmt(probe['peak_gib'], 2, ' GiB')} "
        f"({probe['measure']}) in {_fmt(probe['seconds'], 1, ' s')}"
    )


def _warm_start_lines(warm: dict | None, acc: dict) -> list[str]:
    """The three points of a tiny-model run: random model, warm start (built in), after GRPO."""
    if not warm:
        return []
    how = f"{warm['steps']} supervised steps in the tiny model's build"
    restated = (
        ""
        if warm.get("restated") is None
        else f" ({warm['restated']:.0%} of its answers restating the problem's numbers)"
    )
    if warm.get("stopped") == "criterion":
        how += f", stopped on its criterion{restated}"
    elif warm.get("stopped") == "max_steps":
        how += f", the checked step nearest its criterion once it reached its step limit{restated}"
    if warm.get("weights") == "shipped":  # the same warm-start bytes on every machine
        how += f" on {warm.get('cpu_capability') or 'one machine'}, shipped with the project"
    tools = warm.get("tools")
    if tools:  # the tool-calling build: a second pass with some answers through the tools
        how += (
            f", then {tools['steps']} steps with some answers through the calculator and the guessing game "
            f"(with the calculator offered: accuracy {_fmt(tools['calculator']['accuracy'])}, "
            f"{_fmt(tools['calculator']['tool_calls_per_answer'])} calls per answer)"
        )
    return [
        f"- held-out accuracy, random model -> warm start -> after GRPO: {_fmt(warm['random_accuracy'])} -> "
        f"{_fmt(acc['before'])} -> {_fmt(acc['after'])} (the warm start is {how}; GRPO's own gain is "
        f"{_fmt(None if acc['before'] is None or acc['after'] is None else acc['after'] - acc['before'])})"
    ]


def _signal_lines(signal: dict | None) -> list[str]:
    """The learning signal's table (first and last steps) and the "cannot learn" line, if any."""
    if not signal:
        return []
    names = {
        "groups_alike": "groups with one reward for all completions (no advantage)",
        "group_reward_spread": "reward spread within a group (sd)",
        "groups_all_correct": "groups all correct",
        "groups_all_wrong": "groups all wrong",
    }
    lines = [
        "",
        "## Learning signal (mean of the first and the last steps)",
        "",
        f"| per step | first {signal['window']} | last {signal['window']} |",
        "|---|---|---|",
    ]
    for key, label in names.items():
        if key in signal:
            lines.append(f"| {label} | {_fmt(signal[key]['first'])} | {_fmt(signal[key]['last'])} |")
    if signal.get("warning"):
        lines += ["", f"**Warning: {signal['warning']}.**"]
    return lines


def _evaluation_lines(evaluation: dict | None) -> list[str]:
    """The held-out accuracy curve (before, during, after training) and its best step."""
    if not evaluation or not evaluation["points"]:
        return []
    lines = ["", "## Held-out evaluation over the run", ""]
    lines.append(
        f"During training: {'every ' + str(evaluation['every']) + ' steps' if evaluation['every'] else 'off'}"
        f" ({evaluation['why']})"
        + (
            f"; it took {_fmt(evaluation['seconds_during_training'], 1, ' s')}, "
            f"{_fmt(evaluation['share_of_training_time'], 3)} of training time"
            if evaluation["every"]
            else ""
        )
        + "."
    )
    lines += ["", "| step | when | accuracy | well-formed |", "|---|---|---|---|"]
    for point in evaluation["points"]:
        lines.append(
            f"| {point['step']} | {point['when']} | {_fmt(point['accuracy'])} | {_fmt(point['well_formed'])} |"
        )
    lines += _final_and_best_lines(evaluation.get("final"), evaluation.get("best"))
    return lines


def _final_and_best_lines(final: dict | None, best: dict | None) -> list[str]:
    """Which folder holds the final model and which the best: the same one, or best-adapter/ beside adapter/."""
    words = []
    if final:
        also = "; it is also the best of the run" if best and best.get("saved_in") == final["saved_in"] else ""
        words.append(
            f"Final: step {final['step']}, accuracy {_fmt(final['accuracy'])}, in `{final['saved_in']}/`{also}."
        )
    if best and (not final or best.get("saved_in") != final["saved_in"]):
        head = f"Best: step {best['step']}, accuracy {_fmt(best['accuracy'])}"
        if best.get("saved_in") == BEST_ADAPTER_DIR:
            chosen = f"chosen by {best['chosen_by']}'s evaluation; " if best.get("chosen_by") else ""
            words.append(f"{head}, in `{BEST_ADAPTER_DIR}/` ({chosen}`python train.py sample RUN --best`).")
        elif best.get("saved_in"):
            words.append(f"{head}, in `{best['saved_in']}/` (a trainer checkpoint).")
        elif best["step"] == 0:
            words.append(f"{head} (before training): no trained model scored higher, so none is kept.")
        else:
            words.append(f"{head}, not saved.")
    return ["", " ".join(words)] if words else []


def _best_output_lines(evaluation: dict | None) -> list[str]:
    """best-adapter/'s line in the outputs, where it holds the best."""
    best = (evaluation or {}).get("best") or {}
    if best.get("saved_in") != BEST_ADAPTER_DIR:
        return []
    return [
        f"- `{BEST_ADAPTER_DIR}/`: the model of the best held-out evaluation during training (step {best['step']}), "
        "as `adapter/` holds the final one; `sample --best` and `export --best` take it"
    ]


def _tool_lines(tools: dict | None) -> list[str]:
    """The tools offered, and how the held-out answers used them before and after training."""
    if not tools:
        return []
    before, after = tools.get("before") or {}, tools.get("after") or {}
    lines = [
        f"- tools: {', '.join(tools['offered'])}, at most {tools['max_tool_calls']} tool-calling turns a completion",
        f"- held-out answers with the tools: tool calls per answer {_fmt(before.get('tool_calls_per_answer'))} -> "
        f"{_fmt(after.get('tool_calls_per_answer'))}, answers that called one {_fmt(before.get('answers_with_tool'))}"
        f" -> {_fmt(after.get('answers_with_tool'))}, calls that succeeded {_fmt(before.get('tool_success'))} -> "
        f"{_fmt(after.get('tool_success'))}",
    ]
    guard = tools.get("guard") or {}
    calls = sum((guard.get("calls") or {}).values())
    if calls:
        failed = sum((guard.get("failures") or {}).values())
        stopped = sum((guard.get("timeouts") or {}).values())
        lines.append(
            f"- tool calls over the run (training and evaluations): {calls}, {failed} failed ({stopped} stopped at "
            "the time limit)"
        )
    return lines


def write_report(attempt_dir: Path, summary: dict) -> None:
    """summary.json and report.md from one summary dict."""
    write_atomic(attempt_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
    mem = summary["memory"]
    acc = summary["accuracy"]
    lines = [
        f"# GRPO run: {summary['profile']['name']}",
        "",
        f"- status: **{summary['status']}**, {summary['steps']} of {summary['max_steps']} steps "
        f"in {_fmt(summary['train_seconds'], 1, ' s')} (whole attempt {_fmt(summary['wall_seconds'], 1, ' s')})"
        + (", stopped at the run's time budget (--hours)" if summary.get("stopped_by") == "budget" else ""),
        f"- model: `{summary['profile']['model']}` on {summary['device']['name']} ({summary['backend']})",
        f"- dataset: {summary['profile']['dataset']}, {summary['train_rows']} training prompts "
        f"({summary['dropped_prompts']} dropped as longer than max_prompt_length)",
        f"- memory: measured peak {_fmt(mem['peak_gib'], 2, ' GiB')} ({mem['measure']}) against the "
        f"estimate {_fmt(mem['estimate_gib'], 2, ' GiB')}"
        + (f" (measured/estimate {mem['ratio']:.2f})" if mem.get("ratio") is not None else ""),
        _probe_line(summary.get("probe")),
        _lengths_line(summary.get("completion_lengths")),
        f"- accuracy on {acc['samples']} test problems: before {_fmt(acc['before'])}, after {_fmt(acc['after'])}"
        + (
            f"; well-formed <reasoning>/<answer> answers {_fmt(acc['well_formed_before'])} -> "
            f"{_fmt(acc['well_formed_after'])}"
            if acc.get("well_formed_after") is not None
            else ""
        ),
        *_warm_start_lines(summary.get("warm_start"), acc),
        *_tool_lines(summary.get("tools")),
        "",
        "## Rewards (mean of the first and the last steps)",
        "",
        f"| reward | first {summary['rewards']['window']} | last {summary['rewards']['window']} |",
        "|---|---|---|",
    ]
    for name, pair in summary["rewards"].items():
        if name == "window":
            continue
        lines.append(f"| {name} | {_fmt(pair['first'])} | {_fmt(pair['last'])} |")
    lines += _signal_lines(summary.get("group_signal"))
    lines += _evaluation_lines(summary.get("evaluation"))
    lines += ["", "## Plots", ""]
    for plot in summary.get("plots", []):
        lines.append(f"![{plot[:-4]}]({plot})")
    lines += [
        "",
        "## Outputs",
        "",
        "- `adapter/`: the trained LoRA adapter (or the full model at lora_rank 0) and the tokenizer, "
        "Hugging Face format",
        *_best_output_lines(summary.get("evaluation")),
        "- `metrics.jsonl`: one line per step (rewards, learning signal per group, loss, completion length, memory)",
        "- `checkpoint-N/`: trainer checkpoints, for `train --resume`",
        "",
    ]
    for key, heading in (("examples_before", "before training"), ("examples_after", "after training")):
        examples = acc.get(key) or []
        if examples:
            lines += [f"## Sample answers {heading}", ""]
            for example in examples:
                reward = f", reward {_fmt(example['reward'], 2)}" if "reward" in example else ""
                lines += [
                    f"expected `{example['answer']}`{reward}:",
                    "",
                    "```",
                    example["completion"].strip(),
                    "```",
                    "",
                ]
    write_atomic(attempt_dir / "report.md", "\n".join(lines))
