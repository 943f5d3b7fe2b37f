#!/usr/bin/env bash
# The whole test suite in two passes, to keep CI short on 2 cores: the e2e tests, which mostly wait on Airflow's
# scheduler loops, run beside the unit and integration tests (their output follows those's); then the tests
# marked `serial` (timing-sensitive or machine-hogging) run alone. Fails if any pass fails.
# Each pytest gets its own --basetemp: a second pytest on the default one would reset /tmp/pytest-of-<user> to
# 0700 under the first one's PostgreSQL server, which runs as another OS user (tests/pg_server.py).
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${VENV:-.venv}/bin/python"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/tiering-tests.XXXXXX")"
chmod 755 "$TMP"

"$PY" -m pytest tests/e2e -m "not serial" --basetemp "$TMP/e2e" "$@" >"$TMP/e2e.log" 2>&1 &
e2e_pid=$!
trap 'kill "$e2e_pid" 2>/dev/null' INT TERM
"$PY" -m pytest tests/unit tests/integration -m "not serial" --basetemp "$TMP/main" "$@"
main=$?
wait "$e2e_pid"
e2e=$?
echo "================ e2e tests (ran beside the tests above) ================"
cat "$TMP/e2e.log"
echo "================ serial tests (alone) ================"
"$PY" -m pytest tests -m serial --basetemp "$TMP/serial" "$@"
serial=$?
echo "exit codes: unit+integration $main, e2e $e2e, serial $serial"
rm -rf "$TMP"
test "$main" -eq 0 && test "$e2e" -eq 0 && test "$serial" -eq 0
