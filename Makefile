# resq — make targets. `make test` installs what it needs (tool venv) by itself.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
VENV_CHECKOV := .venv-checkov
VENV_BENCH := .venv-bench
VENV_LOCALSTACK := .venv-localstack
VENV_DOCS := .venv-docs
TOOLS := $(VENV)/.installed
CHECKOV := $(VENV_CHECKOV)/.installed
BENCH_TOOLS := $(VENV_BENCH)/.installed
# the Node peer's packages (Powertools for TypeScript, the AWS SDK v3 S3 client), as pinned
BENCH_NODE := bench/node/node_modules/.installed
LOCALSTACK := $(VENV_LOCALSTACK)/.installed
MDBOOK := $(VENV_DOCS)/.installed
# LocalStack needs Python >= 3.12: pyenv's 3.13.0 (the machines' image has it), else a
# python3.13 or python3.12 on PATH that really runs (pyenv's shims may not)
PYTHON_LOCALSTACK ?= $(shell for p in "$$(pyenv root 2>/dev/null)/versions/3.13.0/bin/python3.13" python3.13 python3.12; do "$$p" -c 'import sys; assert sys.version_info >= (3, 12)' >/dev/null 2>&1 && { command -v "$$p"; break; }; done)
export SAM_CLI_TELEMETRY := 0
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

ARM_TARGET := aarch64-unknown-linux-gnu
TRANSLATED := target/infra/template.json
# the template's QueueType and Encryption values: lint checks the template under each pair
# (with the orders topic and a producer ARN, except under aws-managed-key, which refuses both)
QUEUE_TYPES := standard fifo
ENCRYPTIONS := sqs-managed aws-managed-key customer-managed-key
# a producer the orders queue lets in, for checkov (not aws-managed-key: it refuses producers;
# cfn-lint takes no list parameter on its command line)
LINT_PRODUCER := arn:aws:events:us-east-1:123456789012:rule/orders
export AWS_DEFAULT_REGION ?= us-east-1
TRANSLATED_FUNCTION := target/infra/function.json
# The crates published to crates.io (the others say publish = false).
LIBRARIES := -p resq -p resq-testing -p resq-consumer -p resq-redriver -p resq-ops
# The workspace's dev profile as `cargo package` verifies with it (the packaged manifests carry
# no profile): what the verification can reuse of the test build is reused.
WORKSPACE_DEV_PROFILE := --config 'profile.dev.debug="line-tables-only"' --config 'profile.dev.package."*".debug=false'
# infra/function.yaml with every option on, for checkov: the resq stack's key, a managed policy
# of the handler's, no batching window (a FIFO queue's)
LINT_FUNCTION_PARAMS := EncryptionKeyArn=arn:aws:kms:us-east-1:123456789012:key/11111111-2222-3333-4444-555555555555 HandlerPolicyArns=arn:aws:iam::123456789012:policy/settle-payments BatchingWindowSeconds=0

LOCAL_ENV := target/local.env
WATCH_PORT ?= 9010
# The emulator of demo, chaos and local: moto (default; the template deploys with its
# functions) or localstack (SQS fast at depth, alarms that evaluate). `make local` defaults
# to localstack, the soak always runs on it.
INSTALLS := --moto-server $(VENV)/bin/moto_server --localstack-python $(VENV_LOCALSTACK)/bin/python
# One build for every target: the feature set `make test` compiles, so `make demo` after
# `make test` (or the other way round) compiles nothing again.
BUILD := cargo build --workspace --all-targets
CONSUMER_EVENT ?= events/sqs-batch.json
REDRIVER_EVENT ?= events/redrive-manual.json
ORDERS ?= 1000
CHAOS_ORDERS ?= 10000
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := consumer_event redriver_message

.PHONY: setup test lint docs fmt build deploy arm-target clean translate demo chaos soak fuzz local watch invoke-consumer invoke-redriver bench install doc package

## setup: create the tool venvs (moto server, cargo-lambda, aws-sam-cli, cfn-lint; checkov and
## LocalStack apart)
setup: $(TOOLS) $(CHECKOV) $(LOCALSTACK)

