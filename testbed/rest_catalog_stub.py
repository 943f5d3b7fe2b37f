"""A minimal Iceberg REST catalog endpoint on 127.0.0.1, for testing what a REST catalog connection sends.

No REST catalog server installs here (PyPI has clients only; the servers are JVM or Rust programs), so this answers
the few requests a client makes before it commits, as the REST catalog specification words them, and records every
request (method, path, query, headers, body):

* ``POST /v1/oauth/tokens``: an OAuth2 client-credentials grant; a known ``client_id``/``client_secret`` pair gets
  an access token, another pair a 401 ``invalid_client`` whose description quotes what was sent (as a careless
  server might: the client must mask it);
* ``GET /v1/config``: the catalog's configuration, only for a known bearer token;
* ``GET /v1/{prefix}/namespaces/{ns}/tables/{table}``: a table registered with :meth:`RestCatalogStub.add_table`,
  its metadata inline and the storage credentials the catalog vends in ``config``.

Anything else is answered 501. It is a stand-in for the handshake, not a catalog: it commits nothing.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self
from urllib.parse import parse_qs, unquote, urlsplit

HOST = "127.0.0.1"
PREFIX = "tiering-wh"


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: str


@dataclass
class _Table:
    metadata_location: str
    metadata: dict[str, Any]
    vended: dict[str, str]


@dataclass
class RestCatalogStub:
    """The endpoint; a context manager. ``clients`` maps client ids to secrets, ``tokens`` lists accepted bearer
    tokens (each client's issued token is added to it)."""

    clients: Mapping[str, str] = field(default_factory=dict)
    tokens: set[str] = field(default_factory=set)
    requests: list[Request] = field(default_factory=list)
    _tables: dict[tuple[str, str], _Table] = field(default_factory=dict)
    _server: ThreadingHTTPServer | None = None

    @property
    def uri(self) -> str:
        assert self._server is not None, "not started"
        return f"http://{HOST}:{self._server.server_address[1]}"

    def issued_token(self, client_id: str) -> str:
        return f"issued-to-{client_id}"

    def add_table(
        self, identifier: tuple[str, str], metadata_location: str, metadata: dict[str, Any], vended: dict[str, str]
    ) -> None:
        self._tables[identifier] = _Table(metadata_location, metadata, dict(vended))

    def paths(self) -> list[str]:
        return [f"{r.method} {r.path}" for r in self.requests]

    # -- the HTTP side ------------------------------------------------------------------------------------------
    def _handle(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        parts = urlsplit(handler.path)
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length).decode() if length else ""
        request = Request(method, parts.path, parse_qs(parts.query), dict(handler.headers.items()), body)
        self.requests.append(request)
        status, answer = self._answer(request)
        payload = json.dumps(answer).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        handler.wfile.write(payload)

    def _answer(self, request: Request) -> tuple[int, dict[str, Any]]:
        if request.method == "POST" and request.path == "/v1/oauth/tokens":
            form = {k: v[0] for k, v in parse_qs(request.body).items()}
            client_id, secret = form.get("client_id", ""), form.get("client_secret", "")
            if form.get("grant_type") != "client_credentials" or self.clients.get(client_id) != secret:
                description = f"unknown client {client_id!r} with secret {secret!r}"
                return 401, {"error": "invalid_client", "error_description": description}
            token = self.issued_token(client_id)
            self.tokens.add(token)
            issued = "urn:ietf:params:oauth:token-type:access_token"
            return 200, {"access_token": token, "token_type": "bearer", "expires_in": 3600, "issued_token_type": issued}
        authorization = request.headers.get("Authorization", "")
        if authorization.removeprefix("Bearer ") not in self.tokens:
            error = {"message": "Not authorized", "type": "NotAuthorizedException", "code": 401}
            return 401, {"error": error}
        if request.method == "GET" and request.path == "/v1/config":
            return 200, {"defaults": {}, "overrides": {"prefix": PREFIX}}
        table_path = f"/v1/{PREFIX}/namespaces/"
        if request.method == "GET" and request.path.startswith(table_path) and "/tables/" in request.path:
            namespace, _, name = request.path.removeprefix(table_path).partition("/tables/")
            table = self._tables.get((unquote(namespace), unquote(name)))
            if table is None:
                error = {"message": f"Table does not exist: {namespace}.{name}", "type": "NoSuchTableException"}
                return 404, {"error": {**error, "code": 404}}
            return 200, {
                "metadata-location": table.metadata_location,
                "metadata": table.metadata,
                "config": table.vended,
            }
        error = {"message": f"not served here: {request.method} {request.path}", "type": "UnsupportedOperation"}
        return 501, {"error": {**error, "code": 501}}

    # -- life cycle -----------------------------------------------------------------------------------------------
    def start(self) -> Self:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                stub._handle(self, "GET")

            def do_POST(self) -> None:
                stub._handle(self, "POST")

            def do_HEAD(self) -> None:
                stub._handle(self, "HEAD")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer((HOST, 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True, name="rest-catalog-stub").start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
