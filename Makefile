# Every target is idempotent: stamps and caches make a second run install and build nothing.
PY ?= python3
VENV := .venv
VENV_VLLM := .venv-vllm
TK := $(VENV)/bin/python
MODEL := .cache/tiny-llama/toolkit-tiny-model.json

.PHONY: install vllm model demo test test-fast lint format clean-outputs

install: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[dev,ray]'
	touch $@

vllm: $(VENV_VLLM)/.installed
$(VENV_VLLM)/.installed: scripts/install-vllm.sh
	bash scripts/install-vllm.sh $(VENV_VLLM)

model: $(MODEL)
$(MODEL): $(VENV_VLLM)/.installed toolkit/embedded/build_tiny_model.py | install
	$(TK) -c "from toolkit.embedded.server import ensure_model; ensure_model()"

demo: install model
	$(TK) -m toolkit demo

test: install model
	$(TK) -m pytest

# Every test that needs no vLLM: unit tests and components against fake servers (works without `make vllm`).
test-fast: install
	$(TK) -m pytest tests/unit tests/component

lint: install
	$(VENV)/bin/ruff check toolkit tests benchmarks scripts
	$(VENV)/bin/ruff format --check toolkit tests benchmarks scripts
	$(VENV)/bin/mypy

format: install
	$(VENV)/bin/ruff format toolkit tests benchmarks scripts

clean-outputs:
	rm -rf outputs/*/
