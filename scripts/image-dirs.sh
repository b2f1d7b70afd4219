#!/usr/bin/env bash
# The folders of the GPU image that the container writes, with their owner and modes; the Dockerfile runs it
# as `scripts/image-dirs.sh / "$APP_UID"`, and tests/rehearsal/test_docker_runtime.py runs it under a scratch root to
# reproduce the image's runtime without Docker.
#   /app/outputs          runs (bind-mount a host folder you created, or it stays in the container)
#   /home/app/.cache/*    the caches: Hugging Face, grpo-train's own (ledger, calibrations, the tiny and the
#                         random-weight models), Triton, TorchInductor, Unsloth's compiled code, matplotlib
# Every one is world-writable with the sticky bit (as /tmp), so a container run with `--user "$(id -u):$(id -g)"`
# writes them whatever its uid. A named volume mounted on /home/app/.cache starts as a copy of these folders,
# modes included, so the same holds for the volume: it keeps the caches, the ledger among them, across `--rm`.
set -euo pipefail
root="${1:?usage: image-dirs.sh ROOT APP_UID}"
uid="${2:?usage: image-dirs.sh ROOT APP_UID}"
root="${root%/}"
caches="huggingface grpo-train triton torchinductor unsloth_compiled_cache matplotlib"
mkdir -p "$root/app/outputs" "$root/home/app/.cache"
for name in $caches; do
    mkdir -p "$root/home/app/.cache/$name"
done
chown "$uid:$uid" "$root/app/outputs" "$root/home/app" "$root/home/app/.cache"
chmod 1777 "$root/app/outputs" "$root/home/app" "$root/home/app/.cache"
for name in $caches; do
    chown "$uid:$uid" "$root/home/app/.cache/$name"
    chmod 1777 "$root/home/app/.cache/$name"
done
