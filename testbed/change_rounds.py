"""Rounds of a change-stream table in a child process, with its peak memory: ``python -m testbed.change_rounds
CONFIG_JSON`` runs rounds of ``config["spec"]`` (the hot database at ``config["uri"]``: a PostgreSQL DSN or a
``mysql://`` URL; pyiceberg ``config["catalog"]``, state in ``config["state_path"]``) until one finds nothing to
tier, and prints ``RESULT {...}``: each round's outcome and metrics, and the process's peak resident memory (VmHWM)
before the first round, once the changes of the last round that wrote any were read and written (before its merge),
and after the last round."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from testbed.child_result import child_report

REPO = Path(__file__).resolve().parent.parent


def peak_rss_bytes() -> int:
    """This process's peak resident memory: VmHWM, of its own address space (``ru_maxrss`` survives ``exec``, and
    would count the parent's peak at the fork)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def run(config: dict[str, Any]) -> dict[str, Any]:
    from airflow_provider_tiering.build import build_writer
    from airflow_provider_tiering.core.connections import ConnectionInfo
    from airflow_provider_tiering.core.round import run_round
    from airflow_provider_tiering.core.round_result import RoundOutcome
    from airflow_provider_tiering.core.spec import TableSpec
    from airflow_provider_tiering.core.state_store import JsonFileStateStore
    from airflow_provider_tiering.sources.registry import build_source
    from airflow_provider_tiering.spark.session import SparkSettings
    from testbed.rounds import lake_of

    spec = TableSpec.parse(config["spec"])
    connection = ConnectionInfo.from_uri(config["uri"])
    writer = build_writer(SparkSettings(master="local[1]"), local_single_split=True)
    store = JsonFileStateStore(Path(config["state_path"]))
    rounds: list[dict[str, Any]] = []
    before = peak_rss_bytes()
    written_peaks: list[int] = []

    def observe(phase: Any) -> None:
        if str(phase.value) == "written":  # the changes are read and written: the merge is next
            written_peaks.append(peak_rss_bytes())

    try:
        for _ in range(int(config.get("max_rounds", 20))):
            source = build_source(spec.source, connection)
            result = run_round(spec, source, lake_of(spec, config["catalog"]), writer, store, observe=observe)
            state = store.load()
            rounds.append(
                {
                    "outcome": str(result.outcome),
                    "metrics": None if result.metrics is None else asdict(result.metrics),
                    "backlog_wal_bytes": (state.change_stream or {}).get("backlog_wal_bytes"),
                    "log_backlog_bytes": (state.change_stream or {}).get("log_backlog_bytes"),
                    "peak_rss_bytes": peak_rss_bytes(),
                }
            )
            if result.outcome is RoundOutcome.NOTHING_TO_TIER:
                break
    finally:
        writer.stop()
    return {
        "rounds": rounds,
        "peak_rss_before": before,
        "peak_rss_written": max(written_peaks, default=before),
        "peak_rss_after": peak_rss_bytes(),
    }


def rounds_in_child(config: dict[str, Any], timeout: float = 900) -> dict[str, Any]:
    """``run(config)`` in a fresh Python process; returns its report."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "testbed.change_rounds", json.dumps(config)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    report = child_report(proc, "change rounds")
    return report


if __name__ == "__main__":
    print("RESULT " + json.dumps(run(json.loads(sys.argv[1])), default=str), flush=True)