$(TOOLS): requirements-dev.txt
	@echo "installing the dev tools into $(VENV): moto, cargo-lambda, SAM CLI, cfn-lint (first time about 40 s)"
	@start=$$(date +%s); $(PYTHON) -m venv $(VENV) && \
	  $(VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements-dev.txt && \
	  echo "  $(VENV) ready in $$(( $$(date +%s) - start )) s"
	touch $@

$(CHECKOV): requirements-checkov.txt
	@echo "installing checkov into $(VENV_CHECKOV) (first time about 40 s)"
	@start=$$(date +%s); $(PYTHON) -m venv $(VENV_CHECKOV) && \
	  $(VENV_CHECKOV)/bin/pip install --quiet --disable-pip-version-check -r requirements-checkov.txt && \
	  echo "  $(VENV_CHECKOV) ready in $$(( $$(date +%s) - start )) s"
	touch $@

$(LOCALSTACK): requirements-localstack.txt
	@test -n "$(PYTHON_LOCALSTACK)" || { echo "LocalStack needs Python 3.12+: none found (pyenv's 3.13.0, python3.13, python3.12); set PYTHON_LOCALSTACK"; exit 1; }
	@echo "installing LocalStack into $(VENV_LOCALSTACK) with $(PYTHON_LOCALSTACK) (first time about a minute, 500 MB)"
	@start=$$(date +%s); "$(PYTHON_LOCALSTACK)" -m venv $(VENV_LOCALSTACK) && \
	  $(VENV_LOCALSTACK)/bin/pip install --quiet --disable-pip-version-check -r requirements-localstack.txt && \
	  echo "  $(VENV_LOCALSTACK) ready in $$(( $$(date +%s) - start )) s"
	touch $@

$(MDBOOK): requirements-docs.txt
	@echo "installing mdBook into $(VENV_DOCS) (a pinned wheel, a few seconds)"
	@start=$$(date +%s); $(PYTHON) -m venv $(VENV_DOCS) && \
	  $(VENV_DOCS)/bin/pip install --quiet --disable-pip-version-check --require-hashes -r requirements-docs.txt && \
	  echo "  $(VENV_DOCS) ready in $$(( $$(date +%s) - start )) s"
	touch $@

$(BENCH_TOOLS): bench/requirements.txt
	@echo "installing Powertools, boto3 and aiobotocore into $(VENV_BENCH) for the comparison"
	$(PYTHON) -m venv $(VENV_BENCH)
	$(VENV_BENCH)/bin/pip install --quiet --disable-pip-version-check -r bench/requirements.txt
	touch $@

$(BENCH_NODE): bench/node/package-lock.json
	@echo "installing Powertools for TypeScript and the AWS SDK v3 S3 client into bench/node/node_modules"
	cd bench/node && npm ci --no-audit --no-fund --loglevel=error
	touch $@

## test: unit tests and the end-to-end tests against a moto server the tests start themselves,
## then the end-to-end tests again against LocalStack (the soak runs on LocalStack only), the
## library crates' doc examples, and `make package`
test: $(TOOLS) $(LOCALSTACK)
	@echo "compiling the workspace and its tests (first time about 6 min on 2 cores), then running them"
	cargo build --workspace --bins
	MOTO_SERVER=$(CURDIR)/$(VENV)/bin/moto_server LOCALSTACK_PYTHON=$(CURDIR)/$(VENV_LOCALSTACK)/bin/python cargo test --workspace --all-targets
	@echo "the end-to-end tests again, on LocalStack"
	E2E_EMULATOR=localstack MOTO_SERVER=$(CURDIR)/$(VENV)/bin/moto_server LOCALSTACK_PYTHON=$(CURDIR)/$(VENV_LOCALSTACK)/bin/python cargo test --workspace --test e2e
	@echo "the library crates' documentation examples"
	cargo test --doc $(LIBRARIES)
	$(MAKE) package

## lint: rustfmt, clippy (warnings are errors), `make doc`, and the templates: sam validate (+ --lint),
## cfn-lint on the template and on its SAM translation for each QueueType and Encryption (and
## without the reference consumer), the same for infra/function.yaml,
## checkov on the translation as each QueueType and Encryption resolve it and on the raw template
## as a team's own pipeline scans it (0 failed; skips carry reasons)
lint: $(TOOLS) $(CHECKOV)
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings
	$(MAKE) doc
	sam validate -t infra/template.yaml
	sam validate --lint -t infra/template.yaml
	$(VENV)/bin/python infra/translate.py infra/template.yaml $(TRANSLATED)
	for q in $(QUEUE_TYPES); do for e in $(ENCRYPTIONS); do \
	  p="QueueType=$$q Encryption=$$e"; x=; \
	  [ $$e = aws-managed-key ] || { p="$$p CreateOrdersTopic=true"; x="OrdersProducerArns=$(LINT_PRODUCER)"; }; \
	  echo "cfn-lint: $$p" && \
	  cfn-lint --parameters $$p -- infra/template.yaml && \
	  cfn-lint --ignore-checks W3037 --parameters $$p -- $(TRANSLATED) && \
	  $(VENV)/bin/python infra/resolve.py $(TRANSLATED) target/infra/template-$$q-$$e.json $$p $$x || exit 1; \
	done; done
	$(VENV_CHECKOV)/bin/checkov $(foreach q,$(QUEUE_TYPES),$(foreach e,$(ENCRYPTIONS),-f target/infra/template-$(q)-$(e).json)) --framework cloudformation --skip-download --compact --quiet
	@echo "cfn-lint: ReferenceConsumer=false (a team's function in the consumer's place)"
	cfn-lint --parameters ReferenceConsumer=false -- infra/template.yaml
	cfn-lint --ignore-checks W3037 --parameters ReferenceConsumer=false -- $(TRANSLATED)
	$(VENV)/bin/python infra/resolve.py $(TRANSLATED) target/infra/template-no-consumer.json ReferenceConsumer=false
	@echo "infra/function.yaml (a team's function on a resq stack): sam validate, cfn-lint on it and its translation"
	sam validate -t infra/function.yaml
	sam validate --lint -t infra/function.yaml
	$(VENV)/bin/python infra/translate.py infra/function.yaml $(TRANSLATED_FUNCTION)
	cfn-lint -- infra/function.yaml
	cfn-lint --ignore-checks W3037 -- $(TRANSLATED_FUNCTION)
	$(VENV)/bin/python infra/resolve.py $(TRANSLATED_FUNCTION) target/infra/function-default.json
	$(VENV)/bin/python infra/resolve.py $(TRANSLATED_FUNCTION) target/infra/function-all.json $(LINT_FUNCTION_PARAMS)
	$(VENV_CHECKOV)/bin/checkov -f target/infra/template-no-consumer.json -f target/infra/function-default.json -f target/infra/function-all.json --framework cloudformation --skip-download --compact --quiet
	@echo "checkov on infra/template.yaml and infra/function.yaml as shipped (a team's pipeline runs it so)"
	$(VENV_CHECKOV)/bin/checkov -f infra/template.yaml --framework cloudformation --skip-download --compact --quiet
	$(VENV_CHECKOV)/bin/checkov -f infra/function.yaml --framework cloudformation --skip-download --compact --quiet

## docs: the book (docs/, mdBook) into target/book/; its links and shell snippets are checked
## by tests/e2e/docs.rs (make test)
docs: $(MDBOOK)
	$(VENV_DOCS)/bin/mdbook build docs
	@echo "the book: target/book/index.html"

arm-target:
	@rustup target list --installed | grep -qx $(ARM_TARGET) || rustup target add $(ARM_TARGET)

## build: both Lambdas for arm64 (target/lambda/{consumer,redriver}/bootstrap)
build: $(TOOLS) arm-target
	cargo lambda build --release --arm64

## deploy: check the parameters (resq stack check: the template's defaults, infra/samconfig.toml's
## parameter_overrides, then PARAMS="K=V ..."; refused when they could lose, double or stall),
## then build with SAM and deploy the stack (first time: cd infra && sam build && sam deploy
## --guided). With PARAMS, sam deploy gets the set checked: samconfig's values with PARAMS over
## them (its own --parameter-overrides would replace samconfig's, not add to them).
PARAMS ?=
export PARAMS
STACK_OVERRIDES := target/infra/parameter-overrides
deploy: $(TOOLS) arm-target
	@echo "resq stack check (the first time compiles resq, a few minutes on 2 cores)"
	cargo run -q -p resq-ops --bin resq -- stack check --deployed --parameter-overrides "$$PARAMS" --write-overrides $(STACK_OVERRIDES)
	cd infra && sam build && sam deploy $(if $(PARAMS),--parameter-overrides "$$(cat ../$(STACK_OVERRIDES))")

## bench: resq against Powertools (consumer) and a boto3 redriver, the redriver at scale
## (pipelined against sequential: an in-memory SQS with 10 ms per call, then LocalStack), zip
## sizes, cold start; prints a table and the `bench:` line, and updates bench/RESULTS.md
bench: $(TOOLS) $(BENCH_TOOLS) $(BENCH_NODE) $(LOCALSTACK) arm-target
	cargo lambda build --release --arm64 --output-format zip
	cargo build --release -p resq-consumer -p resq-redriver -p resq-bench
	./target/release/resq-bench run --localstack-python $(VENV_LOCALSTACK)/bin/python --versions "Alternatives: $$(grep -v '^#' bench/requirements.txt | tr '\n' ' ')$$(cd bench/node && node -p 'Object.entries(require("./package.json").dependencies).map(([k, v]) => k + "==" + v).join(" ")')"

translate: $(TOOLS)
	$(VENV)/bin/python infra/translate.py infra/template.yaml $(TRANSLATED)

## demo: the whole pipeline on a local emulator (1,000 orders, faults included), then an audit
demo: $(TOOLS) $(if $(filter localstack,$(EMULATOR)),$(LOCALSTACK)) translate
	$(BUILD)
	./target/debug/resq-local demo --orders $(ORDERS) --emulator $(or $(EMULATOR),moto) $(INSTALLS) --template $(TRANSLATED)

## chaos: the real function binaries on the local emulator with 5 % of their AWS calls failing
## and both killed at random (10,000 orders), then an audit; fails if anything is lost or doubled
chaos: $(TOOLS) $(if $(filter localstack,$(EMULATOR)),$(LOCALSTACK)) translate
	$(BUILD)
	./target/debug/resq-local chaos --orders $(CHAOS_ORDERS) --emulator $(or $(EMULATOR),moto) $(INSTALLS) --template $(TRANSLATED) --consumer-bin target/debug/consumer --redriver-bin target/debug/redriver

## soak: the pipeline over time on LocalStack (schedule every 2 s, TTL a minute, the alarm's
## period 10 s): a burst of permanent failures, a downstream outage, recovery; then an audit
soak: $(TOOLS) $(LOCALSTACK) translate
	$(BUILD)
	./target/debug/resq-local soak --localstack-python $(VENV_LOCALSTACK)/bin/python --moto-server $(VENV)/bin/moto_server --template $(TRANSLATED) --consumer-bin target/debug/consumer --redriver-bin target/debug/redriver

## fuzz: each cargo-fuzz target for FUZZ_SECONDS (not in CI); prints the executions run.
## Installs cargo-fuzz if missing; builds without a sanitizer, so a stable toolchain does.
fuzz:
	@command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
	@set -o pipefail; mkdir -p target; for t in $(FUZZ_TARGETS); do \
	  mkdir -p fuzz/corpus/$$t; \
	  seeds=$$( [ $$t = consumer_event ] && echo events ); \
	  cargo fuzz run -s none --fuzz-dir fuzz $$t fuzz/corpus/$$t $$seeds -- \
	    -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 > target/fuzz-$$t.log 2>&1 \
	    || { tail -40 target/fuzz-$$t.log; echo "fuzz: $$t FAILED (target/fuzz-$$t.log; crash input under fuzz/artifacts/$$t)"; exit 1; }; \
	  echo "fuzz: target=$$t seconds=$(FUZZ_SECONDS) executions=$$(grep -o 'stat::number_of_executed_units: [0-9]*' target/fuzz-$$t.log | grep -o '[0-9]*$$') corpus=$$(ls fuzz/corpus/$$t | wc -l)"; \
	done

## local: the live pipeline (until Ctrl-C): the emulator (LocalStack unless EMULATOR=moto) with
## the stack, Lambda's event source mapping and the redriver's schedule (SCHEDULE_SECONDS, else
## the template's), invoking `make watch` while it runs, else the built binaries
local: $(TOOLS) $(if $(filter moto,$(EMULATOR)),,$(LOCALSTACK)) translate
	$(BUILD)
	./target/debug/resq-local up --emulator $(or $(EMULATOR),localstack) $(INSTALLS) --template $(TRANSLATED) --env-file $(LOCAL_ENV) --watch-port $(WATCH_PORT) $(if $(SCHEDULE_SECONDS),--schedule-seconds $(SCHEDULE_SECONDS))

## watch: cargo lambda watch on 127.0.0.1 with the local stack's environment (make local first);
## edits rebuild the function, and the next invocation runs them. Metric lines go to the stack's
## CloudWatch as Lambda's log pipeline would send them.
watch: $(TOOLS) target/debug/resq-local
	@test -f $(LOCAL_ENV) || { echo "no local stack: run 'make local' in another terminal first"; exit 1; }
	@echo "compiling the functions as cargo lambda watch runs them (first time about 3 min on 2 cores)"
	cargo build
	@echo "cargo lambda watch on 127.0.0.1:$(WATCH_PORT); make local's pipeline now invokes it"
	set -o pipefail; cargo lambda watch --invoke-address 127.0.0.1 --invoke-port $(WATCH_PORT) --env-file $(LOCAL_ENV) 2>&1 | ./target/debug/resq-local watch-logs --env-file $(LOCAL_ENV)

## invoke-consumer / invoke-redriver: send a fixture event to `make watch`, its times moved to
## now (CONSUMER_EVENT / REDRIVER_EVENT: your own event file)
invoke-consumer: $(TOOLS) target/debug/resq-local
	@mkdir -p target/events
	./target/debug/resq-local event $(CONSUMER_EVENT) > target/events/consumer.json
	cargo lambda invoke consumer --invoke-address 127.0.0.1 --invoke-port $(WATCH_PORT) --data-file target/events/consumer.json

invoke-redriver: $(TOOLS) target/debug/resq-local
	@mkdir -p target/events
	./target/debug/resq-local event $(REDRIVER_EVENT) > target/events/redriver.json
	cargo lambda invoke redriver --invoke-address 127.0.0.1 --invoke-port $(WATCH_PORT) --data-file target/events/redriver.json

# resq-local as `make local` built it (the invoke targets and watch's log pipe need only that:
# no rebuild of the workspace next to a running watch)
target/debug/resq-local:
	$(BUILD)

## install: the operator's tool `resq` on your PATH (~/.cargo/bin)
install:
	cargo install --locked --path cli

## doc: the library crates' documentation as docs.rs builds it, warnings (broken or private
## links, …) as errors
doc:
	RUSTDOCFLAGS="-D warnings" cargo doc --no-deps $(LIBRARIES)

## package: `cargo package` of the five library crates together, as `cargo publish --workspace`
## would upload them: their files (no tests, no fixtures), their manifests, and each one built
## alone from its package, the others through cargo's local registry overlay (offline). About
## 5 min of CPU after `make test` (each crate's own feature set recompiles the AWS SDK crates).
## cargo takes a registry crate of an unchanged version as unchanged: it unpacks the overlay's
## crates into $CARGO_HOME/registry/src/-HASH/ (HASH of the overlay's path) once, and keeps what
## it built from them in target/debug. A later commit packaged at the same path would be
## verified against an earlier commit's sources, so both go first (the five crates rebuild).
package:
	rm -rf $${CARGO_HOME:-$$HOME/.cargo}/registry/src/-*/resq-*
	cargo clean --offline --profile dev $(LIBRARIES)
	cargo package --offline --allow-dirty $(LIBRARIES) $(WORKSPACE_DEV_PROFILE)

fmt:
	cargo fmt --all

clean:
	cargo clean
	rm -rf $(VENV) $(VENV_CHECKOV) $(VENV_BENCH) $(VENV_LOCALSTACK) $(VENV_DOCS)
