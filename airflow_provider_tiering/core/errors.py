"""Every error the package raises on purpose: one hierarchy under :class:`TieringError`.

The round protocol's errors (:class:`SourceError`, :class:`FencedError`, :class:`CommitConflict`,
:class:`LakeError`, ...) are part of the ports' interface: each port method documents which of them it may
raise. Errors that answer a lookup or a bad argument also derive from the matching built-in (``LookupError``,
``ValueError``, ``ImportError``), so generic handlers keep working.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable


class TieringError(Exception):
    """Base class of every error this package raises on purpose."""


# -- declarations ---------------------------------------------------------------------------------
class InvalidTableSpec(TieringError, ValueError):
    """A table spec failed validation; the message names the table and the field."""


class InvalidRunConf(TieringError, ValueError):
    """A DAG run's ``conf`` asks for something a tiering DAG cannot do (e.g. ``tables`` is not a list)."""


class DeploymentIncomplete(TieringError):
    """The installation where the task runs lacks something the table needs, not the table itself: fixing the
    deployment cures it. Recorded as the table's failed round (FAILED, ``last_error``) but not counted towards its
    quarantine, and the task fails without Airflow's retries (a retry runs on the same installation)."""


class MissingDependency(DeploymentIncomplete, ImportError):
    """An optional dependency of a source kind or feature is not installed; the message names the pip extra."""


def missing_modules(modules: Iterable[str]) -> list[str]:
    """Those of ``modules`` that cannot be imported here (for a :class:`MissingDependency` naming the extra)."""

    def importable(module: str) -> bool:
        try:
            return importlib.util.find_spec(module) is not None
        except ImportError:  # its parent package is missing, or an import hook refuses it
            return False

    return [module for module in modules if not importable(module)]


class ConnectionNotUsable(TieringError):
    """An Airflow connection cannot serve the table: its type is not one the source kind takes, or a field
    the source needs is missing. Raised before the round starts; recorded as a failed round."""


# -- the round protocol ---------------------------------------------------------------------------
class IllegalTransition(TieringError):
    """A state change that the per-table state machine does not allow."""


class NotRetryable(TieringError):
    """A failure no retry can cure: the table's declaration or its hot data must change first, and the message
    says what. The round records it and quarantines the table at once (no retry, no run of failed rounds until
    ``max_consecutive_failures``); once it is fixed, a reset tiers the table again."""


class SourceError(TieringError):
    """The hot store could not be read (unreachable, missing table or column, bad types)."""


class UnsupportedColumnType(SourceError, NotRetryable):
    """A tiered column has a type the lake cannot hold (or a value of it no lake type can): the message names
    the table, the column, its type in the hot store and the way out (leave the column out with the spec's
    ``source.columns``, or change its type). Raised before anything is written."""


class CursorBehindLake(SourceError):
    """Rows arrived at or below the lake's committed offsets (a cursor gone backwards: a table reloaded, ids
    reused): no later round would read them, so the round fails instead of skipping them."""


class ChangeStreamUnavailable(SourceError, NotRetryable):
    """A table's change stream cannot be read: the server is not set up for logical replication, the role lacks a
    privilege, the replica identity does not carry the key, or the slot the lake's offsets depend on is gone. The
    message says what to change; nothing was tiered."""


class TableTruncated(ChangeStreamUnavailable):
    """A change stream carried a TRUNCATE of the table: its rows left without a delete each, so the lake cannot
    tell which of its rows to remove. Nothing after it is tiered until the table is loaded again."""


class OffsetsKindMismatch(SourceError, NotRetryable):
    """The lake holds offsets of another kind than this table's source reads (a cursor value where a change stream
    wants a WAL position): the table's spec changed mode over a lake table tiered the other way. Nothing was read."""


class MergeKeyUnusable(NotRetryable):
    """A merge table's key cannot be used: the hot table has no primary key to default to, a key column is
    nullable or not tiered, or the lake table holds rows under another key. Raised before anything is written."""


class RoundTimedOut(TieringError):
    """A round ran past its ``round_timeout_seconds``: it was stopped (its Spark job cancelled) and nothing was
    committed by it."""


class FencedError(TieringError):
    """A stale attempt tried to commit: the lake moved on since it planned. Nothing was committed."""


class CommitConflict(TieringError):
    """The lake commit kept losing the catalog's atomic swap to unrelated changes; nothing was committed."""


class LakeError(TieringError):
    """The lake (catalog or warehouse) refused an operation."""


class SchemaConflict(LakeError, NotRetryable):
    """The hot store's schema changed in a way the lake table cannot follow (narrowing, lossy type change, a merge
    key column gone, an added column whose values an append table cannot read again); the message names the column,
    both types where it is about types, and the way out. Nothing was committed."""


class AmbiguousColumnChange(SchemaConflict):
    """A hot store that keeps no column ids (SQLite, MariaDB) lost a column and gained another: a rename or a drop
    and an add look the same. The message names both columns and the spec fields that tell which
    (``source.renamed_columns``, ``source.dropped_columns``)."""


class HotTableReplaced(SourceError, NotRetryable):
    """The hot table is not the one the lake was tiered from: it was dropped and created again, or truncated and
    reloaded with other rows below the lake's offsets. The message names what changed and the ways out (drop the
    lake table to load the table again, or keep the lake's rows and tier the new table from its start)."""


class ShapeChangedDuringRound(SourceError):
    """The hot table's columns changed while the round read it (an ALTER TABLE between planning and reading): what
    it read may lack a column's values, so nothing is committed; the next round follows the new shape."""


class SparkUnavailable(TieringError):
    """The round's Spark (a cluster master or a Connect server) could not be reached; nothing was written."""


class InvalidPlan(TieringError):
    """A writer was handed splits it cannot run (e.g. indexes that are not 0..n-1): a bug in the caller."""


class QuarantinedError(TieringError):
    """The table failed too many rounds in a row; it is not tiered again until it is reset."""


class MaintenanceFailed(TieringError):
    """A maintenance run failed; the message is the recorded ``last_error``."""


# -- reading and steering tables ------------------------------------------------------------------
class CursorNotComparable(TieringError, ValueError):
    """A cursor value to wait for cannot be compared with the table's committed cursor."""


class TableNotFound(TieringError, LookupError):
    """No tiered table of that name is known (no state document, or no DAG tiers it)."""


class AmbiguousTable(TieringError, ValueError):
    """A table name that several DAGs tier; name the DAG's tables separately."""


class DagPaused(TieringError):
    """A run was asked of a paused DAG by a caller who will wait for it: nothing was started."""


class TriggerFailed(TieringError):
    """Airflow did not start the DAG run asked for."""
