"""WHAT the kit's table says: one row per probe (the estimate split as the probe exercises it, the memory read
per component beside the estimator's matching term, the steps timed beside the step-time model's prediction at
exactly that shape), written as <card>.json and <card>.md after every probe, and continued by a later run.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from measure.cases import PLAIN, case_key

REPORT_VERSION = 3
# Estimate components by what the probe exercises: held before its step (the model), the step itself, and
# what it does not run (generation's KV cache, vLLM, the CUDA context, which torch's figures leave out).
HELD = ("weights", "lora", "reference", "master_weights", "runtime")  # runtime: the CPU process's libraries
NOT_PROBED = ("generate_kv_cache", "vllm_cache", "vllm_workspace", "standby_reuse", "cuda_context")
# measured component -> the estimator's terms it is held against
COMPONENTS = (
    ("cuda_context", "CUDA context", "cuda_context_gib", ("cuda_context",)),
    ("weights", "weights", "weights_gib", ("weights",)),
    ("lora", "LoRA", "lora_gib", ("lora",)),
    (
        "forward",
        "forward + loss (activations, logits)",
        "forward_peak_gib",
        ("activations", "activation_checkpoints", "logits", "peak_overlap"),
    ),
    ("gradients", "gradients", "gradients_gib", ("gradients",)),
    ("optimizer", "optimizer state", "optimizer_state_gib", ("optimizer", "optimizer_step")),
    ("generation", "generation wave (KV cache)", "generation_peak_gib", ("generate_kv_cache",)),
)
# What vLLM would add, which cannot travel to a card without network (its wheel alone is past the limit)
UNMEASURED = (
    "vLLM's share of the card (gpu_memory_utilization x total) and what it holds in it",
    "vLLM's KV cache and its sequences at once",
    "vLLM's CUDA graphs and workspace",
    "vLLM's decode speed (the step-time model's engine cost per decode step)",
)
MEASURED = ("ok", "oom", "error", "unsupported", "timed out")
NOT_RUN_FIT, NOT_RUN_TIME, PENDING = "not run (does not fit)", "not run (time budget)", "not run yet"
# The libraries a continued report must share with this run: measurements under another torch,
# transformers, TRL or PEFT are not comparable.
SAME_LIBRARIES = ("torch", "transformers", "trl", "peft")


def card_slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "card"


def split_estimate(est) -> dict:
    comp = dict(est.components)
    held = sum(comp.get(k, 0.0) for k in HELD)
    not_probed = sum(comp.get(k, 0.0) for k in NOT_PROBED)
    return {
        "held_gib": round(held, 3),
        "step_gib": round(est.total_gib - held - not_probed, 3),
        "not_probed_gib": round(not_probed, 3),
        "total_gib": round(est.total_gib, 3),
        "components": {k: round(v, 3) for k, v in comp.items()},
    }


def case_row(case: dict, status: str) -> dict:
    row = {k: case[k] for k in ("name", "architecture", "params", "path", "precision", "optim", "fits", "settings")}
    row["estimate"] = split_estimate(case["estimate"])
    row["status"] = status
    return row


def _ratio(measured, estimated) -> float | None:
    if not isinstance(measured, (int, float)) or not isinstance(estimated, (int, float)) or estimated <= 0:
        return None
    return round(measured / estimated, 3)


def component_rows(case: dict, components: dict, timed: dict) -> list[dict]:
    """Each measured component beside the estimator's terms for it. The generation wave's KV cache is
    estimated at the wave's own shape (sequences x prompt + completion tokens), not the profile's."""
    from launcher.memory.parts import HALF_BYTES, generate_kv_cache
    from profiles.catalog import resolve

    estimated = dict(case["estimate"].components)
    waves = timed.get("generation") or []
    if waves:
        longest = max(waves, key=lambda w: w["completion_tokens"])
        try:
            arch = resolve(case["architecture"], allow_hub=False)
            estimated["generate_kv_cache"] = generate_kv_cache(
                arch, longest["sequences"], longest["prompt_tokens"] + longest["completion_tokens"], HALF_BYTES
            ) / float(1 << 30)
        except Exception:  # noqa: BLE001 - a term left unestimated, not a reason to stop
            estimated.pop("generate_kv_cache", None)
    rows = []
    for key, label, measured_key, terms in COMPONENTS:
        present = [t for t in terms if t in estimated]
        estimate = round(sum(estimated[t] for t in present), 4) if present else None
        measured = components.get(measured_key)
        rows.append(
            {
                "component": key,
                "label": label,
                "estimate_gib": estimate,
                "estimate_terms": present,
                "measured_gib": measured,
                "measured_over_estimate": _ratio(measured, estimate),
            }
        )
    return rows


def _predicted(case: dict, timed: dict, gpu) -> dict:
    """`timed` with each generation wave and training step beside the step-time model's prediction at exactly
    its shape."""
    from measure.cases import predict_timed

    timed = dict(timed)
    for kind in ("generation", "training"):
        rows = []
        for entry in timed.get(kind) or []:
            entry = dict(entry)
            predicted = predict_timed(
                case["profile"],
                gpu,
                kind,
                entry["sequences"],
                entry["prompt_tokens"],
                entry["completion_tokens"],
                plain=case["path"] == PLAIN,
            )
            entry["predicted_s"] = None if predicted is None else round(predicted, 4)
            entry["measured_over_predicted"] = _ratio(entry["seconds"], predicted)
            rows.append(entry)
        if rows:
            timed[kind] = rows
    return timed


def with_predictions(case: dict, timed: dict, gpu) -> dict:
    """The timed records, each with the step-time model's prediction at exactly its shape (the plan's shape,
    `planned`, too)."""
    timed = _predicted(case, timed, gpu)
    if isinstance(timed.get("planned"), dict):
        timed["planned"] = _predicted(case, timed["planned"], gpu)
    # the longest length's figures, as the table's summary columns give them, with the model's at that shape
    waves, steps = timed.get("generation") or [], timed.get("training") or []
    wave, step = (waves[-1] if waves else None), (steps[-1] if steps else None)
    shape = wave or step
    if shape:
        timed["predicted"] = {
            "sequences": shape["sequences"],
            "prompt_tokens": shape["prompt_tokens"],
            "completion_tokens": shape["completion_tokens"],
            "generation_wave_s": wave and wave["predicted_s"],
            "training_step_s": step and step["predicted_s"],
        }
        timed["measured_over_predicted"] = {
            "generation_wave_s": wave and wave["measured_over_predicted"],
            "training_step_s": step and step["measured_over_predicted"],
        }
    return timed


def peak_comparison(row: dict, probe: dict) -> dict:
    """The probe's peak against the estimate, like for like: torch's peak (no CUDA context) against the
    estimate without its context; the process's peak as NVML counts it (context in) against the estimate with
    it."""
    est = row["estimate"]
    context = est["components"].get("cuda_context", 0.0)
    without = est["total_gib"] - est["not_probed_gib"]
    torch_peak = None
    if "peak_allocated_gib" in probe:
        torch_peak = max(probe["peak_allocated_gib"] or 0.0, probe.get("peak_reserved_gib") or 0.0)
    out = {
        "torch_peak_gib": torch_peak,
        "estimate_without_context_gib": round(without, 3),
        "torch_peak_over_estimate": _ratio(torch_peak, without),
    }
    process = probe.get("nvml_process_gib") is not None and probe.get("peak_gib")
    if process and context:
        out.update(
            process_peak_gib=probe["peak_gib"],
            estimate_with_context_gib=round(without + context, 3),
            process_peak_over_estimate=_ratio(probe["peak_gib"], without + context),
            measure=probe.get("measure"),
        )
    return out


def measured_row(case: dict, outcome: dict, gpu) -> dict:
    row = case_row(case, outcome["status"])
    probe = dict(outcome["probe"])
    components = probe.pop("components", None) or {}
    timed = probe.pop("timed", None) or {}
    row.update(
        error=outcome["error"],
        backend=outcome["backend"],
        seconds=outcome["seconds"],
        timeout_s=outcome["timeout_s"],
        probe=probe,
        log_tail=outcome["log_tail"],
    )
    if timed:
        row["timed"] = with_predictions(case, timed, gpu)
    if components:
        row["components"] = components
        row["component_rows"] = component_rows(case, components, timed)
    if probe.get("peak_gib") is not None:
        held = probe.get("held_before_gib")
        peak = probe.get("peak_allocated_gib", probe["peak_gib"])
        row["measured"] = {
            "held_gib": held,
            "step_gib": None if held is None else round(peak - held, 3),
            "peak_gib": probe["peak_gib"],
            "measure": probe.get("measure"),
        }
        row["peak"] = peak_comparison(row, probe)
        if gpu is None:  # the CPU's resident memory holds the libraries: the whole estimate is its figure
            row["measured_over_estimate"] = _ratio(probe["peak_gib"], row["estimate"]["total_gib"])
        else:
            row["measured_over_estimate"] = row["peak"]["torch_peak_over_estimate"]
    return row


def nvml_against_torch(rows: list[dict]) -> list[dict]:
    """For each probe on a GPU: NVML's used memory at the end of the step against torch's reserved peak;
    the difference is the CUDA context, libraries' workspaces and any other process on the card."""
    out = []
    for row in rows:
        probe = row.get("probe") or {}
        if "nvml_used_gib" in probe and "peak_reserved_gib" in probe:
            out.append(
                {
                    "case": f"{row['architecture']} ({row['path']}, {row['precision']})",
                    "nvml_used_gib": probe["nvml_used_gib"],
                    "torch_reserved_gib": probe["peak_reserved_gib"],
                    "outside_torch_gib": round(probe["nvml_used_gib"] - probe["peak_reserved_gib"], 3),
                }
            )
    return out


