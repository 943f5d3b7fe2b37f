#!/usr/bin/env bash
# A local Spark standalone cluster (one master, WORKERS workers) from the virtualenv's pyspark: its package
# directory is a Spark distribution (bin/spark-class, jars/), so nothing is downloaded. Every process binds
# 127.0.0.1 only (RPC, web UIs, executors); each daemon runs in its own process group, which its executors and
# their Python workers join, and "stop" kills whole groups.
#
#   scripts/spark_standalone.sh start|stop|status [WORKERS]     (WORKERS default: 2)
#
# Environment (all optional):
#   VENV                      virtualenv with pyspark and this project              (default: .venv)
#   SPARK_STANDALONE_DIR      pid files, logs, work and scratch dirs                (default: .cache/spark-standalone)
#   SPARK_MASTER_PORT         master RPC port on 127.0.0.1                          (default: 7077)
#   SPARK_MASTER_WEBUI_PORT   master web UI (JSON status at /json/)                 (default: 8080)
#   SPARK_WORKER_WEBUI_PORT   first worker's web UI; worker i uses this + i - 1;    (default: 8081)
#                             0 = a free port each (see the master's /json/)
#   SPARK_WORKER_CORES        cores per worker                                      (default: 1)
#   SPARK_WORKER_MEMORY       memory per worker for executors (>= spark.executor.memory, default 1g) (default: 1g)
#   SPARK_WORKER_HOSTS        host name each worker (and its executors) binds and advertises, one word per worker,
#                             loopback names only (e.g. "127.0.0.1 localhost": Spark then sees two hosts, which
#                             speculation needs: it never runs a copy of a task on the host of the original) (default: 127.0.0.1)
#   SPARK_STANDALONE_WAIT     seconds to wait for the workers to be ALIVE on start  (default: 180)
#
# Tiering tasks use it through an Airflow connection of type spark with host spark://127.0.0.1:7077. The executors
# run this virtualenv's Python (the driver's spark.pyspark.python), so they import airflow_provider_tiering.
set -euo pipefail

# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
DIR="${SPARK_STANDALONE_DIR:-$ROOT/.cache/spark-standalone}"
MASTER_PORT="${SPARK_MASTER_PORT:-7077}"
MASTER_WEBUI_PORT="${SPARK_MASTER_WEBUI_PORT:-8080}"
WORKER_WEBUI_PORT="${SPARK_WORKER_WEBUI_PORT:-8081}"
WORKER_CORES="${SPARK_WORKER_CORES:-1}"
WORKER_MEMORY="${SPARK_WORKER_MEMORY:-1g}"
WAIT="${SPARK_STANDALONE_WAIT:-180}"
read -r -a WORKER_HOSTS <<<"${SPARK_WORKER_HOSTS:-}"
WORKERS="${2:-2}"
MASTER_URL="spark://127.0.0.1:$MASTER_PORT"
STATUS_URL="http://127.0.0.1:$MASTER_WEBUI_PORT/json/"

pid_of() { # a daemon's pid (= its process group) if it runs
    pid_from_file "$DIR/$1.pid"
}

alive_workers() { # how many workers the master lists as ALIVE (nothing printed if it does not answer)
    "$PYTHON" - "$STATUS_URL" <<'EOF'
import json, sys, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1], timeout=2) as response:
        status = json.load(response)
except OSError:
    sys.exit(1)
print(sum(1 for worker in status.get("workers", []) if worker.get("state") == "ALIVE"))
EOF
}

launch() { # name, then the class and its arguments
    local name="$1"
    shift
    mkdir -p "$DIR/logs"
    # setsid: the daemon leads its own process group; the executors a worker forks (and their Python workers)
    # stay in that group.
    SPARK_HOME="$SPARK_HOME_DIR" SPARK_LOCAL_IP=127.0.0.1 SPARK_LOCAL_DIRS="$DIR/tmp" SPARK_LOG_DIR="$DIR/logs" \
        SPARK_WORKER_DIR="$DIR/work" PYSPARK_PYTHON="$PYTHON" \
        SPARK_DAEMON_JAVA_OPTS="-XX:TieredStopAtLevel=1 -XX:+UseSerialGC ${SPARK_DAEMON_JAVA_OPTS:-}" \
        nohup setsid "$SPARK_HOME_DIR/bin/spark-class" "$@" >"$DIR/logs/$name.log" 2>&1 </dev/null &
    echo "$!" >"$DIR/$name.pid"
}

