"""WHAT a model's own tokenizer makes of text, read from its files when they are on this machine (a local model
folder, or the Hugging Face cache; nothing is downloaded): the characters per token of worked maths, and what
its chat template does about thinking (a switch, or a block it always opens). The planner takes these over the
per-family estimates (profiles.catalog and profiles.architecture.thinking_of) where it finds them.

The `tokenizers` library reads tokenizer.json (Rust; no torch). A measured rate is kept in the project's cache,
keyed by the file's path, size and date, so that a plan reads a large tokenizer once.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from contract.environment import cache_root
from contract.safe_write import write_atomic
from profiles.catalog import hf_cache_dirs, is_tiny
from tasks.prompts import THINKS_NEVER
from tasks.prompts import template_thinking as template_thinking_of
from tasks.reference_lengths import WORKED_SAMPLE

RATES_FILE = "tokenizer-rates.json"
TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json")  # transformers 5 saves the template beside


def model_file(model: str, name: str) -> Path | None:
    """A file of `model` on this machine: in its folder, else in the newest snapshot of the Hugging Face cache
    that holds it (repository matched whatever its case); None when it is not here."""
    if not model or is_tiny(model):
        return None
    folder = Path(model).expanduser()
    if folder.is_dir():
        path = folder / name
        return path if path.is_file() else None
    if "/" not in model or model.startswith((".", "/", "~")):
        return None
    wanted = "models--" + model.strip().strip("/").replace("/", "--").lower()
    for cache in hf_cache_dirs():
        if not cache.is_dir():
            continue
        for repo in cache.iterdir():
            if repo.name.lower() != wanted:
                continue
            ref = repo / "refs" / "main"
            if ref.is_file():
                path = repo / "snapshots" / ref.read_text(encoding="ascii").strip() / name
                if path.is_file():
                    return path
            found = sorted((repo / "snapshots").glob(f"*/{name}"), key=lambda p: p.stat().st_mtime, reverse=True)
            if found:
                return found[0]
    return None


def _key(path: Path) -> str:
    stat = path.stat()
    return f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"


def _measure(path: Path) -> float:
    from tokenizers import Tokenizer

    tokens = Tokenizer.from_file(str(path)).encode(WORKED_SAMPLE, add_special_tokens=False).ids
    return round(len(WORKED_SAMPLE) / max(1, len(tokens)), 3)


@lru_cache(maxsize=32)
def measured_chars_per_token(model: str) -> tuple[float, str] | None:
    """(characters per token of worked maths under `model`'s own tokenizer, the file read), or None when its
    tokenizer.json is not on this machine or cannot be read."""
    path = model_file(model, "tokenizer.json")
    if path is None:
        return None
    rates_path = cache_root() / RATES_FILE
    try:
        rates = json.loads(rates_path.read_text(encoding="utf-8"))
        if not isinstance(rates, dict):
            rates = {}
    except (OSError, ValueError):
        rates = {}
    key = _key(path)
    rate = rates.get(key)
    if not isinstance(rate, (int, float)) or isinstance(rate, bool) or not 0.5 <= rate <= 20:
        try:
            rate = _measure(path)
        except Exception:  # noqa: BLE001 - a file the library cannot read: the estimate serves
            return None
        rates[key] = rate
        try:
            rates_path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(rates_path, json.dumps(rates, indent=1) + "\n")
        except OSError:
            pass  # measured again next time
    return float(rate), str(path)


def _template_texts(model: str) -> list[str]:
    """The chat templates among `model`'s files on this machine (their own files, and tokenizer_config.json's)."""
    texts = []
    for name in TEMPLATE_FILES:
        path = model_file(model, name)
        if path is not None:
            try:
                texts.append(path.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError):
                continue
    config = model_file(model, "tokenizer_config.json")
    if config is not None:
        try:
            template = json.loads(config.read_text(encoding="utf-8")).get("chat_template")
        except (OSError, ValueError, AttributeError):
            template = None
        if isinstance(template, (str, list)):
            texts.append(json.dumps(template) if isinstance(template, list) else template)
    return texts


@lru_cache(maxsize=32)
def template_thinking(model: str) -> str | None:
    """What `model`'s own chat template (its files on this machine) does about thinking
    (tasks.prompts.template_thinking; where it has several, the first that thinks); None when the template is
    not here."""
    texts = _template_texts(model)
    if not texts:
        return None
    kinds = [template_thinking_of(text) for text in texts]
    return next((kind for kind in kinds if kind != THINKS_NEVER), THINKS_NEVER)