def _cell(value, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _case(row: dict) -> str:
    return f"{row['architecture'].rpartition('/')[2]} | {row['path']} | {row['precision']}"


def markdown(report: dict) -> str:
    versions = report["versions"]
    budgets = ", ".join(f"{run['budget_s']:.0f}" for run in report["runs"])
    lines = [
        f"# {report['card']}: estimate against measured",
        "",
        f"{report['date']}, {report['device']}, torch {versions.get('torch', '?')}, transformers "
        f"{versions.get('transformers', '?')}, trl {versions.get('trl', '?')}, peft {versions.get('peft', '?')}, "
        f"unsloth {versions.get('unsloth', 'absent')}, bitsandbytes {versions.get('bitsandbytes', 'absent')}; "
        f"random weights from the catalogue's facts; {len(report['runs'])} run(s), "
        f"{sum(r['seconds'] for r in report['runs']):.0f} s in all (budgets {budgets} s). Written by "
        "`python train.py gpu-check`.",
        "",
    ]
    imports = report.get("imports") or {}
    for name, seen in imports.items():
        lines.append(
            f"- {name}: {'imports' if seen.get('imports') else 'does not import'}"
            + (f" ({seen['version']})" if seen.get("version") else "")
            + (f" in {seen['seconds']:.1f} s" if seen.get("seconds") is not None else "")
            + (f": {seen['error']}" if seen.get("error") else "")
        )
    if imports:
        lines.append("")
    lines += [
        "## Probes",
        "",
        "The worst-case probe (one GRPO step at full batch and completion length, backward and an optimizer "
        "step). Peak / estimate is like for like: torch's peak against the estimate without the CUDA context "
        "(on the CPU: the process's peak resident memory against the whole estimate).",
        "",
        "| architecture | path | precision | optimizer | est. held | est. step | measured held | measured step "
        "| measured peak | peak / estimate | status |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in report["probes"]:
        est, got = row["estimate"], row.get("measured") or {}
        error = f": {row['error'][:80]}" if row.get("error") else ""
        lines.append(
            f"| {_case(row)} | {row['optim']} | {_cell(est['held_gib'])} | {_cell(est['step_gib'])} | "
            f"{_cell(got.get('held_gib'))} | {_cell(got.get('step_gib'))} | {_cell(got.get('peak_gib'))} | "
            f"{_cell(row.get('measured_over_estimate'))} | {row['status']}{error} |"
        )
    measured = [row for row in report["probes"] if row.get("component_rows")]
    if measured:
        labels = [c[1] for c in COMPONENTS]
        lines += [
            "",
            "## Memory by component",
            "",
            "GiB, estimate / measured, each read at a phase boundary of one training step at the probe's shape "
            "(allocated when it ends less when it began; forward: its peak) and around the longest generation "
            "wave timed (its peak above the start, estimated at that wave's shape). Measured with "
            f"{measured[0]['components'].get('measure', '?')}.",
            "",
            "| architecture | path | precision | " + " | ".join(labels) + " |",
            "|---|---|---|" + "---|" * len(labels),
        ]
        for row in measured:
            cells = [f"{_cell(c['estimate_gib'], 3)} / {_cell(c['measured_gib'], 3)}" for c in row["component_rows"]]
            lines.append(f"| {_case(row)} | " + " | ".join(cells) + " |")
    timed = [row for row in report["probes"] if (row.get("timed") or {}).get("generation")]
    if timed:
        lines += [
            "",
            "## Time at the shapes timed",
            "",
            "Seconds, measured / predicted by the step-time model at exactly that shape (sequences at once, "
            "prompt and completion tokens): one generation wave by transformers' generate, every completion "
            "exactly that long, in the context the trainer generates in (a row's `through` in the JSON; Unsloth's "
            "switches to inference mode and decodes with CUDA graphs), and one training step (loss, backward, "
            "optimizer) over one micro-batch.",
            "",
            "| architecture | path | precision | sequences x prompt | wave: tokens, measured / predicted | "
            "step: tokens, measured / predicted |",
            "|---|---|---|---|---|---|",
        ]
        for row in timed:
            waves, steps = row["timed"].get("generation") or [], row["timed"].get("training") or []
            first = waves[0] if waves else steps[0]
            wave_cells = "; ".join(
                f"{w['completion_tokens']}: {_cell(w['seconds'], 3)} / {_cell(w.get('predicted_s'), 3)}" for w in waves
            )
            step_cells = "; ".join(
                f"{s['completion_tokens']}: {_cell(s['seconds'], 3)} / {_cell(s.get('predicted_s'), 3)}" for s in steps
            )
            lines.append(
                f"| {_case(row)} | {first['sequences']} x {first['prompt_tokens']} | {wave_cells or '-'} | "
                f"{step_cells or row['timed'].get('training_error', '-')} |"
            )
    planned = [row for row in report["probes"] if isinstance((row.get("timed") or {}).get("planned"), dict)]
    if planned:
        lines += [
            "",
            "## Time at the plan's shape",
            "",
            "Seconds, measured / predicted, at the shape the plan decides on for the model on this card "
            "(transformers generating: the kit has no vLLM): one wave of its whole generation batch and one step "
            "of its micro-batch, each at the longest completion the step-time model charges there, prompts "
            "as long as the plan expects. Timed with the probe's LoRA rank and checkpointing.",
            "",
            "| architecture | path | precision | plan | wave: sequences x prompt, tokens, measured / predicted | "
            "step: micro-batch x prompt, tokens, measured / predicted |",
            "|---|---|---|---|---|---|",
        ]
        for row in planned:
            shape = row["timed"]["planned"]
            cells = []
            for kind in ("generation", "training"):
                done = shape.get(kind) or []
                cells.append(
                    "; ".join(
                        f"{e['sequences']} x {e['prompt_tokens']}, {e['completion_tokens']}: "
                        f"{_cell(e['seconds'], 3)} / {_cell(e.get('predicted_s'), 3)}"
                        for e in done
                    )
                    or shape.get(f"{kind}_error")
                    or shape.get("why")
                    or "-"
                )
            lines.append(f"| {_case(row)} | {shape['plan'].get('profile', '-')} | {cells[0]} | {cells[1]} |")
    oom = report["oom_fallback"]
    lines += ["", "## Out of memory, read and fallen back from", ""]
    if oom.get("status") in (None, "not run", "left out", PENDING):
        lines.append(
            f"{'Left out' if oom.get('status') == 'left out' else 'Not run'}: {oom.get('why', 'not reached')}."
        )
    else:
        lines += [
            f"{'Injected (no CUDA on this machine)' if oom.get('injected') else 'A genuine CUDA OOM'}: "
            f"status {oom.get('status')}, exit {oom.get('exit')}, {oom.get('seconds', 0):.0f} s"
            + (f", optimizer {oom['optim']}, {oom['path']} path" if oom.get("optim") else "")
            + ".",
            "",
        ]
        for attempt in oom.get("attempts", []):
            read = (
                f", {attempt['site']} asked {attempt['asked_gib']:.3f} GiB with {attempt['free_gib']:.3f} free"
                if attempt.get("site") and attempt.get("asked_gib") is not None
                else ""
            )
            lines.append(
                f"- {attempt.get('profile')} (batch {attempt.get('batch')} x {attempt.get('accumulation')}): "
                f"{attempt.get('status')}{read}"
            )
        for decision in oom.get("decisions", []):
            lines.append(f"- supervisor: {decision}")
    if report["nvml_against_torch"]:
        lines += [
            "",
            "## NVML against torch",
            "",
            "| probe | NVML used | torch reserved peak | outside torch |",
            "|---|---|---|---|",
        ]
        for row in report["nvml_against_torch"]:
            lines.append(
                f"| {row['case']} | {row['nvml_used_gib']:.2f} | {row['torch_reserved_gib']:.2f} | "
                f"{row['outside_torch_gib']:.2f} |"
            )
    elif report["card"] == "cpu":
        lines += ["", "NVML against torch: no GPU here."]
    lines += ["", "## Not measured here", ""]
    lines += [f"- {term}" for term in report.get("unmeasured", UNMEASURED)]
    lines += ["", "docs/measurement.md says how each is estimated instead."]
    return "\n".join(lines) + "\n"


def write_report(report: dict, out_dir: Path) -> tuple[Path, Path]:
    """<card>.json and <card>.md, each replaced whole (written beside, then renamed): a run stopped at any
    moment leaves the last complete table."""
    stem = card_slug(report["card"])
    json_path, md_path = out_dir / f"{stem}.json", out_dir / f"{stem}.md"
    report["nvml_against_torch"] = nvml_against_torch(report["probes"])
    report.setdefault("unmeasured", list(UNMEASURED))
    for path, text in ((json_path, json.dumps(report, indent=2) + "\n"), (md_path, markdown(report))):
        staging = path.with_name(f".{path.name}.writing")
        staging.write_text(text, encoding="utf-8")
        staging.replace(path)
    return json_path, md_path


def previous_report(out_dir: Path, card: str, now_versions: dict, fresh: bool) -> tuple[dict | None, str]:
    """This card's report in `out_dir` to continue, and a line saying what was kept (or why not)."""
    path = out_dir / f"{card_slug(card)}.json"
    if fresh or not path.is_file():
        return None, "a fresh report" + (" (--fresh)" if fresh and path.is_file() else "")
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return None, f"a fresh report ({path} cannot be read: {exc})"
    if not isinstance(old, dict) or old.get("report_version") != REPORT_VERSION:
        return None, f"a fresh report ({path} is from another version of the kit)"
    changed = [n for n in SAME_LIBRARIES if (old.get("versions") or {}).get(n) != now_versions.get(n)]
    if changed:
        return None, f"a fresh report ({path} was measured with other {', '.join(changed)})"
    kept = sum(1 for row in old.get("probes", []) if row.get("status") in MEASURED)
    return old, f"continuing {path} ({kept} probe(s) kept; --fresh measures them again)"


def kept_rows(old: dict | None) -> dict:
    return {case_key(row): row for row in (old or {}).get("probes", []) if row.get("status") in MEASURED}
