# resq — make targets. `make test` installs what it needs (tool venv) by itself.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
VENV_CHECKOV := .venv-checkov
TOOLS := $(VENV)/.installed
CHECKOV := $(VENV_CHECKOV)/.installed
export SAM_CLI_TELEMETRY := 0
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: setup test lint fmt clean

## setup: create the tool venvs (moto server, cargo-lambda, aws-sam-cli, cfn-lint; checkov apart)
setup: $(TOOLS) $(CHECKOV)

$(TOOLS): requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	touch $@

$(CHECKOV): requirements-checkov.txt
	$(PYTHON) -m venv $(VENV_CHECKOV)
	$(VENV_CHECKOV)/bin/pip install --quiet --disable-pip-version-check -r requirements-checkov.txt
	touch $@

## test: unit tests and the end-to-end tests against a moto server the tests start themselves
test: $(TOOLS)
	MOTO_SERVER=$(CURDIR)/$(VENV)/bin/moto_server cargo test --workspace --all-targets

## lint: formatting and clippy with warnings as errors
lint:
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings

fmt:
	cargo fmt --all

clean:
	cargo clean
	rm -rf $(VENV) $(VENV_CHECKOV)
