"""The lake's storage properties: what is kept of a catalog's, how a filesystem is opened from them, and that they
neither leak into a ``repr`` nor get lost on the way to a Spark task (pickled)."""

from __future__ import annotations

import pickle

import pyarrow as pa
from pyarrow import fs as pafs

from airflow_provider_tiering.core.ports import WriteTarget
from airflow_provider_tiering.lake.warehouse import LakeStorage, storage_properties

SECRET = "s3cr3t-value-of-the-connection"
CATALOG = {
    "type": "sql",
    "uri": "postgresql+psycopg://iceberg:catalog-password@db:5432/iceberg",
    "warehouse": "s3://bucket/warehouse",
    "token": "catalog-token",
    "s3.endpoint": "http://127.0.0.1:9",
    "s3.access-key-id": "AKIAEXAMPLE",
    "s3.secret-access-key": SECRET,
    "s3.region": "eu-west-3",
    "client.session-token": "session",
}


def test_only_the_storage_part_of_a_catalogs_properties_is_kept():
    assert storage_properties(CATALOG) == {
        "s3.endpoint": "http://127.0.0.1:9",
        "s3.access-key-id": "AKIAEXAMPLE",
        "s3.secret-access-key": SECRET,
        "s3.region": "eu-west-3",
        "client.session-token": "session",
    }


def test_an_s3_uri_opens_pyicebergs_s3_filesystem_with_the_catalogs_region_after_a_pickle():
    storage = pickle.loads(pickle.dumps(LakeStorage.of(CATALOG)))  # as a Spark task receives it
    filesystem, path = storage.filesystem_and_path("s3://bucket/warehouse/ns/t/data/x.parquet")
    assert isinstance(filesystem, pafs.S3FileSystem)
    assert filesystem.region == "eu-west-3"
    assert path == "bucket/warehouse/ns/t/data/x.parquet"


def test_local_uris_and_paths_open_the_local_filesystem(tmp_path):
    storage = LakeStorage()
    for uri in (f"file://{tmp_path}/a", str(tmp_path / "a")):
        filesystem, path = storage.filesystem_and_path(uri)
        assert isinstance(filesystem, pafs.LocalFileSystem) and path == f"{tmp_path}/a"


def test_no_repr_shows_a_credential():
    storage = LakeStorage.of(CATALOG)
    target = WriteTarget("s3://bucket/w/x", pa.schema([("id", pa.int64())]), storage=storage.properties)
    for text in (repr(storage), repr(target)):
        assert SECRET not in text and "AKIAEXAMPLE" not in text
