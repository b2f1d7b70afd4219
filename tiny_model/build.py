"""The offline `tiny` model: a byte-level BPE tokenizer trained on the task's own text (one token per
digit) and a small Llama-shaped model, warm-started by a short supervised pass on worked solutions
(tiny_model/warm_start.py), built once (seeded) and cached, so CPU runs and tests need no download.

Beside the weights, `warm_start.json` records the held-out accuracy of the random model and of the
warm-started one, measured at build time, so a run's report can show random -> warm start -> after GRPO, and
the warm start's own checks (where it stopped, and why).

transformers is imported inside functions only: the trainer imports Unsloth first, then calls this.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from contract.environment import cache_root
from contract.safe_write import publish_folder
from rewards.parse import TAGS as XML_TAGS  # the answer format the rewards score

ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")
EOS_TOKEN = "<|end|>"
PAD_TOKEN = "<|pad|>"
# The template has a thinking switch read by the name Qwen3's reads (tasks.prompts.THINKING_SWITCH) and, as
# Qwen3's, thinks unless told false: the generation prompt then opens a <think> block. The project renders with
# it false unless a profile says otherwise, which is the prompt the warm start teaches; so the CPU runs take the
# same path (the switch found in the template, passed to every rendering) that a Qwen3 model takes on a GPU.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\n' + message['content'] + '<|end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}"
    "{% if enable_thinking is not defined or enable_thinking %}{{ '<think>\n' }}{% endif %}"
    "{% endif %}"
)
# Bump when the build below changes, so old caches are not reused.
BUILD_VERSION = 6
WARM_START_FILE = "warm_start.json"
CORPUS_ROWS = 2000


@dataclass(frozen=True)
class TinyShape:
    hidden_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 16
    intermediate_size: int = 256
    vocab_size: int = 512  # BPE vocabulary incl. special tokens; the XML tags are added on top
    tie_word_embeddings: bool = True
    initializer_range: float = 0.02  # the warm start, not a large random init, gives the policy its shape
    max_position_embeddings: int = 2048


def tiny_shape() -> TinyShape:
    """The shape the launcher's catalogue gives `tiny` (its estimate must describe this model)."""
    shape = TinyShape()
    try:
        from profiles.catalog import TINY
    except Exception:  # the catalogue is optional here: the defaults above are the same numbers
        return shape
    aliases = {
        "hidden_size": ("hidden_size", "hidden"),
        "num_hidden_layers": ("num_hidden_layers", "layers", "num_layers"),
        "num_attention_heads": ("num_attention_heads", "heads", "num_heads"),
        "num_key_value_heads": ("num_key_value_heads", "kv_heads", "num_kv_heads"),
        "head_dim": ("head_dim",),
        "intermediate_size": ("intermediate_size", "intermediate"),
        "vocab_size": ("vocab_size", "vocab"),
        "tie_word_embeddings": ("tie_word_embeddings", "tied_embeddings", "tied"),
    }
    values = {}
    for field_name, names in aliases.items():
        for name in names:
            value = getattr(TINY, name, None)
            if value is not None:
                values[field_name] = type(getattr(shape, field_name))(value)
                break
    return TinyShape(**{**asdict(shape), **values})


def _corpus(dataset: str, seed: int) -> list[str]:
    """Text the tokenizer learns from: the task's prompts and answers, and the XML answer format."""
    from tasks import load_task

    rows = load_task(dataset, "train", limit=CORPUS_ROWS, seed=seed)
    texts = []
    for row in rows:
        prompt = row["prompt"]
        texts.extend([prompt] if isinstance(prompt, str) else [message["content"] for message in prompt])
        answer = str(row["answer"])
        texts.append(f"<reasoning>\n{answer}\n</reasoning>\n<answer>\n{answer}\n</answer>")
    return texts


