# The README's quick start: `make run` and `make test`, on a machine with Python 3.11+.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Every install takes the versions CI tested (constraints.txt); `make lock` refreshes them.
PIP_INSTALL := $(BIN)/python -m pip install --quiet --constraint constraints.txt

.PHONY: run test lint migrate bench lock clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Re-install whenever pyproject.toml or the pinned versions change.
$(VENV)/.installed: pyproject.toml constraints.txt | $(BIN)/python
	$(PIP_INSTALL) -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml constraints.txt | $(BIN)/python
	$(PIP_INSTALL) -e '.[test,dev]'
	touch $@ $(VENV)/.installed

run: $(VENV)/.installed
	$(BIN)/docex serve

migrate: $(VENV)/.installed
	$(BIN)/docex migrate

# Set DOCEX_TEST_DATABASE_URL=postgresql+psycopg://... to run the suite on PostgreSQL.
test: $(VENV)/.installed-test
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: $(VENV)/.installed-test
	$(BIN)/ruff check daemon tests bench
	$(BIN)/mypy daemon
	$(BIN)/lint-imports

bench: $(VENV)/.installed-test
	for script in bench/*.py; do $(BIN)/python $$script || exit 1; done

# Resolve the newest versions pyproject.toml allows in a throw-away environment and pin them all.
# Run it, then `make test` (and CI) before committing the new constraints.txt.
lock:
	rm -rf .lock-venv
	$(PYTHON) -m venv .lock-venv
	.lock-venv/bin/python -m pip install --quiet --upgrade pip
	.lock-venv/bin/python -m pip install --quiet -e '.[test,dev]'
	{ echo "# Versions CI tested; refreshed by \`make lock\`. Installs use it as a pip constraints file."; \
	  .lock-venv/bin/python -m pip freeze --exclude-editable; } > constraints.txt
	rm -rf .lock-venv

clean:
	rm -rf $(VENV) data .pytest_cache
