"""The MariaDB/MySQL connections' shared TLS context (``sources/mysql/connections.py``): PyMySQL's private hook it
overrides still builds each connection's context, and the shared one has PyMySQL's PREFERRED-mode settings."""

from __future__ import annotations

import ssl

import pymysql.connections

from airflow_provider_tiering.sources.mysql.connections import Connection, preferred_context


def test_a_connection_without_tls_settings_gets_the_shared_preferred_context() -> None:
    first = Connection(host="127.0.0.1", port=1, user="u", password="p", defer_connect=True)
    second = Connection(host="127.0.0.1", port=1, user="u", password="p", defer_connect=True)
    assert first.ctx is second.ctx is preferred_context()  # PyMySQL calls the hook in __init__ (1.2)
    ours = preferred_context()
    theirs = pymysql.connections.Connection(host="127.0.0.1", port=1, user="u", password="p", defer_connect=True).ctx
    assert isinstance(theirs, ssl.SSLContext) and theirs is not ours
    for setting in ("check_hostname", "verify_mode", "verify_flags", "minimum_version", "maximum_version"):
        assert getattr(ours, setting) == getattr(theirs, setting), setting
    assert ours.options & (ssl.OP_NO_SSLv2 | ssl.OP_NO_SSLv3) == theirs.options & (ssl.OP_NO_SSLv2 | ssl.OP_NO_SSLv3)


def test_a_connection_naming_tls_settings_gets_its_own_context_built_as_pymysql_builds_it() -> None:
    settings = {"ssl": {"verify_mode": "required", "check_hostname": False}, "defer_connect": True}
    connection = Connection(host="127.0.0.1", port=1, user="u", password="p", **settings)
    assert connection.ctx is not preferred_context() and connection.ctx.verify_mode == ssl.CERT_REQUIRED
    assert connection._ssl_required  # a named setting makes TLS required, as in PyMySQL
