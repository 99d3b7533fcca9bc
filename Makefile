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

quickstart: install
	$(VENV)/bin/groundstate quickstart

test: dev
	$(PY) -m pytest -q

bench: dev
	$(PY) benchmarks/bench.py

clean:
	rm -rf $(VENV) runs .pytest_cache
