"""The faults a chaos run injects: each one breaks a real part (a process, a server, a file system, a lock).

- ``kill_process_group``: SIGKILL of the round's process group (driver, Spark's JVM, its Python workers).
- PostgreSQL restart: ``PostgresServer.restart()`` (fast shutdown: every connection and open transaction dropped).
- ``CatalogOutage``: an exclusive lock on the SQLite catalog database held longer than SQLite's busy timeout,
  so every catalog read and commit in that window fails with "database is locked".
- ``LakeCommitRace``: another writer appends to the same Iceberg table while a round writes and commits, so the
  round's compare-and-swap fails and must re-validate.
- ``WarehouseMount``: the warehouse on a size-limited tmpfs, filled to the last page and freed again.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sqlite3
import subprocess
import threading
import time
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any


def kill_process_group(pgid: int) -> None:
    """SIGKILL every process of the group, including children whose leader has already exited."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


class CatalogOutage:
    """Hold ``BEGIN EXCLUSIVE`` on the catalog's SQLite file: readers and writers wait 5 s, then fail."""

    def __init__(self, database: Path) -> None:
        self.database = database

    def hold(self, seconds: float, stop: threading.Event) -> None:
        conn = sqlite3.connect(self.database, timeout=60, isolation_level=None)
        try:
            conn.execute("BEGIN EXCLUSIVE")
            stop.wait(seconds)
            conn.execute("ROLLBACK")
        finally:
            conn.close()


class LakeCommitRace:
    """Another writer of the same Iceberg table: small appends, one after another, while a round writes and commits.

    Its rows are marked (negative ids; ``writer`` or ``name`` is ``'external'``) so the final check can tell them
    from tiered rows; they fit either kind of chaos table (a cursor table's columns or a change-stream table's).
    Each append moves the table's current snapshot, so a round committing meanwhile loses the catalog's swap and
    must re-validate (a property update would not do: pyiceberg re-applies it onto the newer metadata). The harness
    makes the first append land between the round's fence check and its swap (the worker's swap gate), then the
    burst goes on until ``done`` is set (the round has ended), ``pause`` seconds apart, for ``seconds`` at most.
    """

    def __init__(self, catalog_properties: dict[str, str], first_id: int) -> None:
        from pyiceberg.catalog import load_catalog

        self.catalog = load_catalog("default", **catalog_properties)  # loaded up front: the burst starts at once
        self.next_id = first_id
        self.table: str | None = None
        self.committed_ids: list[int] = []
        self.uncertain_ids: list[int] = []  # an error that leaves unknown whether the append committed
        self.lost = 0

    @property
    def committed(self) -> int:
        return len(self.committed_ids)

    def run(
        self, identifier: tuple[str, str], done: threading.Event, seconds: float = 120.0, pause: float = 0.2
    ) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not done.is_set():
            if not self.append_once(identifier):
                return
            done.wait(pause)

    def append_once(self, identifier: tuple[str, str]) -> bool:
        """Append 3 marked rows in one commit; False when the table does not exist."""
        import pyarrow as pa
        from pyiceberg.exceptions import CommitFailedException, NoSuchTableError

        ids = [self.next_id - i for i in range(3)]
        self.next_id -= 3
        try:
            table = self.catalog.load_table(identifier)
            schema = table.schema().as_arrow()
            rows = [{name: marked_value(name, i) for name in schema.names} for i in ids]
            table.append(pa.Table.from_pylist(rows, schema=schema))
            self.committed_ids.extend(ids)
        except CommitFailedException:
            self.lost += 1  # the round won this swap
        except NoSuchTableError:
            return False
        except Exception as exc:
            if "locked" not in str(exc):
                raise
            self.uncertain_ids.extend(ids)
        return True


def marked_value(column: str, row_id: int) -> Any:
    """The competing writer's value of ``column`` in its row ``row_id`` (negative)."""
    values: dict[str, Any] = {
        "id": row_id,
        "writer": "external",  # a cursor table's columns (testbed.hot_writers)
        "seq": -row_id,
        "amount": Decimal("1.00"),
        "created_at": datetime.now(UTC),
        "note": "appended by another writer",
        "name": "external",  # a change-stream table's (testbed.changing_table)
        "doc": "appended by another writer",
        "tags": ["external"],
    }
    return values[column]


class WarehouseMount:
    """A tmpfs of ``size_mb`` mounted on ``path`` (needs root); ``fill()`` leaves no free page, ``free()`` undoes it."""

    def __init__(self, path: Path, size_mb: int) -> None:
        self.path = path
        self.size_mb = size_mb
        self.filler = path / ".chaos-filler"
        self.mounted = False

    @staticmethod
    def available() -> str | None:
        """None when a tmpfs can be mounted here, else why not."""
        if os.geteuid() != 0:
            return "mounting a size-limited tmpfs needs root"
        return None

    def mount(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={self.size_mb}m,mode=0755", "tmpfs", str(self.path)],
            check=True,
            capture_output=True,
            text=True,
        )
        self.mounted = True

    def unmount(self) -> None:
        if not self.mounted:
            return
        self.free()
        result = subprocess.run(["umount", str(self.path)], capture_output=True, text=True, check=False)
        if result.returncode != 0:  # a straggler still has a file open: detach now, freed when it closes
            subprocess.run(["umount", "-l", str(self.path)], capture_output=True, text=True, check=True)
        self.mounted = False

    def free_bytes(self) -> int:
        stat = os.statvfs(self.path)
        return stat.f_bavail * stat.f_frsize

    def fill(self) -> int:
        """Write the filler until the file system refuses even a page; returns the bytes written."""
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        written = 0
        try:
            with contextlib.suppress(OSError):
                size = max(0, self.free_bytes() - (1 << 20))
                os.posix_fallocate(fd, 0, size)
                written = size
            for chunk in (1 << 20, 1 << 12):
                block = b"\0" * chunk
                while True:
                    try:
                        written += os.write(fd, block)
                    except OSError as exc:
                        if exc.errno != errno.ENOSPC:
                            raise
                        break
        finally:
            os.close(fd)
        return written

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)

    def describe(self) -> dict[str, Any]:
        return {"path": str(self.path), "size_mb": self.size_mb, "free_bytes": self.free_bytes()}
