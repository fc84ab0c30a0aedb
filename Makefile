# `make run` sets up and starts the gateway on config.example.yaml (`make run PORT=9000 HOST=127.0.0.1`: elsewhere
# than listen.port and listen.host); `make test` sets up and runs every test.
PYTHON ?= python3
PORT ?=
HOST ?=
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
NODE_DIR := tests/node
export PATH := $(BIN):$(PATH)

.PHONY: setup run test lint clean bench system-tools

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

$(NODE_DIR)/node_modules/.installed: $(NODE_DIR)/package.json
	cd $(NODE_DIR) && npm install --no-audit --no-fund --loglevel=error
	touch $@

setup: $(VENV)/.installed

run: $(VENV)/.installed
	# the venv first on PATH (the example's demo upstream runs on TRIAD_PYTHON, the venv's Python, anyway)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/triad serve -c config.example.yaml $(if $(PORT),--port $(PORT)) \
		$(if $(HOST),--host $(HOST))

# The end-to-end tests run twice: with Triad's direct HTTP path on (the default) and off (the SDK's server only).
E2E_TESTS := tests/test_gateway_e2e.py tests/test_conformance.py tests/test_eras.py tests/test_relays.py \
	tests/test_policy_e2e.py tests/test_search_e2e.py tests/test_cluster.py tests/test_oauth_upstream.py

# Debian tools the tests use: promtool (checks /metrics), chromium and chromedriver (the console's browser tests),
# redis-server and haproxy (the cluster tests and deploy/), bubblewrap (sandboxed stdio upstreams). Installed when
# missing, if this machine has apt-get.
system-tools:
	@command -v promtool >/dev/null || { command -v apt-get >/dev/null && \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
		prometheus >/dev/null) || echo "make: promtool is missing and could not be installed (Debian's prometheus)"; }
	@{ command -v chromium >/dev/null && command -v chromedriver >/dev/null; } || { command -v apt-get >/dev/null && \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
		chromium chromium-driver >/dev/null) || echo "make: chromium or chromedriver is missing and could not be installed"; }
	@{ command -v redis-server >/dev/null && command -v haproxy >/dev/null; } || { command -v apt-get >/dev/null && \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
		redis-server haproxy >/dev/null) || echo "make: redis-server or haproxy is missing and could not be installed"; }
	@command -v bwrap >/dev/null || { command -v apt-get >/dev/null && \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
		bubblewrap >/dev/null) || echo "make: bwrap is missing and could not be installed (Debian's bubblewrap)"; }

# Two workers (the tests mostly wait on the processes they start); a file's tests stay on one worker, so a module's
# daemon is started once. `PYTEST_WORKERS=0 make test` runs them in this process, one after another.
PYTEST_WORKERS ?= 2
PYTEST_ARGS := -n $(PYTEST_WORKERS) --dist loadfile --durations=25

test: lint system-tools $(NODE_DIR)/node_modules/.installed
	$(BIN)/python -m pytest $(PYTEST_ARGS)
	TRIAD_TEST_DIRECT_PATH=0 $(BIN)/python -m pytest $(PYTEST_ARGS) $(E2E_TESTS)

# ruff, the import direction between packages (import-linter contracts in pyproject.toml), and the type checker
lint: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/mypy

clean:
	rm -rf $(VENV) $(NODE_DIR)/node_modules

# The benchmark: peers live in venvs of their own (mcp-proxy needs mcp 1.x), never in Triad's.
bench/.venv-mcp-proxy/.installed:
	$(PYTHON) -m venv bench/.venv-mcp-proxy
	bench/.venv-mcp-proxy/bin/pip install --quiet mcp-proxy==0.13.0
	touch $@

bench/.venv-fastmcp/.installed:
	$(PYTHON) -m venv bench/.venv-fastmcp
	bench/.venv-fastmcp/bin/pip install --quiet fastmcp==4.2.3
	touch $@

# ContextForge: the newest release that runs on Python 3.11 (1.0.8 and later need 3.12+). When it cannot be installed,
# the bench runs without it and says so.
bench/.venv-contextforge/.installed:
	$(PYTHON) -m venv bench/.venv-contextforge
	bench/.venv-contextforge/bin/pip install --quiet mcp-contextforge-gateway==1.0.7.post20260921 && touch $@ || \
		echo "make: ContextForge (mcp-contextforge-gateway) could not be installed in bench/.venv-contextforge"

bench: $(VENV)/.installed bench/.venv-mcp-proxy/.installed bench/.venv-fastmcp/.installed \
		bench/.venv-contextforge/.installed
	$(BIN)/pip install --quiet 'uvicorn[standard]'
	$(BIN)/python bench/run.py
