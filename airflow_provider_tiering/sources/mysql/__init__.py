"""MariaDB and MySQL hot tables: the table itself (``table.py``), read by a cursor (``cursor_source.py``) or from its
row binlog (``change_stream_source.py``, on the change-stream kernel of ``sources/change_stream/``)."""
