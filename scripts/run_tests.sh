#!/usr/bin/env bash
# The whole test suite but the benchmarks' smoke tests (marked `bench`, run by `make bench-smoke`), in two passes, to keep CI short on 2 cores: the e2e tests, which mostly wait on Airflow's
# scheduler loops, run beside the unit and integration tests, in two halves, and the e2e tests that mostly wait on
# clocks (a freshness interval, one DAG run) in a third, small stream (their output follows those's); then the tests
# marked `serial` (timing margins that assume the machine to itself) run alone. Fails if any pass fails.
# Each pytest gets its own --basetemp: a second pytest on the default one would reset /tmp/pytest-of-<user> to
# 0700 under the first one's PostgreSQL server, which runs as another OS user (tests/pg_server.py).
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${VENV:-.venv}/bin/python"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/tiering-tests.XXXXXX")"
chmod 755 "$TMP"

# The e2e tests mostly wait on Airflow's scheduler loops: two halves of them run at once, beside the others. The
# first half holds the longest modules (a wheel installed into a fresh virtualenv, a round past its timeout, the
# demo, and two deployments side by side, one of them Celery's), the second the rest. The CLI's and the alerts' e2e tests, whose clocks a loaded machine overran, are marked
# serial and run in the last pass, alone. Long integration modules ride along, so the unit and integration tests
# are not the critical path: with the first half the rounds on a standalone cluster, with the second the split attempts on
# one and the changes of a hot table's shape (the three passes measured 15:23, 16:54 and 13:07 with the split
# attempts in the first half).
SIDE_FIRST=(tests/integration/test_spark_standalone.py)
SIDE_REST=(tests/integration/test_split_attempts.py tests/integration/test_shape_changes.py)
# A minute of migrations under a writer, with rounds killed at random (MariaDB's is marked serial), and the change rounds in bounded memory (both
# streams'): they ride with the third stream, which has time (the first three streams measured 21-22 minutes with
# PostgreSQL's, that one 10).
SIDE_WAITING=(tests/integration/test_change_stream_migrations.py tests/integration/test_change_rounds_bounded.py
  tests/integration/test_binlog_shape.py tests/integration/test_binlog_loads.py)
# The stream groups' DAG runs (twenty tables under the scheduler, about 6 minutes each database) are split between the
# first half and the third stream, one database each.
STREAM_GROUPS=tests/e2e/test_stream_group_dags.py::test_a_group_of_twenty_tables_reads_its_database_once_through_dag_runs
E2E_FIRST=(tests/e2e/test_wheel_install.py tests/e2e/test_round_timeout.py tests/e2e/test_demo.py
  tests/e2e/test_celery_executor.py "${STREAM_GROUPS}[mariadb]")
# Mostly idle (a table's freshness interval waited out, the harness's own DAG run, re-created tables' and merge-on-read
# tables' DAG runs): on their own, they cost the other streams little CPU and the run their wall time, which in a
# half would add to it (measured: the serial pass, with the first two, 3:01 at 5-30% of the 2 cores).
E2E_WAITING=(tests/e2e/test_deferral.py tests/e2e/test_airflow_cluster.py tests/e2e/test_shape_through_dags.py
  tests/e2e/test_status_in_sql.py tests/e2e/test_merge_on_read_dags.py "${STREAM_GROUPS}[postgres]")
E2E_REST=()
for module in tests/e2e/test_*.py; do
  [[ " ${E2E_FIRST[*]} ${E2E_WAITING[*]} " == *" $module "* || "$STREAM_GROUPS" == "$module::"* ]] || E2E_REST+=("$module")
done
MAIN_IGNORES=()
for module in "${SIDE_FIRST[@]}" "${SIDE_REST[@]}" "${SIDE_WAITING[@]}"; do
  MAIN_IGNORES+=(--ignore "$module")
done
"$PY" -m pytest "${E2E_FIRST[@]}" "${SIDE_FIRST[@]}" -m "not serial and not bench" --basetemp "$TMP/e2e1" "$@" >"$TMP/e2e1.log" 2>&1 &
e2e1_pid=$!
"$PY" -m pytest "${E2E_REST[@]}" "${SIDE_REST[@]}" -m "not serial and not bench" --basetemp "$TMP/e2e2" "$@" >"$TMP/e2e2.log" 2>&1 &
e2e2_pid=$!
"$PY" -m pytest "${E2E_WAITING[@]}" "${SIDE_WAITING[@]}" -m "not serial and not bench" --basetemp "$TMP/e2e3" "$@" >"$TMP/e2e3.log" 2>&1 &
e2e3_pid=$!
trap 'kill "$e2e1_pid" "$e2e2_pid" "$e2e3_pid" 2>/dev/null' INT TERM
"$PY" -m pytest tests/unit tests/integration "${MAIN_IGNORES[@]}" -m "not serial and not bench" --basetemp "$TMP/main" "$@"
main=$?
wait "$e2e1_pid"
e2e1=$?
wait "$e2e2_pid"
e2e2=$?
wait "$e2e3_pid"
e2e3=$?
e2e=$(( e2e1 != 0 ? e2e1 : e2e2 != 0 ? e2e2 : e2e3 ))
echo "================ e2e tests, first half, and the rounds on a standalone cluster (ran beside the tests above) ================"
cat "$TMP/e2e1.log"
echo "================ e2e tests, second half, the split attempts and the changes of shape (ran beside the tests above) ================"
cat "$TMP/e2e2.log"
echo "================ e2e tests that wait on clocks, and a change stream's migrations (ran beside the tests above) ================"
cat "$TMP/e2e3.log"
echo "================ serial tests (alone) ================"
"$PY" -m pytest tests -m "serial and not bench" --basetemp "$TMP/serial" "$@"
serial=$?
echo "exit codes: unit+integration $main, e2e $e2e, serial $serial"
rm -rf "$TMP"
test "$main" -eq 0 && test "$e2e" -eq 0 && test "$serial" -eq 0
