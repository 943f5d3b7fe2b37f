"""A connection's fields as a plain value, so sources are built the same way with or without Airflow.

In Airflow, ``hooks/connections.py`` turns an Airflow connection into a :class:`ConnectionInfo`; tests, benchmarks and
scripts write one directly (or parse a URI). Sources read only these fields, and report the secrets among them so
errors can be masked.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

_SECRET_KEY = re.compile(r"pass|secret|token|credential|key", re.IGNORECASE)


def _uri_password(text: str) -> str | None:
    try:
        return urlsplit(text).password
    except ValueError:  # not a URI after all (say, a port that is not a number)
        return None


@dataclass(frozen=True)
class ConnectionInfo:
    """The fields of an Airflow connection (``schema`` is the database, as Airflow names it)."""

    conn_type: str
    host: str | None = None
    port: int | None = None
    login: str | None = None
    password: str | None = None
    schema: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    conn_id: str | None = None

    @classmethod
    def from_uri(cls, uri: str, conn_id: str | None = None) -> ConnectionInfo:
        """Parse ``type://login:password@host:port/schema?key=value`` (Airflow's URI form); a query's
        ``__extra__`` holds the extra as JSON, other keys become extra keys."""
        parts = urlsplit(uri)
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        extra: dict[str, Any] = json.loads(query.pop("__extra__")) if "__extra__" in query else {}
        extra.update(query)
        return cls(
            conn_type=parts.scheme.replace("-", "_"),
            host=unquote(parts.hostname) if parts.hostname else None,
            port=parts.port,
            login=unquote(parts.username) if parts.username else None,
            password=unquote(parts.password) if parts.password else None,
            schema=unquote(parts.path.lstrip("/")) or None,
            extra=extra,
            conn_id=conn_id,
        )

    @property
    def type(self) -> str:
        """The connection type, lower case."""
        return self.conn_type.lower()

    def secrets(self) -> list[str]:
        """The password, every extra value under a key that names a secret, and the password inside an extra that is
        a URI (a SQL catalog's ``uri``), for masking. An OAuth2 ``credential`` (``client_id:client_secret``) also
        gives its secret alone: a token server that refuses it may quote the part it was sent."""
        found: list[str] = []
        for key, value in self.extra.items():
            text = str(value) if value else ""
            if _SECRET_KEY.search(key) and text:
                found.append(text)
                if key == "credential" and ":" in text:
                    found.append(text.split(":", 1)[1])
            elif "://" in text and (password := _uri_password(text)):
                found.extend({password, unquote(password)})
        if self.password:
            found.append(self.password)
        return found

    def describe(self) -> str:
        return repr(self.conn_id) if self.conn_id else f"of type {self.conn_type!r}"
