# The README's commands. Everything installs itself into .venv on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=
DEV_ARGS ?=

.PHONY: dev test lint install clean

$(BIN)/python:
	@echo "make: creating $(VENV)"
	@$(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip

# Not editable on purpose: tests and `lessor dev` run the package as users install it.
# Stamps make `make install` (and so `make dev`, `make test`) reinstall only what changed:
# the dependencies when pyproject.toml changed, the package when any packaged file did.
PIP := $(BIN)/python -m pip --quiet --disable-pip-version-check
PACKAGED := pyproject.toml $(shell find lessor mailbox model actors templates crds deploy -type f \
	\( -name '*.py' -o -name '*.yaml' -o -name '*.json' \) -not -path '*/__pycache__/*' 2>/dev/null)

install: $(VENV)/.installed

$(VENV)/.deps: $(BIN)/python pyproject.toml
	@echo "make: installing lessor's dependencies into $(VENV)"
	@rm -rf build
	@$(PIP) install '.[test]'
	@touch $@

$(VENV)/.installed: $(VENV)/.deps $(PACKAGED)
	@echo "make: installing lessor into $(VENV) (sources changed)"
	@rm -rf build  # setuptools keeps modules deleted since in build/lib and would package them again
	@$(PIP) install --no-deps --force-reinstall .
	@touch $@

dev: install
	$(BIN)/lessor dev $(DEV_ARGS)

test: lint
	$(BIN)/pytest $(PYTEST_ARGS)

# ruff over the sources and tests; mypy over the package as installed (the folders map onto
# lessor.* only there), copied aside so that error paths read lessor/actors/... = actors/...
TYPECHECK := $(VENV)/typecheck
lint: install
	@echo "make: ruff check"
	@$(BIN)/ruff check --quiet .
	@echo "make: mypy over the installed package"
	@rm -rf $(TYPECHECK) && mkdir -p $(TYPECHECK)
	@cp -r "$$($(BIN)/python -I -c 'import lessor, os; print(os.path.dirname(lessor.__file__))')" $(TYPECHECK)/
	@cd $(TYPECHECK) && $(CURDIR)/$(BIN)/mypy --config-file $(CURDIR)/pyproject.toml --cache-dir $(CURDIR)/$(VENV)/.mypy_cache -p lessor

# Every benchmark is `lessor bench NAME`, installed first; BENCH_ARGS_NAME adds its own arguments.
BENCHMARKS := apiserver mailbox topology leases claims admission templates failover faults scale fuzz grpc
BENCH_ARGS_fuzz = --count $(or $(COUNT),200)

.PHONY: $(addprefix bench-,$(BENCHMARKS))
$(addprefix bench-,$(BENCHMARKS)): bench-%: install
	@$(BIN)/lessor bench $* $(BENCH_ARGS_$*)

clean:
	rm -rf $(VENV) build *.egg-info .lessor lessor-dev.kubeconfig
