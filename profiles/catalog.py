"""WHAT a model is made of: the shape facts the memory estimator needs, known offline.

A catalogue of the models the profiles use (from their public config.json files), found from a hub id
whatever its case, with or without Unsloth's `unsloth/` mirror prefix and its `-bnb-4bit` /
`-unsloth-bnb-4bit` pre-quantised suffixes. Any other model is read from a config.json: a local folder,
then the Hugging Face cache, then (only when online) the hub.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

from contract.errors import UsageError


@dataclass(frozen=True)
class Architecture:
    name: str               # the hub id (or folder) it was resolved as
    params: int             # published parameter count (the computed one is `computed_params`)
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied_embeddings: bool
    family: str = ""        # model_type in config.json: llama, qwen2, qwen3, gemma3_text, ...
    source: str = "catalogue"

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    def module_shapes(self) -> dict[str, tuple[int, int]]:
        """(in, out) features of each linear layer of one decoder block."""
        h, q, kv, i = self.hidden, self.q_dim, self.kv_dim, self.intermediate
        return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
                "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}

    @cached_property  # the planner asks for it thousands of times a plan; the shape never changes
    def linear_params(self) -> int:
        """Parameters of every block's linear layers: what 4-bit quantisation shrinks."""
        return self.layers * sum(a * b for a, b in self.module_shapes().values())

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def lm_head_params(self) -> int:
        """A separate output matrix only when the embeddings are not tied."""
        return 0 if self.tied_embeddings else self.vocab * self.hidden

    @property
    def norm_params(self) -> int:
        return self.layers * 2 * self.hidden + self.hidden

    @cached_property
    def computed_params(self) -> int:
        return self.linear_params + self.embedding_params + self.lm_head_params + self.norm_params

    def kv_bytes_per_token(self, bytes_per_value: float = 2.0) -> float:
        """Keys and values of one token across all layers."""
        return 2 * self.layers * self.kv_dim * bytes_per_value

    def lora_params(self, rank: int, target_modules) -> int:
        """r x (d_in + d_out) per adapted matrix per layer; unknown module names add nothing."""
        shapes = self.module_shapes()
        return self.layers * sum(rank * sum(shapes[m]) for m in target_modules if m in shapes)


def _arch(name, params, hidden, layers, heads, kv_heads, head_dim, intermediate, vocab, tied, family):
    return Architecture(name=name, params=int(params), hidden=hidden, layers=layers, heads=heads,
                        kv_heads=kv_heads, head_dim=head_dim, intermediate=intermediate, vocab=vocab,
                        tied_embeddings=tied, family=family)


# The offline CPU model (tiny_model/build.py builds exactly this shape). Its vocabulary is the byte-level
# BPE tokenizer's 512 tokens; the few special tokens the trainer adds are left out here.
TINY = _arch("tiny", 0, 64, 2, 4, 2, 16, 256, 512, True, "llama")
TINY = replace(TINY, params=TINY.computed_params)

CATALOGUE: tuple[Architecture, ...] = (
    _arch("google/gemma-3-1b-it", 1.00e9, 1152, 26, 4, 1, 256, 6912, 262144, True, "gemma3_text"),
    _arch("google/gemma-3-4b-it", 3.88e9, 2560, 34, 8, 4, 256, 10240, 262208, True, "gemma3"),
    _arch("meta-llama/Llama-3.2-1B-Instruct", 1.24e9, 2048, 16, 32, 8, 64, 8192, 128256, True, "llama"),
    _arch("meta-llama/Llama-3.2-3B-Instruct", 3.21e9, 3072, 28, 24, 8, 128, 8192, 128256, True, "llama"),
    _arch("meta-llama/Llama-3.1-8B-Instruct", 8.03e9, 4096, 32, 32, 8, 128, 14336, 128256, False, "llama"),
    _arch("Qwen/Qwen2.5-0.5B-Instruct", 0.49e9, 896, 24, 14, 2, 64, 4864, 151936, True, "qwen2"),
    _arch("Qwen/Qwen2.5-1.5B-Instruct", 1.54e9, 1536, 28, 12, 2, 128, 8960, 151936, True, "qwen2"),
    _arch("Qwen/Qwen2.5-3B-Instruct", 3.09e9, 2048, 36, 16, 2, 128, 11008, 151936, True, "qwen2"),
    _arch("Qwen/Qwen2.5-7B-Instruct", 7.62e9, 3584, 28, 28, 4, 128, 18944, 152064, False, "qwen2"),
    _arch("Qwen/Qwen2.5-14B-Instruct", 14.7e9, 5120, 48, 40, 8, 128, 13824, 152064, False, "qwen2"),
    _arch("Qwen/Qwen3-0.6B", 0.60e9, 1024, 28, 16, 8, 128, 3072, 151936, True, "qwen3"),
    _arch("Qwen/Qwen3-1.7B", 1.72e9, 2048, 28, 16, 8, 128, 6144, 151936, True, "qwen3"),
    _arch("Qwen/Qwen3-4B", 4.02e9, 2560, 36, 32, 8, 128, 9728, 151936, True, "qwen3"),
    _arch("Qwen/Qwen3-8B", 8.19e9, 4096, 36, 32, 8, 128, 12288, 151936, False, "qwen3"),
    _arch("Qwen/Qwen3-14B", 14.8e9, 5120, 40, 40, 8, 128, 17408, 151936, False, "qwen3"),
    _arch("mistralai/Mistral-7B-Instruct-v0.3", 7.25e9, 4096, 32, 32, 8, 128, 14336, 32768, False, "mistral"),
    _arch("microsoft/phi-4", 14.7e9, 5120, 40, 40, 10, 128, 17920, 100352, False, "phi3"),
)

