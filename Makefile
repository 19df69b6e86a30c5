# chatloop: run `make help` for the targets. Every AWS target honours AWS_ENDPOINT_URL and AWS_REGION.
SHELL := /bin/bash
.DEFAULT_GOAL := help

# Prefer the Lambda runtime's Python (3.12) for the virtualenv; fall back to python3 (3.11 works too).
PYTHON ?= $(shell for p in python3.12 $$(ls -d $$HOME/.pyenv/versions/3.12*/bin/python3.12 /root/.pyenv/versions/3.12*/bin/python3.12 2>/dev/null) python3; do \
            $$p -c 'import sys; assert sys.version_info >= (3, 11)' >/dev/null 2>&1 && { echo $$p; break; }; done)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: help install test lint clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-20s %s\n", $$1, $$2}'

install: $(STAMP) ## create .venv and install runtime + dev requirements

$(STAMP): requirements.txt requirements-dev.txt
	@test -n "$(PYTHON)" || { echo "no Python >= 3.11 found"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements.txt -r requirements-dev.txt
	@touch $@

test: install ## run the whole test suite (installs first if needed)
	$(BIN)/python -m pytest

lint: install ## code linters
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests

clean: ## remove build outputs and caches (keeps .venv)
	rm -rf build .pytest_cache .ruff_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
