"""Benchmark: what reading a MariaDB binlog costs a change-stream round — the product's row-image decoding against
``mysql-replication``'s own, and the reader's share of a whole round's CPU.

A throw-away MariaDB server with its binlog on (``benchmarks/mariadb_orders.py``) holds TPC-H ``orders`` at ``--sf``
as ``binlog_orders``, tiered once (``mysql_cdc``: the first load). Then ``--percent`` of its rows are updated by
one statement per ``--per-transaction`` keys (``o_totalprice`` and ``o_orderstatus`` changed, scattered keys), and
the binlog between the lake's position and the end is read ``--repeat`` times, alternating, in this process's CPU:

* ``round``      ``sources/mysql/binlog.py: binlog_messages`` as a round reads it: events through the library, row
                 images decoded by ``row_images.py``, an update's old image for its key only;
* ``whole``      the same with every old image decoded whole (as a first load's roll-back reads them);
* ``library``    ``BinLogStreamReader`` decoding the rows itself (``event.rows``: its pure-Python decoder);
* ``events``     ``BinLogStreamReader`` yielding the same events, their rows left undecoded: the protocol and the
                 events, the floor both decoders stand on.

The ``round`` and ``library`` readers' values are compared change by change (the library's as the product types
them), and then the table's round runs once (built as the operator builds it, one split in this process): the
reader's share of its CPU is ``round`` over the round's. Reported: µs of CPU per change, medians.

    python -m benchmarks.bench_binlog_decoding                     # SF 1, 10%, 3 repeats
    python -m benchmarks.bench_binlog_decoding --sf 0.01 --percent 10 --repeat 1   # smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

DEFAULT_OUTPUT = REPO / "benchmarks" / "results" / "binlog_decoding.json"
TABLE = "binlog_orders"
NAMESPACE = "bench"
VARIANTS = ("round", "whole", "library", "events")


def spec() -> dict[str, Any]:
    return {
        "name": TABLE,
        "source": {"kind": "mysql_cdc", "conn_id": "bench", "table": TABLE},
        "lake": {"namespace": NAMESPACE, "table": TABLE},
    }


def tier(uri: str, catalog: dict[str, str], state: Path) -> tuple[Any, float]:
    """One round of the table and the CPU this process spent on it."""
    from airflow_provider_tiering.core.connections import ConnectionInfo
    from airflow_provider_tiering.core.spec import TableSpec
    from airflow_provider_tiering.core.state_store import JsonFileStateStore
    from testbed.rounds import round_parts

    started = time.process_time()
    with round_parts(TableSpec.parse(spec()), ConnectionInfo.from_uri(uri), catalog) as parts:
        result = parts.run(JsonFileStateStore(state))
    return result, time.process_time() - started


def lake_position(catalog: dict[str, str]) -> tuple[str, int]:
    from pyiceberg.catalog import load_catalog

    snapshot = load_catalog("default", **catalog).load_table((NAMESPACE, TABLE)).current_snapshot()
    assert snapshot is not None and snapshot.summary is not None
    offsets = json.loads(str(snapshot.summary["tiering.end-offsets"]))
    return str(offsets["binlog_file"]), int(offsets["binlog_pos"])


def make_updates(server: Any, rows: int, percent: float, per_transaction: int) -> int:
    """``percent`` of the rows updated, keys scattered (every ``100 / percent``-th), ``per_transaction`` a
    statement."""
    step = max(1, round(100 / percent))
    keys = list(range(1, rows + 1, step))
    with server.connect(autocommit=True) as conn, conn.cursor() as cur:
        for begin in range(0, len(keys), per_transaction):
            chunk = keys[begin : begin + per_transaction]
            cur.execute(
                f"UPDATE {TABLE} SET o_totalprice = o_totalprice + 1, o_orderstatus = 'U' "
                f"WHERE o_id IN ({', '.join(['%s'] * len(chunk))})",
                chunk,
            )
    return len(keys)


def readers(server: Any, start: tuple[str, int]) -> dict[str, Callable[[], list[Any]]]:
    """Each variant: a function reading the binlog from ``start`` to its end, its changes' values in a list."""
    from airflow_provider_tiering.sources.change_stream.messages import Change
    from airflow_provider_tiering.sources.mysql.binlog import BinlogSettings, binlog_messages
    from airflow_provider_tiering.sources.mysql.binlog_positions import BinlogFiles, pack

    settings = BinlogSettings(
        "127.0.0.1", server.port, server.user, server.password, 0, server.database, TABLE, "tiering_evictions", TABLE
    )
    files, position = BinlogFiles.of(start[0]), pack(*start)

    def ours(old_key: tuple[str, ...] | None) -> list[Any]:
        messages = binlog_messages(settings, position, None, files, old_key=old_key)
        return [(m.new, m.old) for m in messages if isinstance(m, Change)]

    def library(decode: bool) -> list[Any]:
        from pymysqlreplication import BinLogStreamReader
        from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

        reader = BinLogStreamReader(
            connection_settings=settings.connection(), server_id=0, log_file=start[0], log_pos=start[1],
            resume_stream=True, blocking=False, only_schemas=[server.database], only_tables=[TABLE],
            only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent], enable_logging=False, freeze_schema=True,
        )  # fmt: skip
        found: list[Any] = []
        try:
            for event in reader:
                if decode:
                    found.extend(event.rows)
                else:
                    event.packet.read(event.event_size - event.packet.read_bytes)  # the images, left undecoded
                    found.append(event)
        finally:
            reader.close()
        return found

    return {
        "round": lambda: ours(("o_id",)),
        "whole": lambda: ours(None),
        "library": lambda: library(True),
        "events": lambda: library(False),
    }


