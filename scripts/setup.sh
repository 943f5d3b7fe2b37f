#!/usr/bin/env bash
# Set up a fresh machine for `make demo` / `make test`: system packages, then the pinned virtualenv.
set -euo pipefail
cd "$(dirname "$0")/.."
# pip's and apt's chatter (index URLs, retries of unreachable mirrors) is shown only when they fail
# shellcheck source=scripts/quietly.sh
source scripts/quietly.sh
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}

need_apt=()
command -v java >/dev/null 2>&1 || need_apt+=(openjdk-17-jre-headless)
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || need_apt+=(postgresql)
# the wal2json logical decoding plugin, which benchmarks/bench_cdc_decoding.py (and its smoke test) compares with pgoutput
ls /usr/lib/postgresql/*/lib/wal2json.so >/dev/null 2>&1 || need_apt+=(postgresql-15-wal2json)
# MariaDB hot tables: the tests start their own server (testbed/mariadb_server.py), never the system service
command -v mariadbd >/dev/null 2>&1 || need_apt+=(mariadb-server)
command -v sqlite3 >/dev/null 2>&1 || need_apt+=(sqlite3)
# the CeleryExecutor test's broker (tests/e2e/test_celery_executor.py starts its own server on 127.0.0.1)
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)
# headless browser for the UI e2e tests and benchmarks/bench_status_page.py (same Debian version for both)
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need_apt+=(chromium-driver)
# builds the Tiering page (airflow_provider_tiering/plugins/www: TypeScript, React, Vite) into the package
command -v npm >/dev/null 2>&1 || need_apt+=(nodejs npm)
# validates docker-compose.yml offline (no container engine needed) in tests/integration/test_compose.py
command -v docker-compose >/dev/null 2>&1 || need_apt+=(docker-compose)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "missing system packages: ${need_apt[*]} (run as root or install them with apt-get)" >&2
    exit 1
  fi
  echo "== apt-get install ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  quietly apt-get update -qq
  quietly apt-get install -y -qq --no-install-recommends "${need_apt[@]}"
fi

if [ ! -x "$VENV/bin/python" ]; then
  echo "== creating $VENV"
  quietly "$PYTHON" -m venv "$VENV"
fi
echo "== installing pinned dependencies (requirements.lock; pyspark builds from source the first time, ~1 min)"
quietly "$VENV/bin/python" -m pip install --upgrade pip wheel
quietly "$VENV/bin/python" -m pip install -r requirements.lock
echo "== building the Tiering page (npm, locked by package-lock.json; skipped when up to date)"
"$VENV/bin/python" airflow_provider_tiering/plugins/www/build_page.py
quietly "$VENV/bin/python" -m pip install --no-deps -e .
"$VENV/bin/python" -c "import airflow_provider_tiering, pyspark, pyiceberg, airflow; print('setup ok: airflow', airflow.__version__, '| pyspark', pyspark.__version__, '| pyiceberg', pyiceberg.__version__)"
