# Two commands set everything up on a machine without a GPU:
#   make train   create .venv, install the pinned CPU set, run `python train.py --auto`
#   make test    create .venv, install the pinned CPU set, run the whole test suite
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

.PHONY: venv train test test-fast dry-run clean vllm-side

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
	$(PY) train.py --auto

dry-run: venv
	$(PY) train.py --auto --dry-run

# pytest exits 5 when it collected no test: that is a failure here, not a pass.
test: venv
	$(PY) -m pytest -q; rc=$$?; if [ $$rc -eq 5 ]; then echo "pytest collected no tests"; exit 1; fi; exit $$rc

test-fast: venv
	$(PY) -m pytest -q -m "not slow"

# vLLM's Python code beside the environment (never in it: its wheel pins a CUDA torch), for the CPU checks of
# the vLLM glue in tests/test_vllm_glue.py; they skip without it.
vllm-side: venv
	$(PIP) install --quiet --no-deps --only-binary=:all: --target .vllm-side -r requirements/vllm-side.txt

clean:
	rm -rf $(VENV) .vllm-side .pytest_cache
