"""Independent checks of a lake table against its hot table (no code under test is used to read either)."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterable, Sequence
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
import pyarrow as pa
from pyiceberg.catalog import load_catalog


def _normal(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, UUID):  # PostgreSQL's uuid, which the lake holds as text
        return str(value)
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (Decimal, float, int)):  # SQLite may keep 12.00 of a DECIMAL column as integer 12
        return format(Decimal(str(value)).normalize(), "f")
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            value = value.astimezone(UTC).replace(tzinfo=None)
        return value.isoformat(sep=" ")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, str):
        try:  # SQLite keeps times as text
            return datetime.fromisoformat(value).isoformat(sep=" ") if len(value) >= 19 and value[4] == "-" else value
        except ValueError:
            return value
    return value


def digest(rows: Iterable[Sequence[Any]]) -> tuple[int, str]:
    """Row count and an order-independent content hash."""
    normal = sorted(repr(tuple(_normal(v) for v in row)) for row in rows)
    return len(normal), hashlib.sha256("\n".join(normal).encode()).hexdigest()


def lake_rows(catalog_properties: dict[str, str], identifier: tuple[str, str], columns: Sequence[str]) -> list[tuple]:
    catalog = load_catalog("default", **catalog_properties)
    table = catalog.load_table(identifier).scan(selected_fields=tuple(columns)).to_arrow()
    data = [table.column(c).to_pylist() for c in columns]
    return list(zip(*data)) if data else []


def sqlite_rows(path: Path, table: str, columns: Sequence[str]) -> list[tuple]:
    with sqlite3.connect(path) as conn:
        return conn.execute(f'SELECT {", ".join(columns)} FROM "{table}"').fetchall()


def postgres_rows(dsn: str, table: str, columns: Sequence[str]) -> list[tuple]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(f'SELECT {", ".join(columns)} FROM "{table}"').fetchall()


def mariadb_rows(url: str, table: str, columns: Sequence[str]) -> list[tuple]:
    """A MariaDB table's rows, read with PyMySQL (the product reads splits with connectorx)."""
    import pymysql
    from sqlalchemy.engine import make_url

    parts = make_url(url)
    with (
        pymysql.connect(
            host=parts.host,
            port=parts.port,
            user=parts.username,
            password=parts.password or "",
            database=parts.database,
        ) as conn,
        conn.cursor() as cur,
    ):
        cur.execute("SET time_zone = '+00:00'")
        cur.execute(f"SELECT {', '.join(f'`{c}`' for c in columns)} FROM `{table}`")
        return list(cur.fetchall())


def s3_client(catalog_properties: dict[str, str]) -> Any:
    """A boto3 S3 client with a catalog's ``s3.*`` properties (not the package's own S3 access)."""
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=catalog_properties["s3.endpoint"],
        aws_access_key_id=catalog_properties["s3.access-key-id"],
        aws_secret_access_key=catalog_properties["s3.secret-access-key"],
        region_name=catalog_properties["s3.region"],
    )


def s3_objects(catalog_properties: dict[str, str], uri: str) -> dict[str, Any]:
    """The objects under an ``s3://bucket/prefix`` URI, as ``s3://`` URIs mapped to their listing entries."""
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    found: dict[str, Any] = {}
    pages = s3_client(catalog_properties).get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    for page in pages:
        for item in page.get("Contents", ()):
            found[f"s3://{bucket}/{item['Key']}"] = item
    return found


def data_files_stored(catalog_properties: dict[str, str], data_uri: str) -> set[str]:
    """Parquet files under a table's data directory URI (local or ``s3://``), as the snapshots name them."""
    if data_uri.startswith("s3://"):
        return {uri for uri in s3_objects(catalog_properties, data_uri.rstrip("/") + "/") if uri.endswith(".parquet")}
    return {str(p) for p in Path(data_uri.removeprefix("file://")).rglob("*.parquet")}


def unreferenced_data_files(
    catalog_properties: dict[str, str], identifier: tuple[str, str], under: str = ""
) -> list[str]:
    """Parquet files in the table's data directory (or its subdirectory ``under``) that no snapshot references
    (a local warehouse, or an ``s3://`` one listed with boto3)."""
    catalog = load_catalog("default", **catalog_properties)
    table = catalog.load_table(identifier)
    referenced = set()
    for snapshot in table.snapshots():
        for manifest in snapshot.manifests(table.io):
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                referenced.add(entry.data_file.file_path.removeprefix("file://"))
    data_uri = f"{table.location().rstrip('/')}/data/{under}".rstrip("/")
    return sorted(data_files_stored(catalog_properties, data_uri) - referenced)


def view_rows(view: Any, columns: Sequence[str]) -> list[tuple[Any, ...]]:
    """The rows of a view across tiers, as tuples of ``columns``."""
    table = view.to_arrow().select(list(columns))
    return [tuple(r[c] for c in columns) for r in table.to_pylist()]