stop_group() { # name
    local pid
    if ! pid="$(pid_of "$1")"; then
        rm -f "$DIR/$1.pid"
        return 0
    fi
    kill -TERM -- "-$pid" 2>/dev/null || true
    for _ in $(seq 1 40); do
        kill -0 -- "-$pid" 2>/dev/null || break
        sleep 0.25
    done
    kill -KILL -- "-$pid" 2>/dev/null || true
    rm -f "$DIR/$1.pid"
    echo "stopped $1 (process group $pid)"
}

stop() {
    local file
    for file in "$DIR"/worker-*.pid; do
        if [[ -e "$file" ]]; then
            stop_group "$(basename "$file" .pid)"
        fi
    done
    stop_group master
    return 0
}

start() {
    [[ -x "$PYTHON" ]] || { echo "no virtualenv at $VENV (run make setup)" >&2; return 1; }
    if pid="$(pid_of master)"; then
        echo "Spark master already running (pid $pid) at $MASTER_URL; stop it first" >&2
        return 1
    fi
    local port
    for port in "$MASTER_PORT" "$MASTER_WEBUI_PORT"; do
        if listening "$port"; then
            echo "port $port on 127.0.0.1 is taken; set SPARK_MASTER_PORT / SPARK_MASTER_WEBUI_PORT" >&2
            return 1
        fi
    done
    SPARK_HOME_DIR="$(pyspark_home)"
    mkdir -p "$DIR/tmp" "$DIR/work" "$DIR/logs"
    # No REST submission server (port 6066): jobs reach the cluster only through a driver.
    SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false ${SPARK_MASTER_OPTS:-}" \
        launch master org.apache.spark.deploy.master.Master \
            --host 127.0.0.1 --port "$MASTER_PORT" --webui-port "$MASTER_WEBUI_PORT"
    local i webui host
    for i in $(seq 1 "$WORKERS"); do
        webui=$((WORKER_WEBUI_PORT == 0 ? 0 : WORKER_WEBUI_PORT + i - 1))
        host="${WORKER_HOSTS[i - 1]:-127.0.0.1}"
        case "$host" in
            127.0.0.1 | localhost) ;;
            *)
                echo "worker host $host is not a loopback name (127.0.0.1 or localhost)" >&2
                stop >&2
                return 1
                ;;
        esac
        mkdir -p "$DIR/work/worker-$i"
        launch "worker-$i" org.apache.spark.deploy.worker.Worker "$MASTER_URL" \
            --host "$host" --cores "$WORKER_CORES" --memory "$WORKER_MEMORY" \
            --webui-port "$webui" --work-dir "$DIR/work/worker-$i"
    done
    local waited=0 alive name
    while true; do
        alive="$(alive_workers || true)"
        if [[ -n "$alive" ]] && ((alive >= WORKERS)); then
            break
        fi
        for name in master $(seq -f "worker-%g" 1 "$WORKERS"); do
            if ! pid_of "$name" >/dev/null; then
                echo "Spark $name exited during start-up; last lines of $DIR/logs/$name.log:" >&2
                tail -n 30 "$DIR/logs/$name.log" >&2
                stop >&2
                return 1
            fi
        done
        if ((waited >= WAIT * 2)); then
            echo "only ${alive:-0} of $WORKERS workers ALIVE at $STATUS_URL after ${WAIT}s; stopping" >&2
            stop >&2
            return 1
        fi
        sleep 0.5
        waited=$((waited + 1))
    done
    echo "Spark standalone cluster started at $MASTER_URL: $WORKERS worker(s) ALIVE, status $STATUS_URL, logs $DIR/logs"
}

status() {
    local pid alive
    if ! pid="$(pid_of master)"; then
        echo "Spark standalone cluster not running"
        return 3
    fi
    alive="$(alive_workers || true)"
    echo "Spark master running (pid $pid) at $MASTER_URL: ${alive:-?} worker(s) ALIVE, status $STATUS_URL"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    *)
        echo "usage: $0 start|stop|status [WORKERS]" >&2
        exit 2
        ;;
esac
