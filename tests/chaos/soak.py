"""``make soak``: a long chaos run (default 20 minutes) that prints rounds, faults by kind and the final check.

    python -m tests.chaos.soak --minutes 20 [--tables 3] [--cdc-tables 1] [--seed 7] [--workdir DIR] [--json F]

Exits 1 unless every lake table equals its hot table with no row lost or duplicated (a change-stream table: by
key, with no key lost, extra or different, and its replication slot not ahead of the lake), no orphan data file
and a state document that names the lake's latest tiering snapshot.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from tests.chaos.harness import KINDS, ChaosConfig, ChaosRun


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=20.0, help="how long faults are injected (default 20)")
    parser.add_argument("--tables", type=int, default=3, help="cursor tables (default 3)")
    parser.add_argument(
        "--cdc-tables", type=int, default=1, help="tables tiered from their change stream (postgres_cdc; default 1)"
    )
    parser.add_argument("--seed", type=int, default=int(time.time()) % 100_000)
    parser.add_argument("--fault-interval", type=float, default=10.0, help="mean seconds between faults")
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated subset of {','.join(KINDS)}")
    parser.add_argument("--workdir", type=Path, help="kept afterwards (default: a temporary directory, removed)")
    parser.add_argument("--json", type=Path, help="also write the report here")
    args = parser.parse_args(argv)
    kinds = tuple(k for k in args.kinds.split(",") if k)
    unknown = set(kinds) - set(KINDS)
    if unknown:
        parser.error(f"unknown fault kinds: {', '.join(sorted(unknown))}")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="tiering-soak-"))
    print(
        f"soak: {args.minutes:g} min, {args.tables} cursor and {args.cdc_tables} change-stream tables, "
        f"seed {args.seed}, work directory {workdir}",
        flush=True,
    )
    config = ChaosConfig(
        workdir=workdir,
        seconds=args.minutes * 60,
        tables=args.tables,
        cdc_tables=args.cdc_tables,
        seed=args.seed,
        mean_fault_interval=args.fault_interval,
        kinds=kinds,
        warehouse_mb=1024,
        progress=lambda line: print(line, flush=True),
    )
    report = ChaosRun(config).run()
    print()
    print(report.text())
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report.to_json(), indent=2, default=str))
    if args.workdir is None and report.consistent:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0 if report.consistent else 1


if __name__ == "__main__":
    sys.exit(main())
