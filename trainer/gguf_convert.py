"""Runs llama.cpp's convert_hf_to_gguf.py as `python convert_hf_to_gguf.py ARGS` runs it, with one change when
asked for: a tokenizer whose pre-tokenizer llama.cpp does not recognise (it knows them by a hash of their
output, so a model's own new tokenizer, such as the offline tiny model's, is refused) is written with the
pre-tokenizer named instead, and a note says so.

    python trainer/gguf_convert.py CONVERTER PRE_TOKENIZER_OR_EMPTY CONVERTER_ARGS...

Started by trainer.export in a process of its own; it imports nothing of the project.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path


def _fall_back_to(name: str, folder: Path) -> int:
    """Wrap each get_vocab_base_pre of the converter's modules (the script itself, and the `conversion`
    package newer llama.cpp splits it into); the number of classes wrapped."""
    wrapped = 0
    mine = [
        m for m in list(sys.modules.values()) if str(getattr(m, "__file__", "") or "").startswith(str(folder) + os.sep)
    ]
    classes = [
        value
        for module in mine
        for value in list(vars(module).values())
        if isinstance(value, type) and value.__module__ == module.__name__
    ]
    for value in classes:
        if isinstance(value, type) and "get_vocab_base_pre" in vars(value):
            original = value.get_vocab_base_pre

            def pre_tokenizer(self, tokenizer, _original=original):
                try:
                    return _original(self, tokenizer)
                except NotImplementedError:
                    print(
                        f"note: llama.cpp does not recognise this tokenizer's pre-tokenizer; the GGUF names "
                        f"'{name}' as asked (--gguf-pre-tokenizer)",
                        file=sys.stderr,
                        flush=True,
                    )
                    return name

            value.get_vocab_base_pre = pre_tokenizer
            wrapped += 1
    return wrapped


def main(argv: list[str]) -> int:
    script, pre_tokenizer, *arguments = argv
    script = str(Path(script).resolve())
    # as `python convert_hf_to_gguf.py` sees it: its own folder first (newer llama.cpp imports its
    # `conversion` package from there), not this file's folder
    sys.path[0] = str(Path(script).parent)
    spec = importlib.util.spec_from_file_location("convert_hf_to_gguf", script)
    module = importlib.util.module_from_spec(spec)
    sys.modules["convert_hf_to_gguf"] = module
    spec.loader.exec_module(module)  # defines the converter; its main() runs only as __main__
    if pre_tokenizer and not _fall_back_to(pre_tokenizer, Path(script).resolve().parent):
        print("note: this converter has no get_vocab_base_pre; --gguf-pre-tokenizer has no effect", file=sys.stderr)
    sys.argv = [script, *arguments]
    module.main()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
