# Sourced by setup.sh: run a command with its output held back, shown only if it fails.
# shellcheck shell=bash

quietly() { # COMMAND...: silent on success; on failure the command line, its whole output, and its exit code
    local log status
    log="$(mktemp)"
    if "$@" >"$log" 2>&1; then
        rm -f "$log"
        return 0
    else
        status=$?
    fi
    echo "failed (exit code $status): $*" >&2
    cat "$log" >&2
    rm -f "$log"
    return "$status"
}
