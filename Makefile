# `make run` sets up and starts the gateway on config.example.yaml; `make test` sets up and runs every test.
PYTHON ?= python3
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
NODE_DIR := tests/node
export PATH := $(BIN):$(PATH)

.PHONY: setup run test lint clean

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
	$(BIN)/triad serve -c config.example.yaml

test: $(VENV)/.installed $(NODE_DIR)/node_modules/.installed
	$(BIN)/ruff check .
	$(BIN)/python -m pytest

lint: $(VENV)/.installed
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) $(NODE_DIR)/node_modules
