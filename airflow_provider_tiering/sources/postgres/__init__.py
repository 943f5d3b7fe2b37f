"""PostgreSQL hot tables, read two ways.

- ``cursor_source.py``: a table read by a cursor column (appends, merges by cursor), through ADBC;
- ``change_stream_source.py``: a table read from its change stream (logical replication, merged by key);
- ``streamed_table.py``: the change-stream table's bulk reads and eviction;
- ``replication.py``: its server checks, publication, slot and replication origin;
- ``pgoutput.py``: the decoder of the change stream's messages;
- ``column_types.py``: how each column type is read into Arrow and held in the lake.

The sources are found through ``sources/registry.py`` and imported only when a table needs them.
"""
