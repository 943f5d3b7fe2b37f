"""Catalogs that misbehave on purpose, to race a commit against another one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class InterposedCatalog:
    """A pyiceberg catalog that runs :meth:`before_swap` just before each ``commit_table`` swaps the metadata; the
    tables it loads commit through it."""

    def __init__(self, catalog: Any) -> None:
        self._catalog = catalog

    def before_swap(self) -> None:
        return None

    def commit_table(self, *args: Any, **kwargs: Any) -> Any:
        self.before_swap()
        return self._catalog.commit_table(*args, **kwargs)

    def load_table(self, identifier: Any) -> Any:
        table = self._catalog.load_table(identifier)
        table.catalog = self  # the table commits through its catalog
        return table

    def __getattr__(self, name: str) -> Any:
        return getattr(self._catalog, name)


class CatalogThatPausesBeforeTheSwap(InterposedCatalog):
    """A pyiceberg catalog whose first ``commit_table`` runs ``meanwhile`` just before it swaps the metadata."""

    def __init__(self, catalog: Any, meanwhile: Callable[[], None] | None) -> None:
        super().__init__(catalog)
        self._meanwhile = meanwhile

    def before_swap(self) -> None:
        if self._meanwhile is not None:
            run, self._meanwhile = self._meanwhile, None
            run()
