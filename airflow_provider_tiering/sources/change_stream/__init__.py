"""One change-stream kernel, a log reader per database: what a table tiered from its database's log needs whatever
the database (``source.py``), the log's messages as the kernel reads them (``messages.py``), their reduction per key
(``reduce.py``), and the typed rows a round writes (``typed_changes.py``). A database adds its log reader beside it
(``sources/postgres/change_stream_source.py``: pgoutput from a slot; ``sources/mysql_binlog/``: the row binlog)."""
