"""Iceberg catalogs: loaded from pyiceberg properties, and loaded late, inside the round that needs them."""

from __future__ import annotations

import fcntl
import random
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_provider_tiering.core.errors import LakeError, MissingDependency, missing_modules

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog


@contextmanager
def _local_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


#: The SQLAlchemy driver a SQL catalog's URI scheme loads, and the pip extra that installs it (SQLAlchemy would fail
#: with a bare ModuleNotFoundError).
SQL_CATALOG_DRIVERS = {
    "postgresql": ("psycopg2", "sql-postgres"),
    "postgresql+psycopg2": ("psycopg2", "sql-postgres"),
    "postgresql+psycopg": ("psycopg", "sql-postgres"),
}


def check_catalog_dependencies(properties: Mapping[str, str]) -> None:
    """Raise MissingDependency, naming the pip extra, when a SQL catalog's database driver is not installed."""
    scheme = properties.get("uri", "").partition("://")[0]
    if properties.get("type", "sql") != "sql":  # pyiceberg takes a postgresql:// URI without a type as SQL too
        return
    needed = SQL_CATALOG_DRIVERS.get(scheme)
    if needed is not None and missing_modules(needed[:1]):
        module, extra = needed
        raise MissingDependency(
            f"a SQL catalog on {scheme}:// needs {module}: pip install 'airflow-provider-tiering[{extra}]'"
        )


#: Loads of a SQL catalog on a database server, when siblings create its tables at the same moment.
SQL_CATALOG_LOAD_ATTEMPTS = 4


def load_catalog(name: str, properties: Mapping[str, str]) -> Catalog:
    """Load a pyiceberg catalog. MissingDependency when a SQL catalog's database driver is not installed.

    pyiceberg's SQL catalog creates its tables on first load, check-then-create, so sibling tasks loading a new one
    at once race. On a local SQLite file the load runs under a file lock. On a database server (PostgreSQL) no lock
    reaches every worker, so the losers retry: a loser fails with a duplicate-table error once the winner's
    transaction (it creates both tables in one) commits, and its next load finds the tables."""
    from pyiceberg.catalog import load_catalog as pyiceberg_load_catalog

    props = dict(properties)
    check_catalog_dependencies(props)
    uri = props.get("uri", "")
    if props.get("type") == "sql" and uri.startswith("sqlite:///"):
        database = Path(uri.removeprefix("sqlite:///"))
        with _local_lock(database.with_name(database.name + ".lock")):
            return pyiceberg_load_catalog(name, **props)
    # (without a type, pyiceberg takes an http(s):// URI as a REST catalog's and a thrift:// one as Hive's)
    if props.get("type", "sql") != "sql" or "://" not in uri or uri.startswith(("http", "thrift")):
        return pyiceberg_load_catalog(name, **props)
    from sqlalchemy.exc import IntegrityError, ProgrammingError

    for attempt in range(1, SQL_CATALOG_LOAD_ATTEMPTS):
        try:
            return pyiceberg_load_catalog(name, **props)
        except (IntegrityError, ProgrammingError):  # "relation already exists", or its pg_type twin
            time.sleep(0.05 * attempt)
    return pyiceberg_load_catalog(name, **props)


class CatalogHandle:
    """A catalog loaded on its first use, so that one that cannot be loaded (unreachable, misconfigured) fails
    inside the table's round, which records the error in the table's state, instead of before the round starts."""

    def __init__(self, load: Callable[[], Catalog], description: str, *, loaded: Catalog | None = None) -> None:
        self._load = load
        self.description = description
        self._catalog = loaded

    @classmethod
    def of(cls, catalog: Catalog) -> CatalogHandle:
        """A handle of a catalog loaded already."""
        return cls(lambda: catalog, repr(catalog.name), loaded=catalog)

    def get(self) -> Catalog:
        """The catalog.

        Raises:
            LakeError: it cannot be loaded (the cause is chained).
            MissingDependency: its database driver is not installed (the message names the extra).
        """
        if self._catalog is None:
            try:
                self._catalog = self._load()
            except MissingDependency:
                raise
            except Exception as exc:
                raise LakeError(f"Iceberg catalog {self.description} cannot be loaded: {exc}") from exc
        return self._catalog


def load_or_create_table(catalog: Catalog, identifier: tuple[str, str], schema: Any, properties: dict[str, str]) -> Any:
    """The table, created with its namespace when missing. Writers that create it at the same moment race on the
    catalog's keys: the loser (a duplicate-key error, whatever the catalog's driver calls it) loads the winner's."""
    from pyiceberg.exceptions import NoSuchTableError

    for attempt in range(3):
        try:
            return catalog.load_table(identifier)
        except NoSuchTableError:
            try:
                catalog.create_namespace_if_not_exists(identifier[0])
                return catalog.create_table_if_not_exists(identifier, schema=schema, properties=properties)
            except Exception:  # another writer created one of them at the same moment (a duplicate key)
                if attempt == 2:
                    raise
                time.sleep(random.uniform(0.05, 0.2))
    raise AssertionError("unreachable: the last attempt returns or raises")
