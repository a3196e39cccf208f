# Every target is idempotent: stamps and caches make a second run install and build nothing.
PY ?= python3
VENV := .venv
VENV_VLLM := .venv-vllm
TK := $(VENV)/bin/python
MODEL := .cache/tiny-llama/toolkit-tiny-model.json
VISION_MODEL := .cache/tiny-vision/toolkit-tiny-model.json
# Bytecode caches written even where the environment says not to (PYTHONDONTWRITEBYTECODE=1 here): without them
# every test worker, kernel and subprocess compiles the toolkit and rewrites the tests' asserts again (pytest's
# collection: 7.1 s against 3.5 s here). Empty is unset for Python; __pycache__/ is ignored by git.
export PYTHONDONTWRITEBYTECODE :=

.PHONY: install vllm model chromium demo test test-fast test-offline flake-hunt lint format docs clean-outputs

install: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[dev,ray]'
	touch $@

vllm: $(VENV_VLLM)/.installed
$(VENV_VLLM)/.installed: scripts/install-vllm.sh
	bash scripts/install-vllm.sh $(VENV_VLLM)

model: $(MODEL) $(VISION_MODEL)
$(MODEL): $(VENV_VLLM)/.installed toolkit/servers/embedded/build_tiny_model.py | install
	$(TK) -c "from toolkit.servers.embedded.server import ensure_model; ensure_model()"
$(VISION_MODEL): $(MODEL) toolkit/servers/embedded/build_tiny_vision.py
	$(TK) -c "from toolkit.servers.embedded.models import ensure_vision_model; ensure_vision_model()"

demo: install model
	$(TK) -m toolkit demo

# The test tiers are pytest markers (tests/conftest.py, pyproject.toml): unit, component, process, engine.
# test-fast: the inner loop, unit and component tests (no kernel, no toolkit subprocess, no engine). Their waits on
# fake servers' 0.5 s windows (tests/tiny_params.py) overlap in five workers on two cores, which the tier's CPU then
# fills: 47-50 s on a freshly started machine here, up to 68 s on a busy one; 0.95 of the time with 1 s windows
# (median of four pairs in turn).
# test-offline: every test that needs no real engine (works after `make install` alone). Four workers on two cores:
# its tests wait on fake servers' real-time windows as well as computing (three: 352 s at 145 % CPU; four: 316 s at
# 171 %, the same tree back to back on a quiet machine; five: 274 s against four's 277 s, 2026-12-07, no gain worth
# the load). The component files, the slowest, are collected first.
PYTEST_EXTRA ?=
# Each tier is held to its budget in tests/budget.toml (tests/budget.py prints it at the end of the run).
FAST_TESTS := $(TK) -m pytest -n 5 --dist worksteal -m "unit or component" --budget-tier fast $(PYTEST_EXTRA) \
	tests/component tests/unit
OFFLINE_TESTS := $(TK) -m pytest -n 4 --dist worksteal -m "not engine" --budget-tier offline $(PYTEST_EXTRA) \
	tests/component tests/unit
# The Ray module measures no engine (fake servers on a Ray cluster): in `make test` it runs beside the offline tier.
RAY_MODULE := tests/integration/test_ray.py
RAY_TESTS := $(TK) -m pytest -m engine --budget-tier ray $(PYTEST_EXTRA) $(RAY_MODULE)
ENGINE_TESTS := $(TK) -m pytest -m engine --budget-tier engine $(PYTEST_EXTRA) --ignore=$(RAY_MODULE) tests/integration

# The report screenshot tests drive Debian's chromium: installed when missing and permitted (root, apt-get), else
# `make test` stops at once, before any install, with one line saying what to run.
chromium:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing Debian's chromium for the report screenshot tests ..."; \
		export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && apt-get install -y -qq chromium >/dev/null \
		|| { echo "error: apt-get install chromium failed (see above); install it, then run make test again" >&2; \
		exit 1; }; \
	else \
		echo "error: the report screenshot tests need chromium: run 'sudo apt-get install chromium' (Debian)," \
			"or make test as root, then make test again" >&2; \
		exit 1; \
	fi

