#!/usr/bin/env bash
# Puts llama.cpp's Hugging Face -> GGUF converter (convert_hf_to_gguf.py, its `conversion` package and its own
# gguf-py) into a folder, by default .llama.cpp/ beside train.py, where `python train.py export --gguf` finds it.
# It comes from the source distribution of llama-cpp-python on PyPI, which vendors llama.cpp: only pip and the
# package index are needed, and nothing is built. The converter also needs sentencepiece (`make llama-cpp`
# installs it). Types other than f32/f16/bf16/q8_0 need llama.cpp's llama-quantize, which this does not build.
#
#   scripts/fetch-llama-cpp.sh [FOLDER]      (PYTHON=.venv/bin/python by default)
set -euo pipefail
cd "$(dirname "$0")/.."

FOLDER=${1:-.llama.cpp}
PYTHON=${PYTHON:-.venv/bin/python}
# llama-cpp-python 0.3.36 vendors llama.cpp of 2026-10
VERSION=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$PYTHON" -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$work"
archive=$(ls "$work"/llama_cpp_python-*.tar.gz)
top="llama_cpp_python-$VERSION/vendor/llama.cpp"
mkdir -p "$work/x"
tar -xzf "$archive" -C "$work/x" --wildcards "$top/convert_hf_to_gguf.py" "$top/conversion/*" "$top/gguf-py/*" \
    "$top/requirements/*" "$top/LICENSE"
rm -rf "$FOLDER"
mkdir -p "$(dirname "$FOLDER")"
mv "$work/x/$top" "$FOLDER"
echo "llama.cpp's converter (from llama-cpp-python $VERSION): $FOLDER/convert_hf_to_gguf.py"
