"""One connection kept for the statements made inside a block, instead of one per statement: against PostgreSQL
or MariaDB each connection costs a server process (or thread) and an authentication, and a round or a reader's run
makes several small queries."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager, suppress
from typing import Any


class HeldConnection:
    """Inside :meth:`held`, the first :meth:`connection` opens one with the caller's ``connect`` and the others share
    it (dropped after an error, so that a broken connection is not used again); outside it, each opens its own,
    closed after. It takes ``connect`` at each use, not once, so that it never reaches back to an owner it was copied
    from; an owner that is copied or pickled gives its copy a new one (``SqlTable.__getstate__``)."""

    def __init__(self) -> None:
        self._holding = False
        self._conn: Any = None

    @contextmanager
    def held(self) -> Iterator[None]:
        if self._holding:
            yield
            return
        self._holding = True
        try:
            yield
        finally:
            self._holding = False
            self.drop()

    @contextmanager
    def connection(self, connect: Callable[[], Any]) -> Iterator[Any]:
        if not self._holding:
            with closing(connect()) as conn:  # not ``with conn``: sqlite3's commits and keeps it open
                yield conn
            return
        if self._conn is None:
            self._conn = connect()
        try:
            yield self._conn
        except BaseException:
            self.drop()
            raise

    def drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with suppress(Exception):  # closing a connection the server already dropped
                conn.close()
