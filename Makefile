# The two commands a new user needs: `make serve` and `make test`. Each sets everything up first.
.PHONY: setup system-deps serve test test-unit test-docker lint eval train load up

VENV := .venv
BIN := $(VENV)/bin

setup:
	@scripts/setup.sh

system-deps:
	@scripts/system-deps.sh

serve: setup
	$(BIN)/reflectrm serve

test: setup system-deps
	$(BIN)/python -m pytest tests

test-unit: setup
	$(BIN)/python -m pytest tests/unit tests/api

# The images built and run on a real Docker engine (part of `make test` too).
test-docker: setup system-deps
	$(BIN)/python -m pytest tests/docker

lint: setup
	$(BIN)/ruff check service tests scripts loadtests
	$(BIN)/ruff format --check service tests scripts loadtests
	$(BIN)/mypy service/reflectrm

eval: setup
	$(BIN)/reflectrm eval $(ARGS)

train: setup
	$(BIN)/reflectrm train $(ARGS)

up:
	docker compose up -d
