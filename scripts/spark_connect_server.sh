#!/usr/bin/env bash
# A local Spark Connect server for tiering tasks, from the virtualenv's pyspark (its jars include the
# server: spark-connect_2.13-<version>.jar), so nothing is downloaded. Listens on 127.0.0.1 only.
#
#   scripts/spark_connect_server.sh start|stop|status
#
# Environment (all optional):
#   VENV                  virtualenv with pyspark and this project           (default: .venv)
#   SPARK_CONNECT_PORT    gRPC port on 127.0.0.1                             (default: 15002)
#   SPARK_CONNECT_MASTER  where the server's Spark runs                      (default: local[*])
#   SPARK_CONNECT_DIR     pid file, log file and scratch directory           (default: .cache/spark-connect)
#   SPARK_CONNECT_CONF    extra "--conf k=v" arguments, space separated
#   SPARK_CONNECT_WAIT    seconds to wait for the port on start              (default: 180)
#   SPARK_CONNECT_TOKEN   a pre-shared token every client must send          (default: none, any local user
#                         may connect); passed in the environment, never on the command line
#
# Clients connect with sc://127.0.0.1:$SPARK_CONNECT_PORT (an Airflow connection of type spark_connect), or with
# a token sc://localhost:$SPARK_CONNECT_PORT/;token=... (the connection's password; pyspark sends a token
# without TLS only to "localhost").
set -euo pipefail

# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
PORT="${SPARK_CONNECT_PORT:-15002}"
MASTER="${SPARK_CONNECT_MASTER:-local[*]}"
DIR="${SPARK_CONNECT_DIR:-$ROOT/.cache/spark-connect}"
WAIT="${SPARK_CONNECT_WAIT:-180}"
PID_FILE="$DIR/server.pid"
LOG_FILE="$DIR/server.log"

running_pid() {
    pid_from_file "$PID_FILE"
}

start() {
    if pid="$(running_pid)"; then
        echo "Spark Connect server already running (pid $pid) at sc://127.0.0.1:$PORT"
        return 0
    fi
    if listening "$PORT"; then
        echo "port $PORT on 127.0.0.1 is taken by another process; set SPARK_CONNECT_PORT" >&2
        return 1
    fi
    [[ -x "$PYTHON" ]] || { echo "no virtualenv at $VENV (run make setup)" >&2; return 1; }
    mkdir -p "$DIR/tmp"
    if [[ -n "${SPARK_CONNECT_TOKEN:-}" ]]; then
        export SPARK_CONNECT_AUTHENTICATE_TOKEN="$SPARK_CONNECT_TOKEN"
    fi
    local spark_home
    spark_home="$(pyspark_home)"
    # The server's Python workers run the virtualenv's interpreter, so they import airflow_provider_tiering
    # (and unpickle the functions a client sends) exactly as a task's own interpreter would.
    # shellcheck disable=SC2086
    SPARK_HOME="$spark_home" SPARK_LOCAL_IP=127.0.0.1 PYSPARK_PYTHON="$PYTHON" PYSPARK_DRIVER_PYTHON="$PYTHON" \
        nohup setsid "$spark_home/bin/spark-submit" \
        --class org.apache.spark.sql.connect.service.SparkConnectServer \
        --name "Spark Connect server" \
        --master "$MASTER" \
        --conf spark.connect.grpc.binding.address=127.0.0.1 \
        --conf "spark.connect.grpc.binding.port=$PORT" \
        --conf spark.driver.bindAddress=127.0.0.1 \
        --conf spark.driver.host=127.0.0.1 \
        --conf spark.ui.enabled=false \
        --conf spark.ui.showConsoleProgress=false \
        --conf "spark.local.dir=$DIR/tmp" \
        --conf "spark.pyspark.python=$PYTHON" \
        --conf spark.python.worker.reuse=true \
        --conf spark.sql.shuffle.partitions=4 \
        --conf spark.sql.parquet.outputTimestampType=TIMESTAMP_MICROS \
        --conf "spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1 -XX:+UseSerialGC" \
        ${SPARK_CONNECT_CONF:-} \
        >"$LOG_FILE" 2>&1 </dev/null &
    local pid=$!
    echo "$pid" >"$PID_FILE"
    local waited=0
    until listening "$PORT"; do
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "Spark Connect server exited during start-up; last lines of $LOG_FILE:" >&2
            tail -n 30 "$LOG_FILE" >&2
            rm -f "$PID_FILE"
            return 1
        fi
        if ((waited >= WAIT * 2)); then
            echo "Spark Connect server not listening on 127.0.0.1:$PORT after ${WAIT}s; stopping it" >&2
            stop >&2
            return 1
        fi
        sleep 0.5
        waited=$((waited + 1))
    done
    echo "Spark Connect server started (pid $pid) at sc://127.0.0.1:$PORT, log $LOG_FILE"
}

stop() {
    local pid
    if ! pid="$(running_pid)"; then
        echo "Spark Connect server not running"
        rm -f "$PID_FILE"
        return 0
    fi
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 60); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.5
    done
    if kill -0 "$pid" 2>/dev/null; then
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$PID_FILE"
    echo "Spark Connect server stopped (pid $pid)"
}

status() {
    local pid
    if pid="$(running_pid)"; then
        if listening "$PORT"; then
            echo "Spark Connect server running (pid $pid) at sc://127.0.0.1:$PORT"
        else
            echo "Spark Connect server starting (pid $pid), not yet listening on 127.0.0.1:$PORT"
        fi
        return 0
    fi
    echo "Spark Connect server not running"
    return 3
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    *)
        echo "usage: $0 start|stop|status" >&2
        exit 2
        ;;
esac