def duckdb_lake_rows(
    catalog_properties: dict[str, str], identifier: tuple[str, str], columns: Sequence[str]
) -> list[tuple]:
    """The lake table's current rows as DuckDB's Iceberg reader reads them (a second reader, independent of
    pyiceberg): ``iceberg_scan`` of the table's metadata file, the extensions loaded from their PyPI packages by path
    (autoinstall off: no network)."""
    import duckdb
    import duckdb_extension_avro
    import duckdb_extension_iceberg

    metadata = load_catalog("default", **catalog_properties).load_table(identifier).metadata_location
    connection = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
    try:
        for package in (duckdb_extension_avro, duckdb_extension_iceberg):
            extension = next(Path(package.__file__).parent.rglob("*.duckdb_extension"))
            connection.execute(f"LOAD '{extension}'")
        selected = ", ".join(f'"{c}"' for c in columns)
        return connection.execute(
            f"SELECT {selected} FROM iceberg_scan('{metadata.removeprefix('file://')}')"
        ).fetchall()
    finally:
        connection.close()


def null_counts(rows: Sequence[Sequence[Any]], columns: Sequence[str]) -> dict[str, int]:
    """How many rows hold NULL in each column."""
    return {name: sum(1 for row in rows if row[i] is None) for i, name in enumerate(columns)}


def assert_lake_equals_rows(
    catalog_properties: dict[str, str],
    identifier: tuple[str, str],
    columns: Sequence[str],
    expected: Sequence[Sequence[Any]],
    *,
    by_key: bool,
) -> None:
    """The lake table holds ``expected`` (the hot table's rows in ``columns``), read by pyiceberg and by DuckDB's
    Iceberg reader: by key (the first column: one row per key, none lost or extra, each equal) where there is one,
    and by content hash and null counts."""
    for reader in (lake_rows, duckdb_lake_rows):
        found = reader(catalog_properties, identifier, columns)
        if by_key:
            keys = [row[0] for row in found]
            assert len(keys) == len(set(keys)), f"{reader.__name__}: a key is in the lake twice"
            lake = {row[0]: tuple(_normal(v) for v in row) for row in found}
            hot = {row[0]: tuple(_normal(v) for v in row) for row in expected}
            assert set(lake) == set(hot), (
                f"{reader.__name__}: keys only in the lake {sorted(set(lake) - set(hot))[:5]}, "
                f"only in the hot table {sorted(set(hot) - set(lake))[:5]}"
            )
            differing = [k for k in hot if lake[k] != hot[k]]
            assert not differing, (
                f"{reader.__name__}: {len(differing)} of {len(hot)} keys differ, e.g. {differing[0]}: "
                f"{str(lake[differing[0]])[:300]} != {str(hot[differing[0]])[:300]}"
            )
        assert digest(found) == digest(expected), reader.__name__
        assert null_counts(found, columns) == null_counts(expected, columns), reader.__name__


def live_file_rows(task: Any, columns: Sequence[str], io: Any = None) -> pa.Table:
    """One planned data file's live rows, read with pyarrow's Parquet reader alone: the file's rows less the positions
    its position-delete files name (read with pyarrow too), a reader independent of pyiceberg's. Files are read from
    the local disk, or with ``io`` (the table's FileIO: only its byte streams are used) from object storage."""
    import numpy as np
    import pyarrow.parquet as pq

    def read(uri: str, names: list[str] | None = None) -> pa.Table:
        if io is None:
            return pq.read_table(uri.removeprefix("file://"), columns=names)
        with io.new_input(uri).open() as stream:
            return pq.read_table(pa.BufferReader(stream.read()), columns=names)

    path = task.file.file_path
    rows = read(path, list(columns))
    deleted: set[int] = set()
    for delete_file in task.delete_files:
        assert delete_file.content == 1, f"{delete_file.file_path}: an equality-delete file"
        found = read(delete_file.file_path)
        deleted |= {pos for name, pos in zip(found.column("file_path").to_pylist(), found.column("pos").to_pylist(),
                                             strict=True) if name == path}  # fmt: skip
    if not deleted:
        return rows
    keep = np.ones(rows.num_rows, dtype=bool)
    keep[np.fromiter(deleted, dtype=np.int64)] = False
    return rows.filter(pa.array(keep))


def files_named(io: Any, delete_file: Any) -> set[str]:
    """The data files a position-delete file deletes rows of, read with pyarrow's Parquet reader."""
    import pyarrow.parquet as pq

    with io.new_input(delete_file.file_path).open() as stream:
        paths = pq.read_table(stream, columns=["file_path"]).column("file_path")
    return {str(p) for p in paths.unique().to_pylist()}
