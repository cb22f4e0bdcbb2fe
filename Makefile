# The two commands a new machine needs: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint fmt venv clean bench soak

$(STAMP): pyproject.toml constraints.txt
	@test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev,integration]'
	@touch $(STAMP)

venv: $(STAMP)

# The OpenID provider the tests sign in against (node's oidc-provider, locked).
OIDC_STAMP := tests/oidc/node_modules/.installed
$(OIDC_STAMP): tests/oidc/package.json tests/oidc/package-lock.json
	npm ci --prefix tests/oidc --no-audit --no-fund --loglevel=error
	@touch $(OIDC_STAMP)

# axe-core, which the browser tests inject into each page (locked).
AXE_STAMP := tests/axe/node_modules/.installed
$(AXE_STAMP): tests/axe/package.json tests/axe/package-lock.json
	npm ci --prefix tests/axe --no-audit --no-fund --loglevel=error
	@touch $(AXE_STAMP)

demo: venv
	@deploy/install-system-deps.sh
	$(BIN)/tbhub demo

test: venv
	@deploy/install-system-deps.sh test
	@$(MAKE) --no-print-directory $(OIDC_STAMP) $(AXE_STAMP)
	$(BIN)/tbhub admin board-image build
	$(BIN)/ruff check service tests bench alembic docs
	$(BIN)/mypy
	$(BIN)/pytest -n 3 --dist loadfile

lint: venv
	$(BIN)/ruff check service tests bench alembic docs
	$(BIN)/ruff format --check service tests bench alembic docs
	$(BIN)/mypy

fmt: venv
	$(BIN)/ruff format service tests bench alembic docs
	$(BIN)/ruff check --fix service tests bench alembic docs

bench: venv
	@deploy/install-system-deps.sh bench
	$(BIN)/tbhub admin board-image build
	$(BIN)/python bench/cold_start.py
	$(BIN)/python bench/compare_cold_start.py
	$(BIN)/python bench/board_memory.py
	$(BIN)/python bench/warm_throughput.py
	$(BIN)/python bench/warm_throughput.py --backend docker
	$(BIN)/python bench/docker_cold_start.py
	$(BIN)/python bench/auth_hook.py
	$(BIN)/python bench/memory_restart.py
	$(BIN)/python bench/reconcile_cpu.py

# A day of use in 30 minutes, with faults (docs/operations/soak.md); its 3-minute smoke
# version, tests/e2e/test_soak_smoke.py, is part of `make test`.
soak: venv
	@deploy/install-system-deps.sh bench
	$(BIN)/python bench/soak.py

clean:
	rm -rf $(VENV) tbhub-data .demo