def _build_tokenizer(texts: list[str], shape: TinyShape):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    # One token per digit: numbers then share their pieces, which is what makes sums learnable.
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=shape.vocab_size,
        special_tokens=[PAD_TOKEN, EOS_TOKEN, *ROLE_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(texts, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        additional_special_tokens=list(ROLE_TOKENS),
    )
    # Ordinary added tokens, not special ones: TRL decodes completions with skip_special_tokens=True,
    # which would erase special tokens before the rewards see them. Left to BPE, each tag would take
    # several tokens and a random model would never write one.
    tokenizer.add_tokens(list(XML_TAGS))
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.padding_side = "left"
    return tokenizer


def llama_config(tokenizer, shape: TinyShape, **changes):
    """The tiny shape as a LlamaConfig over `tokenizer`'s vocabulary (`changes`: what a variant sets otherwise)."""
    from transformers import LlamaConfig

    values = {
        "vocab_size": len(tokenizer),
        "hidden_size": shape.hidden_size,
        "intermediate_size": shape.intermediate_size,
        "num_hidden_layers": shape.num_hidden_layers,
        "num_attention_heads": shape.num_attention_heads,
        "num_key_value_heads": shape.num_key_value_heads,
        "head_dim": shape.head_dim,
        "max_position_embeddings": shape.max_position_embeddings,
        "initializer_range": shape.initializer_range,
        "tie_word_embeddings": shape.tie_word_embeddings,
        "bos_token_id": None,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }
    return LlamaConfig(**{**values, **changes})


def _build_model(tokenizer, shape: TinyShape, seed: int):
    import torch
    from transformers import LlamaForCausalLM

    config = llama_config(tokenizer, shape)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model.to(torch.float32)


def build_key(dataset: str, seed: int, shape: TinyShape, long_answers: bool = False) -> str:
    from tiny_model import program_warm_start, warm_start

    warm_starts = {"arithmetic": warm_start.settings, "programs": program_warm_start.settings}
    spec = {
        "dataset": dataset,
        "seed": seed,
        "shape": asdict(shape),
        "version": BUILD_VERSION,
        "warm_start": warm_starts[dataset]() if dataset in warm_starts else None,
        "rows": CORPUS_ROWS,
        "tags": XML_TAGS,
        "template": CHAT_TEMPLATE,
    }
    if long_answers:  # the variant's own key; the default model's stays what it was
        spec["answers"] = warm_start.long_settings()
    if dataset not in ("gsm8k", "arithmetic", "programs"):
        path = Path(dataset).expanduser()
        spec["file"] = [str(path.resolve()), path.stat().st_mtime_ns if path.exists() else 0]
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]


