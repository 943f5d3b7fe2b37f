"""The lake's storage properties: what is kept of a catalog's, how a filesystem is opened from them, and that they
neither leak into a ``repr`` nor get lost on the way to a Spark task (pickled)."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys

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


def test_a_local_path_is_parsed_and_opened_as_pyicebergs_fileio_would(tmp_path, monkeypatch):
    from pyiceberg.io.pyarrow import PyArrowFileIO

    monkeypatch.chdir(tmp_path)
    storage = LakeStorage()
    for uri in (f"file://{tmp_path}/a", str(tmp_path / "a")):
        assert storage.filesystem_and_path(uri)[1] == f"{tmp_path}/a"
    for uri in (f"file://{tmp_path}/w/x.parquet", f"file:{tmp_path}/w/x.parquet", f"{tmp_path}/w/x", "rel/w/x"):
        filesystem, path = storage.filesystem_and_path(uri)
        assert isinstance(filesystem, pafs.LocalFileSystem)
        assert path == PyArrowFileIO.parse_location(uri)[2], uri
        # As pyiceberg's local filesystem does: a file's directory is created when the file is opened.
        with filesystem.open_output_stream(f"{path}/new/file") as stream:
            stream.write(b"x")
        assert (tmp_path / path / "new" / "file").read_bytes() == b"x"


def test_a_plain_path_sent_elsewhere_by_default_scheme_goes_through_pyiceberg():
    storage = LakeStorage({"DEFAULT_SCHEME": "s3", "DEFAULT_NETLOC": "bucket", "s3.region": "eu-west-3"})
    filesystem, path = storage.filesystem_and_path("/warehouse/x.parquet")
    assert isinstance(filesystem, pafs.S3FileSystem)
    assert path == "/warehouse/x.parquet"


def test_a_spark_task_writing_to_local_storage_imports_no_pyiceberg(tmp_path):
    """What a Spark task writing an unpartitioned table's split loads: the writer, the storage, pyarrow; pyiceberg's
    import would cost each Python worker about half a second of CPU."""
    code = (
        "import json, sys\n"
        "import pyarrow as pa\n"
        "from airflow_provider_tiering.lake.parquet_writer import write_data_files\n"
        "schema = pa.schema([('id', pa.int64())])\n"
        "batch = pa.record_batch([pa.array([1, 2])], schema=schema)\n"
        f"files = write_data_files([batch], schema, 'file://{tmp_path}/data', 'split', 0)\n"
        "print(json.dumps([len(files), sorted(m for m in sys.modules if m.startswith('pyiceberg'))]))\n"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(loaded.stdout) == [1, []]
    assert len(list((tmp_path / "data").glob("*.parquet"))) == 1


def test_no_repr_shows_a_credential():
    storage = LakeStorage.of(CATALOG)
    target = WriteTarget("s3://bucket/w/x", pa.schema([("id", pa.int64())]), storage=storage.properties)
    for text in (repr(storage), repr(target)):
        assert SECRET not in text and "AKIAEXAMPLE" not in text
