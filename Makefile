VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.setup-done

.PHONY: setup demo test test-fast lint bench clean

setup: $(STAMP)

$(STAMP): requirements.lock pyproject.toml scripts/setup.sh
	VENV=$(VENV) bash scripts/setup.sh
	touch $(STAMP)

## Tier the embedded demo tables twice with Airflow + Spark (local) + Iceberg (SQLite catalog), print statuses.
demo: setup
	$(BIN)/python demo/run_demo.py

## The whole test suite: lint, unit, integration (PostgreSQL, Spark, pyiceberg), e2e (real Airflow scheduler).
test: setup
	$(BIN)/ruff check .
	$(BIN)/python -m pytest tests

## Unit tests only (seconds).
test-fast: setup
	$(BIN)/python -m pytest tests/unit -q

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

## Benchmark a full round of TPC-H lineitem (SF=1 by default) against its baselines.
bench: setup
	$(BIN)/python benchmarks/bench_round.py --sf $${SF:-1}

clean:
	rm -rf .demo tests/artifacts benchmarks/results
