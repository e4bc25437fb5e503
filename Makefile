# The two commands of a fresh clone (README.md):
#   make demo   the whole product on this machine: ASGI server, Celery worker and beat, simulated fleet
#               (controlplane/demo.py; it stops everything on Ctrl-C or SIGTERM, however many arrive)
#   make test   lint, then the whole test suite; CI runs exactly this through .ci/run
#
# Both create .venv on first use, and reinstall into it whenever pyproject.toml changes.
# Tests run on SQLite unless DATABASE_URL is set, e.g.
#   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test make test
# Extra pytest arguments: make test PYTEST_ARGS="-x tests/inventory"

PYTHON3 ?= python3
VENV := .venv
VENV_STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: demo test

demo: $(VENV_STAMP)
	$(VENV)/bin/python -m controlplane.demo

test: $(VENV_STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	@echo "pytest database: $$(echo "$${DATABASE_URL:-sqlite (embedded)}" | sed 's|//[^/]*@|//…@|')"
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS)

$(VENV_STAMP): pyproject.toml
	@echo "Installing the project's packages into $(VENV) (about a minute; again only when pyproject.toml changes)"
	$(PYTHON3) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $@
