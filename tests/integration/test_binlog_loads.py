"""A MariaDB change stream's large reads: a first load in several splits on Spark while a writer commits, which must
stand at exactly the binlog position it commits (checked against the writer's own record of what it committed, by
GTID, not against code under test), and a transaction of 300,000 changes applied in chunks, the task's memory
bounded. Real MariaDB 10.11 with its binlog on, real Spark, real pyiceberg."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_tiering.core.connections import ConnectionInfo
from airflow_provider_tiering.core.round_result import RoundOutcome
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state_store import JsonFileStateStore
from testbed.change_rounds import rounds_in_child
from testbed.lake_check import assert_lake_equals_rows
from testbed.mariadb_server import MariaDBServer
from testbed.rounds import round_parts

NAMESPACE = "loads"
MIB = 1024 * 1024


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MariaDBServer]:
    with MariaDBServer(tmp_path_factory.mktemp("loads") / "data", binlog=True, buffer_pool_size="512M") as found:
        yield found


def spec_of(name: str, **fields: Any) -> dict[str, Any]:
    source = {"kind": "mysql_cdc", "conn_id": "hot", "table": name, **fields.pop("source", {})}
    return {"name": name, "source": source, "lake": {"namespace": NAMESPACE, "table": name}, **fields}


class ModelWriter(threading.Thread):
    """Commits small transactions of inserts, updates, deletes and key changes, keeping a model of the table and,
    for each transaction, its GTID's sequence number and what it did: the table at any binlog position is the model
    replayed up to it."""

    def __init__(self, server: MariaDBServer, table: str, rows: int) -> None:
        super().__init__(daemon=True)
        self.server, self.table = server, table
        self.start_rows = {key: (key % 97, f"row {key}") for key in range(1, rows + 1)}
        self.model = dict(self.start_rows)
        self.log: list[tuple[int, list[tuple[str, int, tuple[int, str] | None]]]] = []
        self.rng = random.Random(11)
        self.next_id = rows + 1
        self.stopped = threading.Event()

    def run(self) -> None:
        with self.server.connect() as conn, conn.cursor() as cur:
            while not self.stopped.is_set():
                done: list[tuple[str, int, tuple[int, str] | None]] = []
                model = dict(self.model)
                for _ in range(self.rng.randint(1, 5)):
                    choice, key = self.rng.random(), self.rng.choice(list(model)) if model else None
                    if key is None or choice < 0.3:
                        key, self.next_id = self.next_id, self.next_id + 1
                        row = (key % 97, f"new {key}")
                        cur.execute(f"INSERT INTO `{self.table}` VALUES (%s, %s, %s)", (key, *row))
                        model[key] = row
                        done.append(("put", key, row))
                    elif choice < 0.7:
                        row = (model[key][0] + 1, f"upd {key}")
                        cur.execute(f"UPDATE `{self.table}` SET v = %s, name = %s WHERE id = %s", (*row, key))
                        model[key] = row
                        done.append(("put", key, row))
                    elif choice < 0.85:
                        cur.execute(f"DELETE FROM `{self.table}` WHERE id = %s", (key,))
                        del model[key]
                        done.append(("del", key, None))
                    else:  # the key changes
                        new, self.next_id = self.next_id, self.next_id + 1
                        cur.execute(f"UPDATE `{self.table}` SET id = %s WHERE id = %s", (new, key))
                        model[new] = model.pop(key)
                        done += [("del", key, None), ("put", new, model[new])]
                conn.commit()
                cur.execute("SELECT @@last_gtid")
                (gtid,) = cur.fetchone()
                self.log.append((int(str(gtid).rsplit("-", 1)[1]), done))
                self.model = model

    def at(self, sequence: int) -> dict[int, tuple[int, str]]:
        """The table as it stood once the transaction of GTID sequence ``sequence`` committed."""
        found = dict(self.start_rows)
        for number, done in self.log:
            if number > sequence:
                break
            for what, key, row in done:
                if what == "put" and row is not None:
                    found[key] = row
                else:
                    found.pop(key, None)
        return found


def test_a_first_load_in_splits_under_a_writer_stands_at_one_position_and_hands_over_exactly(
    server: MariaDBServer, catalog_properties: dict[str, str], spark_writer: Any, tmp_path: Path
) -> None:
    name, rows = "loaded_under_writes", 20_000
    with server.connect(autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{name}` (id BIGINT PRIMARY KEY, v BIGINT NOT NULL, name VARCHAR(40))")
        cur.execute(f"INSERT INTO `{name}` SELECT seq, seq % 97, CONCAT('row ', seq) FROM seq_1_to_{rows}")
    writer = ModelWriter(server, name, rows)
    writer.start()
    spec = TableSpec.parse(spec_of(name, target_rows_per_split=3_000))
    store = JsonFileStateStore(tmp_path / "state.json")
    connection = ConnectionInfo.from_uri(server.url)
    try:
        while len(writer.log) < 20:  # the writer is going when the load's snapshot is taken
            writer.stopped.wait(0.05)
        first = round_parts(spec, connection, catalog_properties, writer=spark_writer).run(store)
    finally:
        writer.stopped.set()
        writer.join()
    assert first.outcome is RoundOutcome.TIERED and first.metrics is not None and first.metrics.splits >= 4
    assert first.end_offsets is not None and first.end_offsets.get("gtid")
    at = int(str(first.end_offsets["gtid"]).rsplit("-", 1)[1])
    assert writer.log[0][0] <= at < writer.log[-1][0], "the load stood where the writer was committing"
    expected = writer.at(at)
    columns = ["id", "v", "name"]
    assert_lake_equals_rows(catalog_properties, (NAMESPACE, name), columns,
                            [(k, *row) for k, row in expected.items()], by_key=True)  # fmt: skip
    # The stream takes over at that position: every change after it, none before it.
    second = round_parts(spec, connection, catalog_properties, writer=spark_writer).run(store)
    assert second.outcome is RoundOutcome.TIERED
    committed_after = sum(len(done) for number, done in writer.log if number > at)
    assert second.metrics is not None and 0 < second.metrics.rows <= committed_after
    assert_lake_equals_rows(catalog_properties, (NAMESPACE, name), columns,
                            [(k, *row) for k, row in writer.model.items()], by_key=True)  # fmt: skip


def test_a_transaction_of_300000_changes_is_applied_in_chunks_with_the_task_memory_bounded(
    server: MariaDBServer, catalog_properties: dict[str, str], local_writer: Any, tmp_path: Path
) -> None:
    """Two tables of 300,000 rows, every row updated by one transaction after their first loads; holding the round's
    changes in memory grows the task by what the transaction holds, typing them in chunks of 5,000 keys bounds it."""
    rows = 300_000
    reports = {}
    for mode, keys in (("chunked", 5_000), ("held", 1_000_000)):
        name = f"every_row_{mode}"
        with server.connect(autocommit=True) as conn, conn.cursor() as cur:
            cur.execute(f"CREATE TABLE `{name}` (id BIGINT PRIMARY KEY, v BIGINT NOT NULL, name VARCHAR(200))")
            cur.execute(f"INSERT INTO `{name}` SELECT seq, seq, REPEAT(MD5(seq), 5) FROM seq_1_to_{rows}")
        spec_dict = spec_of(name, source={"keys_in_memory": keys}, target_file_size_mb=8)
        store_path = tmp_path / f"{mode}.json"
        connection = ConnectionInfo.from_uri(server.url)
        first = round_parts(TableSpec.parse(spec_dict), connection, catalog_properties, writer=local_writer).run(
            JsonFileStateStore(store_path)
        )
        assert first.outcome is RoundOutcome.TIERED and first.metrics is not None and first.metrics.rows == rows
        with server.connect(autocommit=True) as conn, conn.cursor() as cur:
            cur.execute(f"UPDATE `{name}` SET v = v + 1, name = UPPER(name)")  # one transaction of 300,000 changes
            cur.execute(f"DELETE FROM `{name}` WHERE id % 97 = 0")
        reports[mode] = rounds_in_child(
            {"spec": spec_dict, "uri": server.url, "catalog": catalog_properties, "state_path": str(store_path)}
        )
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute(f"SELECT id, v, name FROM `{name}`")
            hot = list(cur.fetchall())
        assert_lake_equals_rows(catalog_properties, (NAMESPACE, name), ["id", "v", "name"], hot, by_key=True)
    for report in reports.values():
        tiered = [r for r in report["rounds"] if r["outcome"] == "tiered"]
        assert tiered and report["rounds"][-1]["outcome"] == "nothing_to_tier", report
        assert tiered[0]["metrics"]["rows"] >= rows - rows // 97
    growth = {mode: r["peak_rss_written"] - r["peak_rss_before"] for mode, r in reports.items()}
    print(f"task memory growth while reading and writing 300,000 changes: {growth}")
    assert growth["chunked"] < 300 * MIB, growth
    assert growth["held"] > growth["chunked"] + 100 * MIB, growth  # what the bound saves, measured
