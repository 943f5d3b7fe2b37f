#!/usr/bin/env bash
# The whole test suite but the benchmarks' smoke tests (marked `bench`, run by `make bench-smoke`), in two passes, to
# keep CI short on 2 cores: four pytest processes at once (the e2e tests, which mostly wait on Airflow's scheduler
# loops, in two halves, and the unit and integration tests in two halves; the others' output follows the first's);
# then the tests marked `serial` (timing-sensitive or machine-hogging) run alone. Fails if any pass fails.
# Each pytest gets its own --basetemp: a second pytest on the default one would reset /tmp/pytest-of-<user> to
# 0700 under the first one's PostgreSQL server, which runs as another OS user (tests/pg_server.py).
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${VENV:-.venv}/bin/python"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/tiering-tests.XXXXXX")"
chmod 755 "$TMP"

# Four pytest processes share the 2 cores, balanced by their modules' durations: the e2e tests, which mostly wait on
# Airflow's scheduler loops, in two halves (the first holds the longest: a wheel installed into a fresh virtualenv,
# the CLI and the demo), each with long integration modules riding along (rounds on a standalone cluster; the changes
# of a hot table's shape); the long merge, change-stream, maintenance and README modules with a round past its
# timeout; and everything else (new modules included), with two e2e modules. `time` counted 24 CPU minutes (user and
# system) in a 21-minute run of three such processes: they wait often enough to leave room for a fourth.
SIDE_FIRST=(tests/integration/test_spark_standalone.py tests/integration/test_split_attempts.py)
SIDE_REST=(tests/integration/test_shape_changes.py)
MAIN_LONG=(tests/integration/test_merge_by_cursor.py tests/integration/test_key_reconciliation.py
  tests/integration/test_change_rounds_bounded.py tests/integration/test_lake_maintenance.py
  tests/integration/test_change_stream.py tests/integration/test_readme_examples.py tests/e2e/test_round_timeout.py)
MAIN_E2E=(tests/e2e/test_maintenance.py tests/e2e/test_recovered_events.py)
E2E_FIRST=(tests/e2e/test_wheel_install.py tests/e2e/test_cli.py tests/e2e/test_demo.py)
E2E_REST=()
for module in tests/e2e/test_*.py; do
  [[ " ${E2E_FIRST[*]} ${MAIN_LONG[*]} ${MAIN_E2E[*]} " == *" $module "* ]] || E2E_REST+=("$module")
done
MAIN_IGNORES=()
for module in "${SIDE_FIRST[@]}" "${SIDE_REST[@]}" "${MAIN_LONG[@]}"; do
  MAIN_IGNORES+=(--ignore "$module")
done
"$PY" -m pytest "${E2E_FIRST[@]}" "${SIDE_FIRST[@]}" -m "not serial and not bench" --basetemp "$TMP/e2e1" "$@" >"$TMP/e2e1.log" 2>&1 &
e2e1_pid=$!
"$PY" -m pytest "${E2E_REST[@]}" "${SIDE_REST[@]}" -m "not serial and not bench" --basetemp "$TMP/e2e2" "$@" >"$TMP/e2e2.log" 2>&1 &
e2e2_pid=$!
"$PY" -m pytest "${MAIN_LONG[@]}" -m "not serial and not bench" --basetemp "$TMP/long" "$@" >"$TMP/long.log" 2>&1 &
long_pid=$!
trap 'kill "$e2e1_pid" "$e2e2_pid" "$long_pid" 2>/dev/null' INT TERM
"$PY" -m pytest tests/unit tests/integration "${MAIN_E2E[@]}" "${MAIN_IGNORES[@]}" -m "not serial and not bench" \
  --basetemp "$TMP/main" "$@"
main=$?
wait "$long_pid"
long=$?
main=$(( main != 0 ? main : long ))
wait "$e2e1_pid"
e2e1=$?
wait "$e2e2_pid"
e2e2=$?
e2e=$(( e2e1 != 0 ? e2e1 : e2e2 ))
echo "================ the long integration modules and a round past its timeout (ran beside the tests above) ================"
cat "$TMP/long.log"
echo "================ e2e tests, first half, the benchmarks at a tiny size, the cluster rounds (ran beside the tests above) ================"
cat "$TMP/e2e1.log"
echo "================ e2e tests, second half, and the changes of shape (ran beside the tests above) ================"
cat "$TMP/e2e2.log"
echo "================ serial tests (alone) ================"
"$PY" -m pytest tests -m "serial and not bench" --basetemp "$TMP/serial" "$@"
serial=$?
echo "exit codes: unit+integration $main, e2e $e2e, serial $serial"
rm -rf "$TMP"
test "$main" -eq 0 && test "$e2e" -eq 0 && test "$serial" -eq 0
