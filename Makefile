# Two commands do everything: `make demo` (the main job on embedded defaults) and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo up down test test-unit lowest-venv test-lowest test-wheel test-stores lint bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	@# a venv made before the Spark provider was dropped still holds pyspark-client's files over pyspark's
	@if $(BIN)/python -m pip show -q pyspark-client apache-airflow-providers-apache-spark >/dev/null 2>&1; then \
		$(BIN)/python -m pip uninstall -y -q pyspark-client apache-airflow-providers-apache-spark && \
		$(BIN)/python -m pip install -q --force-reinstall --no-deps "$$($(BIN)/python -m pip show pyspark | sed -n 's/^Version: /pyspark==/p')"; fi
	$(BIN)/python -m pip check
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(BIN)/spanner-cdc demo

# The Airflow UI (api-server, scheduler, dag-processor, triggerer) on the embedded stack; Ctrl-C stops it.
up: install
	$(BIN)/spanner-cdc up

# Stops the embedded Postgres that CLI commands on a laptop start and leave running (make demo and make up stop what they start).
down: install
	$(BIN)/spanner-cdc down

# Whole test files spread over TEST_WORKERS processes (pytest-xdist); TEST_WORKERS=0 runs them in this one.
# --no-loadscope-reorder keeps tests/conftest.py's order (the longest files first) instead of most tests first.
TEST_WORKERS ?= 2

test: install browser-deps monitoring-deps
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

test-unit: install
	$(BIN)/pytest tests/unit

# The unit tests with every direct dependency at its declared lower bound (uv's lowest-direct resolution), in a
# virtualenv of their own: the floors in pyproject.toml are true.
LOWEST_VENV := .local/lowest-venv

LOWEST_STAMP := $(LOWEST_VENV)/.installed

$(LOWEST_STAMP): pyproject.toml | install
	rm -rf $(LOWEST_VENV)
	$(BIN)/uv venv -q --seed --python $(BIN)/python $(LOWEST_VENV)
	$(BIN)/uv pip install -q --python $(LOWEST_VENV)/bin/python --resolution lowest-direct -e '.[dev]'
	touch $(LOWEST_STAMP)

# The lowest-direct virtualenv alone (mostly downloads: CI makes it while the suite runs).
lowest-venv: $(LOWEST_STAMP)

test-lowest: $(LOWEST_STAMP)
	$(LOWEST_VENV)/bin/python -m pytest -n $(TEST_WORKERS) -q tests/unit

# The built wheel in a fresh Python 3.13 virtualenv, outside the checkout: db upgrade, the DAGs, the plugin, a window.
test-wheel: install
	$(BIN)/pytest -p no:xdist -m integration tests/integration/extract/test_installed_wheel.py

# The crash scenarios on every lake store (local path, S3 server, GCS server); `make test` runs each store once.
test-stores: install
	$(BIN)/pytest -m '' tests/integration/extract/test_extract_crash.py -k 'failpoint or random'

lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy

bench: install
	$(BIN)/python -m bench

clean:
	rm -rf .local

# Headless Chromium + chromedriver from Debian for the UI's browser test (the test skips without them).
.PHONY: browser-deps
browser-deps:
	@if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then :; \
	elif [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; \
	else echo "browser-deps: run as root, or: sudo apt-get install chromium chromium-driver"; fi

# Prometheus's promtool from Debian for the alert rules' unit tests (the tests skip without it).
.PHONY: monitoring-deps
monitoring-deps:
	@if [ -x /usr/bin/promtool ]; then :; \
	elif [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus; \
	else echo "monitoring-deps: run as root, or: sudo apt-get install prometheus"; fi