# All tests: the offline tier, then the tests against real engines (vLLM) one at a time, since two loads at once on a
# small machine disturb each other's windows. The engine tier's pytest starts beside the offline tier as SCHED_IDLE
# (`chrt --idle 0`: it runs only on a core nothing else wants), so that its session's vLLMs start in the offline tier's
# idle CPU; it waits for the gate file before its first test (tests/conftest.py), and its output follows the offline
# tier's. The Ray module (a Ray cluster against fake servers: no engine measured) runs beside the offline tier in the
# normal class, and the gate waits for it too. All three always run; any failing fails.
test: chromium install model
	@gate=$$(mktemp -u /tmp/toolkit-engine-gate.XXXXXX); log=$$(mktemp /tmp/toolkit-engine-tier.XXXXXX); \
	raylog=$$(mktemp /tmp/toolkit-ray-tests.XXXXXX); \
	TOOLKIT_ENGINE_GATE=$$gate chrt --idle 0 $(ENGINE_TESTS) >$$log 2>&1 & engine=$$!; \
	$(RAY_TESTS) >$$raylog 2>&1 & ray=$$!; \
	trap 'kill $$engine $$ray 2>/dev/null; rm -f $$gate $$log $$raylog' EXIT; \
	echo '$(OFFLINE_TESTS)'; $(OFFLINE_TESTS); offline=$$?; \
	echo '$(RAY_TESTS) (beside the offline tier)'; wait $$ray; ray_rc=$$?; ray=; cat $$raylog; touch $$gate; \
	echo 'chrt --idle 0 $(ENGINE_TESTS) (started beside the offline tier; its servers started meanwhile)'; \
	tail -n +1 -f --pid=$$engine $$log; wait $$engine; engine_rc=$$?; engine=; \
	[ $$offline -ne 0 ] && exit $$offline; [ $$ray_rc -ne 0 ] && exit $$ray_rc; exit $$engine_rc

test-fast: install
	$(FAST_TESTS)

test-offline: install
	$(OFFLINE_TESTS)

# scripts/flake_hunt.sh: the offline tier 5 times beside two busy processes; how many runs failed, and which tests.
flake-hunt: install
	bash scripts/flake_hunt.sh 5 test-offline

lint: install
	$(VENV)/bin/ruff check toolkit tests benchmarks scripts
	$(VENV)/bin/ruff format --check toolkit tests benchmarks scripts
	$(VENV)/bin/mypy
	@# the run folder's documents (toolkit/results/documents) and all they import, to --strict
	$(VENV)/bin/mypy --strict toolkit/results/documents
	@# the allowed import directions and no import cycle (toolkit/__init__.py, [tool.importlinter] in pyproject.toml)
	$(VENV)/bin/lint-imports --no-cache
	@# every test module imports, integration ones too (a broken import would otherwise show only in `make test`)
	@out=$$($(TK) -m pytest --collect-only -q tests 2>&1) || { echo "$$out"; exit 1; }

# The documentation site (mkdocs.yml): docs/ built with --strict into site/; a broken link or anchor, or a page
# missing from the nav, fails. The `docs` extra is installed into .venv on first use, so `make test` never pays for
# it. docs/cli-reference.md is generated from the parser and committed: a stale one fails here and in the unit tests
# (regenerate: .venv/bin/python -m toolkit.cli.reference). NO_MKDOCS_2_WARNING: mkdocs-material's end-of-life banner.
docs: $(VENV)/.docs-installed
	$(TK) -m toolkit.cli.reference --check
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet
$(VENV)/.docs-installed: pyproject.toml | install
	$(VENV)/bin/pip install --quiet -e '.[docs]'
	touch $@

format: install
	$(VENV)/bin/ruff format toolkit tests benchmarks scripts

clean-outputs:
	rm -rf outputs/*/
