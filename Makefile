# chatloop: `make help` lists the targets. Every AWS target honours AWS_ENDPOINT_URL and AWS_REGION, and STACK /
# MODE / FUNCTION can be overridden: make deploy-lambda-fast STACK=chatloop-dev MODE=buffered
SHELL := /bin/bash
.DEFAULT_GOAL := help

# Prefer the Lambda runtime's Python (3.12) for the virtualenv; fall back to python3 (3.11 works too).
PYTHON ?= $(shell for p in python3.12 $$(ls -d $$HOME/.pyenv/versions/3.12*/bin/python3.12 /root/.pyenv/versions/3.12*/bin/python3.12 2>/dev/null) python3; do \
            $$p -c 'import sys; assert sys.version_info >= (3, 11)' >/dev/null 2>&1 && { echo $$p; break; }; done)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The JavaScript the tests and the bench drive (the Vercel AI SDK, gpt-tokenizer), pinned by package-lock.json and
# installed at the root: node_modules stays out of tests/, and tests/clients/*.mjs find it by walking up.
NODE_CLIENTS := node_modules/.installed

STACK ?= chatloop
# The template's ResponseMode: stream (the default) or buffered. Each mode has its own function (template.yaml);
# both log to one group, so `make logs` is the same in either.
MODE ?= stream
FUNCTION ?= $(STACK)-chat$(if $(filter buffered,$(MODE)),-buffered)
ALIAS ?= live
LOG_GROUP ?= /aws/lambda/$(STACK)-chat
AWS_REGION ?= $(or $(AWS_DEFAULT_REGION),us-east-1)
ARCH ?= arm64
SINCE ?= 10m
FILTER ?=
FOLLOW ?=
EVENT ?= events/rest-chat.json
PORT ?= 8000
DEPLOY_BUCKET ?=
SECRET_ARN ?=
BEDROCK_MODELS ?=
PARAMS ?=
export AWS_REGION FILTER
AWS = $(BIN)/aws --region $(AWS_REGION) $(if $(AWS_ENDPOINT_URL),--endpoint-url $(AWS_ENDPOINT_URL))

.PHONY: help install test lint build deploy deploy-lambda-fast logs logs-decisions insights secret budget invoke run bench docs layout clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-20s %s\n", $$1, $$2}'

install: $(STAMP) $(NODE_CLIENTS) ## create .venv and install runtime + dev requirements (and the JS test clients)

$(STAMP): requirements.txt requirements-dev.txt
	@test -n "$(PYTHON)" || { echo "no Python >= 3.11 found"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check --upgrade pip
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements.txt -r requirements-dev.txt
	@touch $@

$(NODE_CLIENTS): package.json package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
	  npm ci --no-audit --no-fund --loglevel=error && touch $@; \
	else echo "npm not found: the Vercel AI SDK client tests will be skipped"; fi

# The suite runs in JOBS pytest-xdist workers (5 on 2 cores: most tests wait on servers, subprocesses and sockets
# rather than compute); JOBS=1 or SERIAL=1 runs it in one process, one test at a time. --dist loadfile keeps each
# file on one worker, so its module fixtures (servers, browsers, fleets) start once; the files go out longest first
# (tests/support/schedule.py), not in xdist's order by number of tests. langsmith (a langchain dependency) registers a
# pytest plugin no test uses; importing it costs ~1 s of CPU in each of the six processes, so it is not loaded.
JOBS ?= $(if $(SERIAL),1,5)
test: install ## run the whole test suite (installs first if needed); FAST=1 skips the slow suites (CI runs all); SERIAL=1 one at a time
	$(BIN)/python -m pytest -p no:langsmith_plugin --durations=20 $(if $(filter-out 1,$(JOBS)),-n $(JOBS) --dist loadfile --no-loadscope-reorder) $(if $(FAST),-m "not slow")

lint: install ## ruff (lint + format), mypy (--strict on src/), cfn-lint on the SAM template and its translation
	$(BIN)/ruff check src tests scripts bench
	$(BIN)/ruff format --check src tests scripts bench
	$(BIN)/mypy --strict src/chatloop src/app.py
	$(BIN)/mypy tests bench scripts
	$(BIN)/cfn-lint template.yaml
	$(BIN)/python scripts/translate_template.py template.yaml build/template.cfn.json
	@# W2001/W3005: SAM itself resolves the usage-plan parameters and adds DependsOn when it translates;
	@# W1028: SAM wraps a conditional function's integrations in an Fn::If on the condition its API already has.
	$(BIN)/cfn-lint --ignore-checks W2001 W3005 W1028 -- build/template.cfn.json

build: install ## build/layer.zip (packages + Deno for ARCH) and build/function.zip (src/), no Docker
	$(BIN)/python scripts/package.py all --arch $(ARCH)

# SECRET_ARN, MODEL_CHAIN and BEDROCK_MODELS are optional: a chain of bedrock: models needs no secret, and the role
# is granted the chain's bedrock: models unless BEDROCK_MODELS names them (scripts/deploy_params.py, which prints
# what the stack will use and stops a deploy whose chain names a Bedrock model the role would not be granted).
# MODEL_CHAIN counts only on make's command line: the one in your environment is for make run, not for the stack.
DEPLOY_CHAIN = $(if $(filter command line,$(origin MODEL_CHAIN)),$(MODEL_CHAIN))
deploy: build ## deploy the whole stack (needs DEPLOY_BUCKET; SECRET_ARN, MODEL_CHAIN, BEDROCK_MODELS, MODE, PARAMS optional)
	@test -n "$(DEPLOY_BUCKET)" || { echo "set DEPLOY_BUCKET=<an S3 bucket for the build artefacts>"; exit 1; }
	@case "$(MODE)" in stream|buffered) ;; *) echo "MODE must be stream or buffered, not '$(MODE)'"; exit 1;; esac
	@$(BIN)/python scripts/deploy_params.py --mode $(MODE) --arch $(ARCH) --secret-arn "$(SECRET_ARN)" \
	  --model-chain "$(DEPLOY_CHAIN)" --bedrock-models "$(BEDROCK_MODELS)" -- $(PARAMS) > build/.parameter-overrides
	$(AWS) cloudformation package --template-file template.yaml --s3-bucket $(DEPLOY_BUCKET) \
	  --s3-prefix $(STACK) --output-template-file build/packaged.yaml
	@# The template goes to the bucket too: sent inline, CloudFormation takes at most 51,200 bytes (this one is near).
	$(AWS) cloudformation deploy --template-file build/packaged.yaml --stack-name $(STACK) \
	  --s3-bucket $(DEPLOY_BUCKET) --s3-prefix $(STACK) \
	  --capabilities CAPABILITY_IAM CAPABILITY_AUTO_EXPAND --no-fail-on-empty-changeset \
	  --parameter-overrides $$(cat build/.parameter-overrides) $(PARAMS)
	$(AWS) cloudformation describe-stacks --stack-name $(STACK) --query 'Stacks[0].Outputs' --output table