# Model types vLLM refuses to run in float16 ("The model type ... does not support float16. Reason: Numerical
# instability", vllm/config/model.py _FLOAT16_NOT_SUPPORTED_MODELS, vLLM 0.32). Below compute capability 8.0
# Unsloth hands vLLM float16 (no bfloat16 there) and vLLM refuses these at start: tests/rehearsal/test_vllm_glue.py keeps
# this list equal to vLLM's.
VLLM_FLOAT16_REFUSED = ("gemma2", "gemma3", "gemma3_text", "glm4")


def vllm_refuses(arch: Architecture, bf16: bool) -> str | None:
    """Why vLLM will not start for this model on a card with (bf16=True) or without bfloat16, else None."""
    if bf16 or arch.family not in VLLM_FLOAT16_REFUSED:
        return None
    return f"vLLM refuses float16 for {arch.family} and this card has no bfloat16 (compute capability < 8.0)"


# Characters of English worked-maths text per token, by tokenizer family (model_type; Llama's by its vocabulary).
# Estimates, not measured here (no tokenizer files offline): English BPE runs about 4 characters a token, and
# maths text less, the more so where the tokenizer splits numbers into single digits (Qwen, Mistral, Gemma,
# Llama 2) rather than groups of up to three (Llama 3, Phi-4's and gpt-oss's tiktoken-style vocabularies).
# Held against the mean completion lengths published GRPO runs log on GSM8K (docs/planning.md).
CHARS_PER_TOKEN = {"llama3": 3.6, "llama2": 2.9, "mistral": 2.9, "qwen": 3.2, "gemma": 3.3, "phi": 3.6,
                   "gpt_oss": 3.7}
CHARS_PER_TOKEN_DEFAULT = 3.0    # an unknown tokenizer: more tokens, so a cap errs long


def chars_per_token(arch: Architecture) -> tuple[float, str]:
    """(characters per token of worked-maths text under the model's tokenizer, the family it was taken for)."""
    family = arch.family.lower()
    if family == "llama":
        key = "llama3" if arch.vocab >= 100_000 else "llama2"
    elif family.startswith("qwen"):
        key = "qwen"
    elif family.startswith("gemma"):
        key = "gemma"
    elif family.startswith("phi"):
        key = "phi"
    else:
        key = family if family in CHARS_PER_TOKEN else ""
    if not key:
        return CHARS_PER_TOKEN_DEFAULT, f"unknown tokenizer ({arch.family or 'no model_type'})"
    return CHARS_PER_TOKEN[key], key


# Unsloth's mirrors rename a few models (Meta-Llama-3.1-...); these spellings map to the same entry.
ALIASES = {
    "meta-llama-3.1-8b-instruct": "llama-3.1-8b-instruct",
}
QUANTISED_SUFFIXES = ("-unsloth-bnb-4bit", "-bnb-4bit")


def _short(name: str) -> str:
    return name.rsplit("/", 1)[-1].lower()


_BY_SHORT_NAME = {_short(a.name): a for a in CATALOGUE}


def catalogue_key(model: str) -> str:
    """The name part of a hub id, lower case, without the unsloth/ prefix or a 4-bit suffix."""
    key = _short(model.strip())
    for suffix in QUANTISED_SUFFIXES:
        if key.endswith(suffix):
            key = key[: -len(suffix)]
            break
    return ALIASES.get(key, key)


