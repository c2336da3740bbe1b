# The two commands a new user needs: `make serve` and `make test`. Each sets everything up first.
.PHONY: setup system-deps serve test test-unit test-docker lint eval train load bench up

VENV := .venv
BIN := $(VENV)/bin

setup:
	@scripts/setup.sh

system-deps:
	@scripts/system-deps.sh

serve: setup
	$(BIN)/reflectrm serve

# The Docker image tests build multi-GB images: they run in `make test-docker`, not here. The suite
# covers both distributions: tests/ (the serving package) and harness/tests (the harness).
test: setup system-deps
	$(BIN)/python -m pytest tests harness/tests --ignore=tests/docker

test-unit: setup
	$(BIN)/python -m pytest tests/unit tests/api harness/tests

# The images built and run on a real Docker engine (root, or a running Docker engine).
test-docker: setup system-deps
	$(BIN)/python -m pytest tests/docker

lint: setup
	$(BIN)/ruff check service harness tests scripts loadtests studies examples
	$(BIN)/ruff format --check service harness tests scripts loadtests studies examples
	$(BIN)/mypy service/reflectrm harness/reflectrm_harness loadtests studies examples scripts

eval: setup
	$(BIN)/reflectrm eval $(ARGS)

train: setup
	$(BIN)/reflectrm train $(ARGS)

# A short bounded load test: starts the service on a free loopback port, runs the steady scenario
# (4 users, 16 judgments, max_tokens 32), stops the service, prints the summary. ARGS adds options.
load: setup
	$(BIN)/python -m loadtests.run --scenario steady --users 4 --requests 16 --max-tokens 32 $(ARGS)

# The benchmark: the engine's limit, the service and vllm serve peers side by side, interleaved
# (c = 1, 4, 16; about an hour on 2 CPU cores). ARGS="--smoke" for a check in a few minutes.
bench: setup
	$(BIN)/python -m loadtests.bench $(ARGS)

up:
	docker compose up -d