def ensure_tiny(
    dataset: str = "arithmetic",
    seed: int = 0,
    root: Path | None = None,
    long_answers: bool = False,
    train_warm_start: bool = False,
) -> Path:
    """The folder of the tiny model for this task (built on first use, then reused); `long_answers`: the variant
    warm-started to write long answers (tiny_model.warm_start.long_completion). The warm start's weights come
    from tiny_model/shipped/ where an entry answers this build (the same bytes on every machine), else it is
    trained here; `train_warm_start` trains it here regardless (what the shipped entries are made with)."""
    from tiny_model import shipped

    shape = tiny_shape()
    root = Path(root) if root else cache_root()
    key = build_key(dataset, seed, shape, long_answers)
    target = root / f"tiny-{key}"
    if (target / "config.json").is_file() and (target / "tokenizer.json").is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)
    tokenizer = _build_tokenizer(_corpus(dataset, seed), shape)
    model = _build_model(tokenizer, shape, seed)
    found = None if train_warm_start or long_answers else shipped.find(dataset, seed, key, tokenizer)
    if found is not None:
        record = shipped.load_into(model, *found)
    else:
        record = _warm_start(model, tokenizer, dataset, seed, long_answers)

    def write(staged: Path) -> None:
        model.save_pretrained(staged)
        tokenizer.save_pretrained(staged)
        _pin_tokenizer_class(staged)
        if record is not None:
            (staged / WARM_START_FILE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")

    # Built beside the target and renamed: a concurrent build or an interrupted one never leaves half a model.
    publish_folder(target, write, shared=True)
    return target


def _warm_start(model, tokenizer, dataset: str, seed: int, long_answers: bool = False) -> dict | None:
    """Warm-start the model for a generated task it can learn offline (arithmetic: tiny_model.warm_start;
    programs: tiny_model.program_warm_start) and return the build-time record: held-out accuracy before and
    after, samples, steps and seconds. Other tasks keep the random model (None)."""
    if dataset not in ("arithmetic", "programs"):
        return None
    import time

    import torch

    from tasks import load_task

    if dataset == "programs":
        from tiny_model import program_warm_start as method

        limit, tokens, options = 0, method.HELDOUT_TOKENS, {}
    else:
        from tiny_model import warm_start as method

        limit = method.HELDOUT_ROWS
        tokens = method.LONG_HELDOUT_TOKENS if long_answers else method.HELDOUT_TOKENS
        options = {"long_answers": long_answers}
    threads = torch.get_num_threads()
    # the same thread count on every machine: the sums run in one order whatever the machine's cores. The
    # CPU's vector instruction set still picks the kernels (AVX2 or AVX-512 sum in other orders), so machines
    # of different kinds can stop at other steps: the record names the kind it was built on.
    torch.set_num_threads(method.WARM_START_THREADS)
    try:
        rows = load_task(dataset, "test", limit=limit)
        random_probe = method.measure_heldout(model, tokenizer, rows, tokens)
        started = time.time()
        done = method.train_warm_start(model, tokenizer, seed, **options)
        seconds = round(time.time() - started, 1)
        warm_probe = method.measure_heldout(model, tokenizer, rows, tokens)
    finally:
        torch.set_num_threads(threads)
    return {
        "steps": done["steps"],
        "stopped": done["stopped"],
        "checks": done["checks"],
        "batch": method.WARM_START_BATCH,
        "learning_rate": method.WARM_START_LR,
        "seconds": seconds,
        "held_out": len(rows),
        "long_answers": long_answers,
        "random": random_probe,
        "warm_start": warm_probe,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch": torch.__version__,
    }


def load_tokenizer(folder: Path):
    """A built tiny model's tokenizer, as the runs load it."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))


def read_warm_start(model_path) -> dict | None:
    """The build-time record beside a tiny model (None for any other model)."""
    path = Path(model_path) / WARM_START_FILE
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _pin_tokenizer_class(folder: Path) -> None:
    """Keep the tokenizer's own class: with a llama config.json, AutoTokenizer would otherwise pick the
    Llama tokenizer and its own pre-tokenizer, and the token ids would no longer match the training."""
    path = folder / "tokenizer_config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config["chat_template"] = CHAT_TEMPLATE
    path.write_text(json.dumps(config, indent=2), encoding="utf-8")


def build_record(model_path) -> dict | None:
    """The warm start's figures as a run reports them (random and warm-started held-out accuracy), or None
    beside a model built without one."""
    record = read_warm_start(model_path)
    if not record:
        return None
    # the reading of the weights kept (at the step limit, an earlier check's)
    kept = [c for c in record.get("checks") or [] if c["step"] == record["steps"]]
    return {
        "steps": record["steps"],
        "held_out": record["held_out"],
        "seconds": record["seconds"],
        "random_accuracy": record["random"]["accuracy"],
        "warm_start_accuracy": record["warm_start"]["accuracy"],
        "warm_start_well_formed": record["warm_start"].get("well_formed"),
        "stopped": record.get("stopped"),
        "restated": kept[-1]["restated"] if kept else None,
        "cpu_capability": record.get("cpu_capability"),
        "weights": record.get("weights", "trained"),
    }


def ship(seeds: list[int]) -> None:
    """Train each seed's warm start here, in a fresh cache, and ship its weights (tiny_model/shipped/)."""
    import torch

    from tiny_model import shipped

    with tempfile.TemporaryDirectory() as root:
        for seed in seeds:
            folder = ensure_tiny("arithmetic", seed=seed, root=Path(root), train_warm_start=True)
            path = shipped.write(
                folder, "arithmetic", seed, build_key("arithmetic", seed, tiny_shape()), load_tokenizer(folder)
            )
            record = read_warm_start(folder) or {}
            print(
                f"{path.name}: seed {seed}, {record.get('steps')} steps ({record.get('stopped')}), held-out "
                f"{record.get('warm_start', {}).get('accuracy')} on {torch.backends.cpu.get_cpu_capability()}"
            )


if __name__ == "__main__":
    import argparse

    from tiny_model.shipped import SHIPPED_SEEDS

    parser = argparse.ArgumentParser(prog="python -m tiny_model.build", description="build the tiny model")
    parser.add_argument(
        "--ship", nargs="*", type=int, metavar="SEED", help=f"ship these seeds' warm starts (default {SHIPPED_SEEDS})"
    )
    args = parser.parse_args()
    if args.ship is None:
        print(ensure_tiny())
    else:
        ship(args.ship or list(SHIPPED_SEEDS))
