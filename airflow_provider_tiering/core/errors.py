"""Exceptions that are part of the round protocol's interface."""

from __future__ import annotations


class TieringError(Exception):
    """Base class of every error raised by a tiering round."""


class InvalidTableSpec(TieringError, ValueError):
    """A table spec failed validation; the message names the table and the field."""


class IllegalTransition(TieringError):
    """A state change that the per-table state machine does not allow."""


class SourceError(TieringError):
    """The hot store could not be read (unreachable, missing table or column, bad types)."""


class FencedError(TieringError):
    """A stale attempt tried to commit: the lake moved on since it planned. Nothing was committed."""


class CommitConflict(TieringError):
    """The lake commit kept losing the catalog's atomic swap to unrelated changes; nothing was committed."""


class LakeError(TieringError):
    """The lake (catalog or warehouse) refused an operation."""


class SparkUnavailable(TieringError):
    """The round's Spark (a cluster master or a Connect server) could not be reached; nothing was written."""


class QuarantinedError(TieringError):
    """The table failed too many rounds in a row; it is not tiered again until it is reset."""


class SchemaConflict(LakeError):
    """The hot store's schema changed in a way the lake table cannot follow (narrowing, lossy type change,
    a required column gone); the message names the column and both types. Nothing was committed."""
