"""Reward model memory on the CPU: how much a process grows to load a sequence-classification reward model
(`rewards: {model:FOLDER: w}`, rewards.model) and to score one step's batch with it, against the planner's
estimate (launcher.memory.parts.reward_model_gib, where it exists).

    python benchmarks/reward_model_memory.py [--completions N] [--tokens T] [--no-large] [--json] [--markdown FILE]

Models, both built offline with random weights (memory does not depend on the weights' values): the tiny reward
model (tiny_model.reward_model) and a Llama-shaped one of about 110M parameters built from a config. Each is
measured in a fresh process: the resident set once torch, transformers and the model's modelling code are
imported is the baseline; the load's peak and what it keeps, then the peak while it scores N completions of T
tokens each (rewards.model's batches), are read against it. Peaks are sampled every millisecond and checked
against the kernel's high-water mark (ru_maxrss) where that rose during the phase.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MIB = 1024**2
GIB = 1024**3
# A Llama-shaped classifier of about 110M parameters (GPT-2 small's width and depth, a 32k vocabulary)
LARGE: dict[str, Any] = {
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "num_key_value_heads": 12,
    "intermediate_size": 2048,
    "vocab_size": 32000,
    "max_position_embeddings": 2048,
}


class PeakSampler:
    """The largest resident set seen between start() and stop(), sampled every millisecond."""

    def __init__(self):
        import psutil

        self._process = psutil.Process()
        self._stop = threading.Event()
        self.peak = 0

    def __enter__(self):
        self.peak = self._process.memory_info().rss
        self._maxrss_before = _maxrss()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self._process.memory_info().rss)
            time.sleep(0.001)

    def __exit__(self, *exc_info):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._process.memory_info().rss)
        if _maxrss() > self._maxrss_before:  # the kernel saw a new high inside the phase: that is its peak
            self.peak = max(self.peak, _maxrss())
        return False


def _maxrss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def _rss() -> int:
    import psutil

    return psutil.Process().memory_info().rss


def batch_texts(tokenizer, completions: int, tokens: int) -> tuple[list[str], int]:
    """`completions` texts of `tokens` tokens each (digits and words, varied per text), and the length the
    tokenizer reads back for the first."""
    texts = []
    for i in range(completions):
        unit = f"<reasoning>\n{i} plus {i + 1} is {2 * i + 1}, and\n</reasoning>\n"
        text = unit
        while len(tokenizer(text, add_special_tokens=False)["input_ids"]) < tokens:
            text += unit
        ids = tokenizer(text, add_special_tokens=False)["input_ids"][:tokens]
        texts.append(tokenizer.decode(ids))
    return texts, len(tokenizer(texts[0], add_special_tokens=False)["input_ids"])


def measure(folder: str, completions: int, tokens: int) -> dict:
    """In this (fresh) process: the baseline, the load and the scoring of one batch, in bytes."""
    import importlib

    import torch
    import transformers  # noqa: F401 - imported before the baseline: the policy's process has it already

    from rewards import model as reward_model

    config = json.loads((Path(folder) / "config.json").read_text())
    family = config.get("model_type", "")
    try:  # the model's modelling code, as the policy of the same family has imported it already
        importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    except ImportError:
        pass
    torch.set_num_threads(torch.get_num_threads())
    baseline = _rss()
    with PeakSampler() as load_peak:
        reward = reward_model.load(f"model:{folder}")
    after_load = _rss()
    loaded = reward_model._cache[str(Path(folder).resolve())]
    weights = sum(p.numel() * p.element_size() for p in loaded.model.parameters())
    params = sum(p.numel() for p in loaded.model.parameters())
    texts, read_tokens = batch_texts(loaded.tokenizer, completions, tokens)
    before_score = _rss()
    with PeakSampler() as score_peak:
        scores = reward(prompts=[""] * len(texts), completions=texts)
    return {
        "folder_name": Path(folder).name,
        "params": params,
        "weights_bytes": weights,
        "element": next(loaded.model.parameters()).element_size(),
        "completions": completions,
        "tokens": read_tokens,
        "batch_size": reward_model.BATCH_SIZE,
        "baseline_bytes": baseline,
        "load_peak_bytes": load_peak.peak - baseline,
        "load_kept_bytes": after_load - baseline,
        "score_peak_bytes": score_peak.peak - before_score,
        "peak_bytes": max(load_peak.peak, score_peak.peak) - baseline,
        "scored": len([s for s in scores if s != 0.0]),
    }


def estimate_gib(folder: Path, completions: int, tokens: int, element: int) -> tuple[float, float] | None:
    """The planner's figures for this model, (weights, activations) in GiB, or None where launcher.memory.parts
    has no reward_model_gib."""
    try:
        from launcher.memory.parts import reward_model_gib
    except ImportError:
        return None
    from profiles.config_json import read_config

    arch = read_config(folder / "config.json", folder.name)
    weights, activations = reward_model_gib(arch, completions, tokens, element, host=True)
    return float(weights), float(activations)


def build_large(root: Path, tokenizer_folder: Path) -> Path:
    """The ~110M Llama-shaped classifier with random weights, saved beside the tiny reward model's tokenizer
    (its ids all lie inside the larger vocabulary)."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForSequenceClassification

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_folder))
    config = LlamaConfig(**LARGE, tie_word_embeddings=False, pad_token_id=tokenizer.pad_token_id, bos_token_id=None)
    config.num_labels = 1
    torch.manual_seed(0)
    model = LlamaForSequenceClassification(config)
    folder = root / "llama-110m-rm"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def run_child(folder: Path, completions: int, tokens: int) -> dict:
    command = [sys.executable, __file__, "--measure", str(folder), "--completions", str(completions)]
    result = subprocess.run(
        [*command, "--tokens", str(tokens)],
        capture_output=True,
        text=True,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
    )
    if result.returncode != 0:
        raise SystemExit(f"measuring {folder.name} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def markdown(rows: list[dict], completions: int, tokens: int) -> str:
    def mib(value: float | None) -> str:
        return "-" if value is None else f"{value / MIB:.1f}"

    lines = [
        "# Reward model memory on the CPU",
        "",
        f"`python benchmarks/reward_model_memory.py --markdown benchmarks/reward_model_memory.md`: a reward model "
        f"(`rewards: {{model:FOLDER: w}}`) loaded in a fresh process and scoring one step's batch, {completions} "
        f"completions of {tokens} tokens, in batches of {rows[0]['batch_size']}, on the CPU in float32. Growth is "
        "against the resident set once torch, transformers and the model's modelling code are imported (what the "
        "policy's process holds already).",
        "",
        f"Machine: {os.cpu_count()} CPU cores ({platform.machine()}), Python {platform.python_version()}.",
        "",
        "| model | parameters | weights MiB (tensors / estimate) | load peak MiB | kept after load MiB | "
        "scoring peak MiB | activations estimate MiB | peak MiB | estimate MiB | estimate / peak |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        estimate = row["estimate_gib"] * GIB if row["estimate_gib"] is not None else None
        ratio = f"{estimate / row['peak_bytes']:.2f}" if estimate else "-"
        weights_estimate = row["estimate_weights_gib"] * GIB if estimate is not None else None
        activations_estimate = row["estimate_activations_gib"] * GIB if estimate is not None else None
        lines.append(
            f"| {row['model']} | {row['params'] / 1e6:.2f}M | {mib(row['weights_bytes'])} / {mib(weights_estimate)} | "
            f"{mib(row['load_peak_bytes'])} | {mib(row['load_kept_bytes'])} | {mib(row['score_peak_bytes'])} | "
            f"{mib(activations_estimate)} | {mib(row['peak_bytes'])} | {mib(estimate)} | {ratio} |"
        )
    lines += [
        "",
        "Load peak: the most the process grew while loading; kept: what it still holds after. On the CPU the "
        "safetensors file is mapped, not read: the weights become resident as the first pass touches them, so they "
        "show in the scoring peak, and the embedding rows no token of the batch uses never do (the larger model's "
        "32k-row table is read by a tokenizer of a few hundred tokens). Scoring peak: the growth over the loaded "
        "model while one batch is scored: those weights, the activations of one pass of the batch size, and what "
        "the C allocator keeps of the freed ones. Peak: the largest growth of both phases over the baseline, what "
        "the estimate is meant to cover. The estimate column is "
        "launcher.memory.parts.reward_model_gib(arch, completions, tokens, element), weights plus activations; "
        "'-' where it is not there.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--completions", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--no-large", action="store_true", help="the tiny reward model only")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # the child: measure this folder, print JSON
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.completions, args.tokens)))
        return
    from tiny_model.reward_model import ensure_tiny_reward_model

    rows = []
    with tempfile.TemporaryDirectory() as root:
        tiny = ensure_tiny_reward_model(root=Path(root))
        models = [("tiny reward model", tiny)]
        if not args.no_large:
            models.append(("Llama-shaped, random", build_large(Path(root), tiny)))
        for label, folder in models:
            row = run_child(folder, args.completions, args.tokens)
            row["model"] = label
            parts = estimate_gib(folder, args.completions, row["tokens"], row["element"])
            row["estimate_weights_gib"], row["estimate_activations_gib"] = parts or (None, None)
            row["estimate_gib"] = sum(parts) if parts else None
            rows.append(row)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for row in rows:
            estimate = "-" if row["estimate_gib"] is None else f"{row['estimate_gib'] * 1024:.1f} MiB"
            print(
                f"{row['model']}: {row['params'] / 1e6:.2f}M params, load peak {row['load_peak_bytes'] / MIB:.1f} MiB"
                f" (kept {row['load_kept_bytes'] / MIB:.1f}), scoring {row['completions']}x{row['tokens']} tokens "
                f"+{row['score_peak_bytes'] / MIB:.1f} MiB, peak {row['peak_bytes'] / MIB:.1f} MiB; estimate {estimate}"
            )
    if args.markdown:
        args.markdown.write_text(markdown(rows, args.completions, args.tokens), encoding="utf-8")


if __name__ == "__main__":
    main()
