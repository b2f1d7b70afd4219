"""A tiny model that vLLM's CPU attention accepts: the shipped tiny model's tokenizer and Llama shape, but
heads of 32 dimensions (vLLM's CPU kernels refuse head_dim 16, the shipped model's). Built offline and
untrained: these tests check that weights and token ids travel right, not that the model is any good."""

from __future__ import annotations

from pathlib import Path

# 2 query heads and 1 key/value head of 32 dimensions: hidden 64 as in the shipped model, grouped-query
# attention kept so that the fused qkv projection vLLM builds has parts of unequal size.
ENGINE_SHAPE = {"hidden_size": 64, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32}


def build_engine_model(folder: Path, seed: int = 0, initializer_range: float = 0.02) -> Path:
    """Tokenizer and random float32 weights saved in `folder` (created); the folder is returned. A wide
    `initializer_range` gives a model whose greedy completions differ from prompt to prompt (at 0.02 every
    prompt gets the same run of one token); the default, near-uniform sampling."""
    from tiny_model.build import TinyShape, _build_model, _build_tokenizer, _corpus, _pin_tokenizer_class

    shape = TinyShape(**ENGINE_SHAPE, initializer_range=initializer_range)
    tokenizer = _build_tokenizer(_corpus("arithmetic", seed), shape)
    model = _build_model(tokenizer, shape, seed)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    _pin_tokenizer_class(folder)
    return folder


if __name__ == "__main__":
    import sys

    print(build_engine_model(Path(sys.argv[1]), initializer_range=float(sys.argv[2]) if len(sys.argv) > 2 else 0.02))