def same_values(ours: list[Any], theirs: list[Any]) -> int:
    """How many changes the two readers decoded alike (the library's values as the product types them: its dates
    as days since 1970-01-01; its CHAR values as read)."""
    from datetime import date

    epoch = date(1970, 1, 1)
    names = ("o_id", "o_orderkey", "o_custkey", "o_orderstatus", "o_totalprice", "o_orderdate", "o_orderpriority")
    alike = 0
    for (new, _), row in zip(ours, theirs, strict=True):
        after = row["after_values"]
        expected = [after[name] for name in names]
        expected[5] = (expected[5] - epoch).days
        alike += list(new[: len(names)]) == expected
    return alike


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sf", type=float, default=1.0, help="TPC-H scale factor of orders (1 = 1.5M rows)")
    parser.add_argument("--percent", type=float, default=10.0, help="share of the rows updated")
    parser.add_argument("--per-transaction", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workdir", help="scratch directory (default: a temp dir)")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)

    import shutil
    import tempfile

    from benchmarks.mariadb_orders import load_orders, mariadb_scratch

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="tiering-bench-binlog-decoding-"))
    workdir.mkdir(parents=True, exist_ok=True)
    seconds: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    try:
        with mariadb_scratch(workdir) as server:
            rows = load_orders(server, (TABLE,), "o_id", "o_ver", args.sf, workdir)
            root = workdir / "lake"
            root.mkdir(parents=True, exist_ok=True)
            catalog = {"type": "sql", "uri": f"sqlite:///{root}/catalog.db", "warehouse": f"file://{root}/warehouse"}
            state = workdir / "state.json"
            tier(server.url, catalog, state)
            changes = make_updates(server, rows, args.percent, args.per_transaction)
            print(f"{TABLE}: {rows:,} rows, {changes:,} updated", flush=True)
            variants = readers(server, lake_position(catalog))
            found: dict[str, list[Any]] = {}
            for repeat in range(args.repeat):
                for variant in VARIANTS if repeat % 2 == 0 else reversed(VARIANTS):
                    started = time.process_time()
                    found[variant] = variants[variant]()
                    seconds[variant].append(time.process_time() - started)
                    if variant != "events" and len(found[variant]) != changes:  # events: one per statement
                        raise AssertionError(f"{variant} read {len(found[variant]):,} changes, not {changes:,}")
            alike = same_values(found["round"], found["library"])
            if alike != changes:
                raise AssertionError(f"the two decoders disagree on {changes - alike:,} of {changes:,} changes")
            result, round_cpu = tier(server.url, catalog, state)
            applied = result.metrics.rows if result.metrics else 0
            if applied != changes:
                raise AssertionError(f"the round applied {applied:,} changes, not {changes:,}")
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    per_change = {variant: statistics.median(spent) / changes * 1e6 for variant, spent in seconds.items()}
    document = {
        "sf": args.sf,
        "table_rows": rows,
        "changes": changes,
        "per_transaction": args.per_transaction,
        "cpu_us_per_change": per_change,
        "cpu_seconds": seconds,
        "library_x_round": per_change["library"] / per_change["round"],
        "round_cpu_us_per_change": round_cpu / changes * 1e6,
        "reader_share_of_round_cpu": per_change["round"] / (round_cpu / changes * 1e6),
        "load_average": list(os.getloadavg()),
    }
    for variant in VARIANTS:
        print(f"  {variant:<8} {per_change[variant]:6.2f} µs of CPU per change")
    print(
        f"the library's decoding costs {document['library_x_round']:.1f}× the round's reader; a whole round "
        f"{document['round_cpu_us_per_change']:.1f} µs per change, the reader "
        f"{document['reader_share_of_round_cpu']:.0%} of it (load {document['load_average'][0]:.2f})"
    )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(document, indent=2))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
