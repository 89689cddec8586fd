# resq — make targets. `make test` installs what it needs (tool venv) by itself.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
VENV_CHECKOV := .venv-checkov
TOOLS := $(VENV)/.installed
CHECKOV := $(VENV_CHECKOV)/.installed
export SAM_CLI_TELEMETRY := 0
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

ARM_TARGET := aarch64-unknown-linux-gnu
TRANSLATED := target/infra/template.json
export AWS_DEFAULT_REGION ?= us-east-1

.PHONY: setup test lint fmt build deploy arm-target clean

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

## lint: rustfmt, clippy (warnings are errors), and the template: sam validate (+ --lint),
## cfn-lint on the template and on its SAM translation, checkov (0 failed; skips carry reasons)
lint: $(TOOLS) $(CHECKOV)
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings
	sam validate -t infra/template.yaml
	sam validate --lint -t infra/template.yaml
	cfn-lint infra/template.yaml
	$(VENV)/bin/python infra/translate.py infra/template.yaml $(TRANSLATED)
	cfn-lint --ignore-checks W3037 -- $(TRANSLATED)
	$(VENV_CHECKOV)/bin/checkov -f infra/template.yaml -f $(TRANSLATED) --framework cloudformation --skip-download --compact --quiet

arm-target:
	@rustup target list --installed | grep -qx $(ARM_TARGET) || rustup target add $(ARM_TARGET)

## build: both Lambdas for arm64 (target/lambda/{consumer,redriver}/bootstrap)
build: $(TOOLS) arm-target
	cargo lambda build --release --arm64

## deploy: build with SAM and deploy the stack (first time: cd infra && sam build && sam deploy --guided)
deploy: $(TOOLS) arm-target
	cd infra && sam build && sam deploy

fmt:
	cargo fmt --all

clean:
	cargo clean
	rm -rf $(VENV) $(VENV_CHECKOV)
