# The README's commands. Everything installs itself into .venv on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: dev test install bench-apiserver bench-mailbox bench-topology bench-leases bench-claims bench-admission clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Not editable on purpose: tests and `lessor dev` run the package as users install it.
install: $(BIN)/python
	$(BIN)/python -m pip install --quiet '.[test]'
	$(BIN)/python -m pip install --quiet --no-deps --force-reinstall .

dev: install
	$(BIN)/lessor dev

test: install
	$(BIN)/pytest $(PYTEST_ARGS)

bench-apiserver: install
	$(BIN)/lessor bench apiserver

bench-mailbox: install
	$(BIN)/lessor bench mailbox

bench-topology: install
	$(BIN)/lessor bench topology

bench-leases: install
	$(BIN)/lessor bench leases

bench-claims: install
	$(BIN)/lessor bench claims

bench-admission: install
	$(BIN)/lessor bench admission

clean:
	rm -rf $(VENV) build *.egg-info .lessor lessor-dev.kubeconfig
