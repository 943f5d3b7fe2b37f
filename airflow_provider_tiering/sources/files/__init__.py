"""A landing zone of files (JSON lines, CSV, Parquet): every complete file is tiered exactly once.

Files may arrive in any order of name or modification time (a late file moved in with ``mv``
keeps its old mtime), so the offsets are not a watermark but the *set* of tiered files. The set
is kept in the lake, next to the table's metadata, as a gzip'd, sorted list of relative paths
named by its sha256 (``offsets_log.py``); the offsets in the lake's snapshot only reference it::

    {"files": 1234, "bytes": 567890, "log": "<table location>/metadata/tiering-source-files/<sha256>.txt.gz",
     "sha256": "<sha256 of the uncompressed list>"}

A file's relative path is its identity: once tiered, a file of the same relative path is never
tiered again, even if it is rewritten. Files are read whole, with pyarrow's readers.

``source.py`` is the source; ``listing.py`` finds complete files, ``plans.py`` packs them into splits,
``text_records.py`` and ``parquet_files.py`` read them, ``filesystems.py`` opens local and object stores.
"""
