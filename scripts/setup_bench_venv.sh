#!/usr/bin/env bash
# Create the benchmark-only virtualenv that runs benchmarks/alt_dlt.py (dlt, ConnectorX, pyiceberg), pinned by
# benchmarks/requirements-bench.txt and kept apart from .venv so it cannot disturb Airflow's pinned dependencies.
#
#   BENCH_VENV    where to put it (default .venv-bench, relative to the repository root)
#   PIP_CACHE_DIR pip's cache (default .cache/pip); the pinned wheels are also kept in its bench-wheels/, and a
#                 rebuild installs from there without asking the index (pip's own HTTP cache stores nothing when
#                 the index answers "no-store", so it cannot be relied on for that)
#   BASE_PYTHON   the interpreter to build it from (default /usr/bin/python3.11, else python3.11 on PATH)
#
# Idempotent: a stamp in the virtualenv holds the requirements file's hash; while it matches, this is a no-op.
# When the requirements change (or an earlier install broke off), the virtualenv is rebuilt from scratch.
set -euo pipefail
cd "$(dirname "$0")/.."

REQUIREMENTS=benchmarks/requirements-bench.txt
BENCH_VENV=${BENCH_VENV:-.venv-bench}
PIP_CACHE_DIR=${PIP_CACHE_DIR:-.cache/pip}
if [ -z "${BASE_PYTHON:-}" ]; then
  if [ -x /usr/bin/python3.11 ]; then BASE_PYTHON=/usr/bin/python3.11; else BASE_PYTHON=python3.11; fi
fi
STAMP="$BENCH_VENV/.requirements-bench.sha256"

want=$(sha256sum "$REQUIREMENTS" | cut -d' ' -f1)
if [ -x "$BENCH_VENV/bin/python" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
  echo "bench venv $BENCH_VENV is up to date"
  exit 0
fi

if [ -e "$BENCH_VENV" ]; then
  if [ ! -f "$BENCH_VENV/pyvenv.cfg" ]; then
    echo "$BENCH_VENV exists and is not a virtualenv; refusing to replace it" >&2
    exit 1
  fi
  echo "== rebuilding $BENCH_VENV ($REQUIREMENTS changed or the last install did not finish)"
  rm -rf "$BENCH_VENV"
fi

echo "== creating $BENCH_VENV with $("$BASE_PYTHON" --version)"
"$BASE_PYTHON" -m venv "$BENCH_VENV"
WHEELHOUSE="$PIP_CACHE_DIR/bench-wheels"
mkdir -p "$WHEELHOUSE"
pip=("$BENCH_VENV/bin/python" -m pip --disable-pip-version-check --cache-dir "$PIP_CACHE_DIR")
offline=(install -q --no-index --find-links "$WHEELHOUSE" -r "$REQUIREMENTS")
if ! "${pip[@]}" "${offline[@]}" >/dev/null 2>&1; then
  echo "== downloading the pinned wheels into $WHEELHOUSE"
  "${pip[@]}" download -q -d "$WHEELHOUSE" -r "$REQUIREMENTS"
  "${pip[@]}" "${offline[@]}"
fi
"$BENCH_VENV/bin/python" -m pip check
"$BENCH_VENV/bin/python" -c "import connectorx, dlt, matplotlib, psycopg, pyiceberg; print('bench venv ok: dlt', dlt.__version__, \
'| connectorx', connectorx.__version__, '| pyiceberg', pyiceberg.__version__)"
echo "$want" >"$STAMP"
