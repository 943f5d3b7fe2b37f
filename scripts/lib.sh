# Sourced by the Spark daemon scripts (spark_standalone.sh, spark_connect_server.sh): the virtualenv's python,
# pid files and a port probe on 127.0.0.1.
# shellcheck shell=bash

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-.venv}"
case "$VENV" in /*) ;; *) VENV="$ROOT/$VENV" ;; esac
PYTHON="$VENV/bin/python"

pid_from_file() { # FILE: prints the pid it holds if that process runs
    local pid
    [[ -f "$1" ]] || return 1
    pid="$(cat "$1")"
    [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

listening() { # PORT: whether something accepts connections on 127.0.0.1:PORT
    "$PYTHON" - "$1" <<'PY'
import socket, sys
with socket.socket() as s:
    s.settimeout(0.5)
    sys.exit(s.connect_ex(("127.0.0.1", int(sys.argv[1]))))
PY
}

pyspark_home() { # the virtualenv's pyspark package directory, which is a Spark distribution (bin/, jars/)
    "$PYTHON" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))'
}
