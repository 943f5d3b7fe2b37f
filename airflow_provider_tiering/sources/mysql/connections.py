"""PyMySQL connections that share one TLS context where PyMySQL would build a new one for each.

A connection that names no TLS settings runs in PyMySQL's PREFERRED mode (PyMySQL 1.2): TLS when the server offers
it, its certificate not verified (no CA is given), through a fresh ``ssl.create_default_context()`` that loads the
system's CA bundle every time (25–30 ms of CPU; a tenth of a small change-stream round, which connects five times),
only to verify nothing. :class:`Connection` gives all of them one context per process with the same settings and no
CA bundle, and builds any other (a CA, a certificate, a cipher named) as PyMySQL does. Why a private hook: PyMySQL
offers no other way to pass a PREFERRED-mode context (a context passed as ``ssl`` makes TLS required); it is pinned
(``PyMySQL<1.3``) and its contract tested (``tests/unit/test_mysql_connections.py``).
"""

from __future__ import annotations

import functools
import ssl
from typing import Any

import pymysql.connections


class Connection(pymysql.connections.Connection):
    """A PyMySQL connection whose PREFERRED-mode TLS context is the process's shared one."""

    def _create_ssl_ctx(self, sslp: Any) -> ssl.SSLContext:
        if isinstance(sslp, dict) and not sslp:
            return preferred_context()
        context: ssl.SSLContext = super()._create_ssl_ctx(sslp)
        return context


@functools.cache
def preferred_context() -> ssl.SSLContext:
    """TLS as PyMySQL's PREFERRED mode makes it: no certificate verified, no host name checked, SSL 2 and 3 off."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.verify_flags &= ~ssl.VERIFY_X509_STRICT
    context.options |= ssl.OP_NO_SSLv2 | ssl.OP_NO_SSLv3
    return context


def connect(**settings: Any) -> Connection:
    """``pymysql.connect`` with the shared PREFERRED-mode context (the binlog reader's ``pymysql_wrapper`` too)."""
    return Connection(**settings)
