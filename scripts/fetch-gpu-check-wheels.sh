#!/usr/bin/env bash
# Download the wheels of requirements/gpu-check-wheels.txt into wheels/gpu-check/ (git-ignored), for a machine
# with a GPU and no network whose Python already has torch, transformers, accelerate and peft.
#   scripts/fetch-gpu-check-wheels.sh [--python-version 3.11] [--no-unsloth]
# The target's Python version decides the compiled wheels (default 3.12, the GPU image's); run this anywhere
# with network, carry the folder, then there:
#   pip install --no-index --no-deps --find-links wheels/gpu-check -r requirements/gpu-check-wheels.txt
#   python benchmarks/gpu_check.py
set -euo pipefail
cd "$(dirname "$0")/.."
python_version=3.12
unsloth=1
while [ $# -gt 0 ]; do
    case "$1" in
        --python-version) python_version="$2"; shift 2 ;;
        --no-unsloth) unsloth=0; shift ;;
        *) echo "unknown option $1 (use --python-version X.Y or --no-unsloth)" >&2; exit 2 ;;
    esac
done
abi="cp${python_version/./}"
list=requirements/gpu-check-wheels.txt
if [ "$unsloth" = 0 ]; then
    list=$(mktemp)
    trap 'rm -f "$list"' EXIT
    grep -v -E '^(unsloth|unsloth-zoo|json5)==' requirements/gpu-check-wheels.txt > "$list"
fi
mkdir -p wheels/gpu-check
python3 -m pip download --no-deps --only-binary=:all: --dest wheels/gpu-check \
    --python-version "$python_version" --implementation cp --abi "$abi" \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform any -r "$list"
du -sh wheels/gpu-check
