# syntax=docker/dockerfile:1
# The GPU image of grpo-train (docs/gpu.md). For any host user, on a host that never used Hugging Face:
#   docker build -t grpo-train .
#   mkdir -p outputs
#   docker run --rm --gpus all --ipc=host --user "$(id -u):$(id -g)" -v "$PWD/outputs:/app/outputs" \
#       -v grpo-train-cache:/home/app/.cache -e HF_TOKEN grpo-train             plan for this GPU, then train
#   docker run --rm --gpus all grpo-train plan                                   the plan only
# outputs/ is yours (you made it, the container writes it as you); the named volume grpo-train-cache keeps
# the models, the ledger (/home/app/.cache/grpo-train/ledger.jsonl) and the calibrations across `--rm`.
#
# Base pinned by tag and digest. torch 2.13.0 from PyPI is a CUDA 13.0 build that brings its CUDA libraries as
# wheels; the base's part is to declare CUDA 13.0, so that the NVIDIA container runtime refuses a host driver
# too old for it (below 580) when the container starts, not deep inside torch. To move to another base, pass
# --build-arg BASE_IMAGE=...; its CUDA major.minor must stay that of the lock's cuda-toolkit.
ARG BASE_IMAGE=nvidia/cuda:13.0.3-base-ubuntu24.04@sha256:7c7413a56200486f71f181cad9310f6fd31b6bb21816ade15fc9c1e1e927a5c1
FROM ${BASE_IMAGE}

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_INPUT=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH

# Python 3.12 is Ubuntu 24.04's own. A C/C++ compiler and the Python headers stay in the image because Triton
# builds its kernel launchers, and FlashInfer its kernels, the first time they run. tini hands `docker stop`
# (SIGINT, see STOPSIGNAL) to the whole process group, so the training child stops as on a Ctrl-C and saves.
# The digest above fixes the Ubuntu release; apt versions are not pinned because the archive keeps only the
# newest build of each package, and an exact pin would break the build at the next security update.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
        ca-certificates g++ gcc libc6-dev python3.12 python3.12-dev python3.12-venv tini \
 && rm -rf /var/lib/apt/lists/* \
 && python3.12 -m venv "$VIRTUAL_ENV"

# A non-root user, the image's default; Ubuntu's image already has a user `ubuntu` with uid 1000, which goes.
# The documented `docker run` passes `--user "$(id -u):$(id -g)"` instead, so that the container writes a
# mounted folder as its owner whatever the host uid; the folders the container writes (scripts/image-dirs.sh)
# are open to any uid.
ARG APP_UID=1000
RUN if id -u ubuntu >/dev/null 2>&1; then userdel --remove ubuntu; fi \
 && if getent group ubuntu >/dev/null; then groupdel ubuntu; fi \
 && groupadd --gid "$APP_UID" app \
 && useradd --uid "$APP_UID" --gid app --create-home --shell /bin/bash app

WORKDIR /app

# The libraries, in their own layer: it is rebuilt only when the lock or the pins change. The lock is the
# whole resolved set, so pip resolves nothing here (--no-deps) and no other version can slip in; the pin file
# beside it makes the build fail if the two ever disagree. --no-deps is also what lets unsloth and unsloth_zoo
# in beside certifi 2026.10.18: see the header of requirements/gpu.lock.
COPY constraints.txt ./
COPY requirements/gpu.lock requirements/
RUN --mount=type=cache,target=/root/.cache/pip \
    pip install --no-deps --only-binary=:all: -r requirements/gpu.lock -c constraints.txt

# The GPU glue imports here as in a run (vLLM, TRL's vLLM client and GRPOTrainer, Unsloth, unsloth_zoo's vLLM
# loader): a pin that breaks one of them fails the build, not a user's first run. No GPU is needed to import.
COPY scripts/check_imports.py scripts/
RUN python scripts/check_imports.py

# llama.cpp's Hugging Face -> GGUF converter, for `export --gguf` (taken from llama-cpp-python's source
# distribution, which vendors llama.cpp: nothing is built; sentencepiece comes with the lock).
COPY scripts/fetch-llama-cpp.sh scripts/
RUN --mount=type=cache,target=/root/.cache/pip PYTHON=python bash scripts/fetch-llama-cpp.sh /opt/llama.cpp

# The folders the container writes, with their owners and modes (tests/rehearsal/test_docker_runtime.py runs the same
# script to reproduce them without Docker).
COPY scripts/image-dirs.sh scripts/
RUN bash scripts/image-dirs.sh / "$APP_UID"

# The project, last: editing code or a profile rebuilds only these small layers.
COPY pyproject.toml train.py ./
COPY commands/ commands/
COPY contract/ contract/
COPY evaluation/ evaluation/
COPY launcher/ launcher/
COPY trainer/ trainer/
COPY tasks/ tasks/
COPY rewards/ rewards/
COPY tools/ tools/
COPY usercode/ usercode/
COPY tiny_model/ tiny_model/
COPY profiles/ profiles/
# The card's measurement kit (`gpu-check`; its table goes to outputs/gpu-check in the image)
COPY measure/ measure/
# Planning needs neither torch nor a GPU: a broken CLI or profile fails the build, not the first run.
RUN python train.py --help >/dev/null

# Caches under the image's home, for whatever uid runs the container: one volume holds them all, so that models
# download once and the project's own cache (GRPO_TRAIN_CACHE: the ledger, calibrations, the tiny and the
# random-weight models) survives `--rm` when a named volume is mounted there. USER names the account for
# libraries that ask for one (getpass, TorchInductor): a uid given with --user has no passwd entry here.
# GRPO_TRAIN_IMAGE makes error messages give their fixes as `docker run` options. HF_TOKEN is never set here:
# pass it at run time (`docker run -e HF_TOKEN ...`).
ENV HOME=/home/app \
    USER=app \
    XDG_CACHE_HOME=/home/app/.cache \
    HF_HOME=/home/app/.cache/huggingface \
    GRPO_TRAIN_CACHE=/home/app/.cache/grpo-train \
    TRITON_CACHE_DIR=/home/app/.cache/triton \
    TORCHINDUCTOR_CACHE_DIR=/home/app/.cache/torchinductor \
    MPLCONFIGDIR=/home/app/.cache/matplotlib \
    UNSLOTH_COMPILE_LOCATION=/home/app/.cache/unsloth_compiled_cache \
    GRPO_TRAIN_IMAGE=1
VOLUME ["/app/outputs", "/home/app/.cache"]

# Numeric, so that a runtime (e.g. Kubernetes' runAsNonRoot) can tell it is not root without /etc/passwd.
USER ${APP_UID}:${APP_UID}
STOPSIGNAL SIGINT
ENTRYPOINT ["/usr/bin/tini", "-g", "--", "python", "/app/train.py"]
CMD ["train"]
