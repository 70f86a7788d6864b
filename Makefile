# The README's quick start: `make run` and `make test`, on a machine with Python 3.11+.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: run test lint migrate bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Re-install whenever pyproject.toml changes.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@ $(VENV)/.installed

run: $(VENV)/.installed
	$(BIN)/docex serve

migrate: $(VENV)/.installed
	$(BIN)/docex migrate

# Set DOCEX_TEST_DATABASE_URL=postgresql+psycopg://... to run the suite on PostgreSQL.
test: $(VENV)/.installed-test
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: $(VENV)/.installed-test
	$(BIN)/python -m pip install --quiet ruff mypy
	$(BIN)/ruff check daemon tests bench
	$(BIN)/mypy daemon

bench: $(VENV)/.installed-test
	for script in bench/*.py; do $(BIN)/python $$script || exit 1; done

clean:
	rm -rf $(VENV) data .pytest_cache