deploy-lambda-fast: install ## zip src/, update MODE's function, publish a version, move the ALIAS (live) to it
	@$(BIN)/python scripts/package.py function >/dev/null
	@$(AWS) lambda update-function-code --function-name $(FUNCTION) --zip-file fileb://build/function.zip \
	  --query CodeSha256 --output text > build/.code-sha256
	@$(AWS) lambda wait function-updated --function-name $(FUNCTION)
	@# Every route and the Function URL invoke the alias (template.yaml), so code that is not published never runs.
	@# With SnapStart on, publishing takes the snapshot: the alias moves once the version is active.
	@$(AWS) lambda publish-version --function-name $(FUNCTION) --code-sha256 "$$(cat build/.code-sha256)" \
	  --query Version --output text > build/.version
	@$(AWS) lambda wait published-version-active --function-name $(FUNCTION) --qualifier "$$(cat build/.version)"
	@$(AWS) lambda update-alias --function-name $(FUNCTION) --name $(ALIAS) \
	  --function-version "$$(cat build/.version)" --query FunctionVersion --output text >/dev/null
	@echo "updated $(FUNCTION): CodeSha256 $$(cat build/.code-sha256), version $$(cat build/.version) is now $(ALIAS)"

logs: install ## the function's log events of the last SINCE (10m), one per line; FILTER=..., FOLLOW=1
	@$(BIN)/python scripts/logs.py --log-group $(LOG_GROUP) --since $(SINCE) --filter "$$FILTER" $(if $(FOLLOW),--follow)

logs-decisions: install ## only the 'Tool execution decision' lines
	@$(BIN)/python scripts/logs.py --log-group $(LOG_GROUP) --since $(SINCE) --filter '"Tool execution decision"' $(if $(FOLLOW),--follow)

insights: install ## the saved Logs Insights query "why did it stop calling tools?" over the last SINCE (10m)
	@$(BIN)/python scripts/insights.py --log-group $(LOG_GROUP) --since $(SINCE)

secret: install ## create or update the provider keys secret from GROQ_API_KEY / OPENAI_API_KEY in your environment
	@$(BIN)/python scripts/secret.py --name $(STACK)/provider-keys

# make budget CALLER=apikey:k1x2 TOKENS_PER_DAY=200000: one caller's overrides in STACK's conversation table (TABLE=name
# for another table, LOCAL=1 for make run's SQLite file); each limit a number, unlimited, or default; none: show them.
BUDGET_LIMITS := TOKENS_PER_DAY TOKENS_PER_MONTH COST_PER_DAY_USD REQUESTS_PER_MINUTE TOKENS_PER_MINUTE CONCURRENT_TURNS
budget: install ## set or show one caller's budget overrides: CALLER=... TOKENS_PER_DAY=... (LOCAL=1 for make run)
	@test -n "$(CALLER)" || { echo "set CALLER=<the caller identity, as GET /v1/usage shows it>"; exit 1; }
	@$(BIN)/python scripts/budget.py --caller "$(CALLER)" \
	  $(if $(LOCAL),--local,$(if $(TABLE),--table $(TABLE),--stack $(STACK))) \
	  $(foreach v,$(BUDGET_LIMITS),$(if $($(v)),--$(subst _,-,$(shell echo $(v) | tr A-Z a-z)) $($(v))))

invoke: install ## run the handler locally on EVENT=events/<file>.json (no Docker) and print the response
	@$(BIN)/python scripts/invoke_local.py $(EVENT)

run: install ## serve the app on 127.0.0.1:PORT (8000); the offline demo model when no key is set; bedrock: models sign with your AWS credentials (docs/development.md)
	$(BIN)/python -m uvicorn app:app --app-dir src --host 127.0.0.1 --port $(PORT)

bench: install ## measure the loop, sandbox, cold start and fallback; writes bench/RESULTS.md; SECTION=lambda_size: that one only
	$(if $(filter lambda_size,$(SECTION)),$(BIN)/python -m bench.lambda_size --write bench/RESULTS.md,$(if $(SECTION),@echo "SECTION: only lambda_size runs alone"; exit 1,$(BIN)/python -m bench))

docs: install ## build the documentation site (docs/, mkdocs-material) into build/site; --strict: a broken link fails it
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

layout: ## rewrite the source map in docs/architecture.md from the packages (tests/docs/test_layout_tree.py checks it)
	$(BIN)/python -m scripts.layout --write

clean: ## remove build outputs and caches (keeps .venv)
	rm -rf build .pytest_cache .ruff_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