def from_config(config: dict, name: str, source: str) -> Architecture:
    """Architecture facts from a transformers config.json (multimodal configs: their text part)."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    try:
        hidden = int(text["hidden_size"])
        layers = int(text["num_hidden_layers"])
        heads = int(text["num_attention_heads"])
        intermediate = int(text["intermediate_size"])
        vocab = int(text.get("vocab_size") or config["vocab_size"])
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"{source}: config.json lacks {exc} (fix: point `model` at a causal language model)")
    kv_heads = int(text.get("num_key_value_heads") or heads)
    head_dim = int(text.get("head_dim") or hidden // heads)
    # transformers' own default is tied; Llama-family configs state it explicitly when untied.
    tied = bool(config.get("tie_word_embeddings", text.get("tie_word_embeddings", True)))
    arch = Architecture(name=name, params=0, hidden=hidden, layers=layers, heads=heads, kv_heads=kv_heads,
                        head_dim=head_dim, intermediate=intermediate, vocab=vocab, tied_embeddings=tied,
                        family=str(text.get("model_type") or config.get("model_type") or ""), source=source)
    return replace(arch, params=arch.computed_params)


def _read_config(path: Path, name: str) -> Architecture:
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: cannot read the model's config.json: {exc}")
    if not isinstance(config, dict):
        raise UsageError(f"{path}: config.json is not a JSON object")
    return from_config(config, name, str(path))


def hf_cache_dirs() -> list[Path]:
    """Where huggingface_hub keeps downloaded repositories, in its own order of precedence."""
    if os.environ.get("HF_HUB_CACHE"):
        return [Path(os.environ["HF_HUB_CACHE"]).expanduser()]
    if os.environ.get("HUGGINGFACE_HUB_CACHE"):
        return [Path(os.environ["HUGGINGFACE_HUB_CACHE"]).expanduser()]
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface")
    return [Path(home).expanduser() / "hub"]


def _cached_config(model: str) -> Path | None:
    """config.json of `model` in the HF cache (repository folder matched case-insensitively)."""
    wanted = "models--" + model.strip().strip("/").replace("/", "--").lower()
    for cache in hf_cache_dirs():
        if not cache.is_dir():
            continue
        for repo in cache.iterdir():
            if repo.name.lower() != wanted:
                continue
            snapshots = repo / "snapshots"
            ref = repo / "refs" / "main"
            if ref.is_file():
                candidate = snapshots / ref.read_text(encoding="ascii").strip() / "config.json"
                if candidate.is_file():
                    return candidate
            found = sorted(snapshots.glob("*/config.json"), key=lambda p: p.stat().st_mtime, reverse=True)
            if found:
                return found[0]
    return None


def hub_allowed() -> bool:
    """The hub is asked only when the user has not said offline (HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE)."""
    return not any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
                   for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def _hub_config(model: str) -> dict:
    """config.json from the hub; the token (HF_TOKEN), if any, is sent and never shown."""
    from urllib.request import Request, urlopen

    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    request = Request(f"{endpoint}/{model}/resolve/main/config.json")
    token = os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urlopen(request, timeout=10) as response:  # noqa: S310 - a fixed https endpoint
        return json.loads(response.read().decode("utf-8"))


def resolve(model: str, allow_hub: bool | None = None) -> Architecture:
    """The architecture of `model`: `tiny`, a catalogue hub id, a local folder, the HF cache, the hub."""
    if not model or not model.strip():
        raise UsageError("model: empty name (fix: give a hub id such as unsloth/Llama-3.2-3B-Instruct)")
    model = model.strip()
    tried: list[str] = []
    if model.lower() == "tiny":
        return TINY

    folder = Path(model).expanduser()
    if folder.is_dir():
        if (folder / "config.json").is_file():
            return _read_config(folder / "config.json", model)
        tried.append(f"local folder {folder} (it has no config.json)")
    else:
        tried.append("a local folder of that name (none)")

    key = catalogue_key(model)
    if key in _BY_SHORT_NAME:
        return _BY_SHORT_NAME[key]
    tried.append(f"the catalogue of {len(CATALOGUE)} models as '{key}'")

    if "/" in model and not model.startswith((".", "/", "~")):
        cached = _cached_config(model)
        if cached:
            return _read_config(cached, model)
        tried.append(f"the Hugging Face cache in {', '.join(map(str, hf_cache_dirs()))}")
        if allow_hub is None:
            allow_hub = hub_allowed()
        if allow_hub:
            try:
                return from_config(_hub_config(model), model, f"hub:{model}")
            except UsageError:
                raise
            except Exception as exc:  # noqa: BLE001 - any network or HTTP failure: report and stop
                tried.append(f"the hub ({type(exc).__name__}: {exc})")
        else:
            tried.append("the hub (skipped: offline)")
    raise UsageError(f"model {model!r}: unknown architecture; tried {'; '.join(tried)} "
                     "(fix: use a model from the catalogue, e.g. unsloth/Llama-3.2-3B-Instruct, "
                     "or a folder holding its config.json)")
