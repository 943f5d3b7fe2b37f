VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.setup-done

.PHONY: setup spark-cds demo test test-fast bench-smoke lint bench bench-dag-run bench-status-page soak spark-connect spark-standalone clean

# The Tiering page is rebuilt whenever its sources changed (a no-op otherwise), even when the venv is up to date.
setup: $(STAMP)
	@$(BIN)/python airflow_provider_tiering/plugins/www/build_page.py

$(STAMP): requirements.lock pyproject.toml scripts/setup.sh
	VENV=$(VENV) bash scripts/setup.sh
	touch $(STAMP)

## Tier the embedded demo tables twice with Airflow + Spark (local) + Iceberg (SQLite catalog), print statuses.
demo: setup spark-cds
	$(BIN)/python demo/run_demo.py

## The whole suite: lint, type check, unit, integration (PostgreSQL, MariaDB, Spark, pyiceberg), e2e (real Airflow scheduler); the e2e
## tests run beside the others (in two halves, and those that wait on clocks or DAG runs in a third stream), then the short
## chaos run alone (scripts/run_tests.sh).
test: setup spark-cds
	$(BIN)/ruff check .
	$(BIN)/mypy
	VENV=$(VENV) bash scripts/run_tests.sh

## The benchmarks at a tiny size (tests marked `bench`): each still runs, compares and reports. Run by hand (not in CI).
bench-smoke: setup spark-cds
	tmp=$$(mktemp -d) && chmod 755 $$tmp && $(BIN)/python -m pytest tests -m bench --basetemp $$tmp/bench; \
	  rc=$$?; rm -rf $$tmp; exit $$rc

## Unit tests only (seconds).
test-fast: setup
	$(BIN)/python -m pytest tests/unit -q

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

## The benchmark suite (TPC-H, SF=1 by default; about 25 minutes): B1 full load vs COPY, bare Spark, pyiceberg,
## dlt; B2 incremental; B3 8 tables in one DAG run; B4 memory. Writes benchmarks/results/ and docs/benchmarks.md.
bench: setup spark-cds
	bash scripts/setup_bench_venv.sh
	$(BIN)/python -m benchmarks.suite --sf $${SF:-1}

## Chaos soak (MINUTES, default 20): writers committing out of cursor order, and one updating and deleting on a
## change-stream table, while rounds run and faults strike (SIGKILL of the round, PostgreSQL restarts, catalog
## outages, competing lake commits, full disk); then every lake table is checked against its hot table (a
## change-stream table by key, and its slot against the lake's LSN). Prints rounds, faults by kind, rows checked,
## lost, duplicated, extra and differing.
soak: setup spark-cds
	$(BIN)/python -m tests.chaos.soak --minutes $${MINUTES:-20} --json tests/artifacts/soak.json $${SOAK_ARGS:-}

## One DAG run of a 200-table tiering DAG with nothing to tier vs 200 empty tasks, under a real Airflow scheduler.
bench-dag-run: setup
	$(BIN)/python -m benchmarks.bench_dag_run --tables $${TABLES:-200}

## The Tiering page and its list endpoint with 500 tables, in headless Chromium against a real api-server.
bench-status-page: setup
	$(BIN)/python -m benchmarks.bench_status_page

## A Spark Connect server (the venv's pyspark) on 127.0.0.1, port SPARK_CONNECT_PORT (15002); scripts/spark_connect_server.sh stop.
spark-connect: setup
	VENV=$(VENV) bash scripts/spark_connect_server.sh start

## A Spark standalone cluster (the venv's pyspark) on 127.0.0.1: a master (spark://127.0.0.1:7077, status on :8080)
## and WORKERS (2) one-core workers; logs in .cache/spark-standalone/; scripts/spark_standalone.sh status|stop.
spark-standalone: setup
	VENV=$(VENV) bash scripts/spark_standalone.sh start $${WORKERS:-2}

## Record this machine's class data sharing archive for local Spark driver JVMs once (a no-op when it exists):
## later sessions start in about half the time. AIRFLOW_PROVIDER_TIERING_CDS_DIR picks the directory (off: none).
spark-cds: setup
	$(BIN)/python -m airflow_provider_tiering.spark.class_data_sharing

clean:
	rm -rf .demo tests/artifacts benchmarks/results
