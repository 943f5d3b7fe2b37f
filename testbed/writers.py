"""Split writers for tests that prove a round never writes (it must not start Spark)."""

from __future__ import annotations

from typing import Any

from airflow_provider_tiering.core.ports import WrittenFile


class UntouchableWriter:
    """A :class:`~airflow_provider_tiering.core.ports.SplitWriter` that fails the test if the round touches Spark."""

    @property
    def parallelism(self) -> int:
        raise AssertionError("a round with nothing to tier started Spark")

    @property
    def writes_single_split_locally(self) -> bool:
        return False

    def write(self, *args: Any, **kwargs: Any) -> list[WrittenFile]:
        raise AssertionError("a round with nothing to tier ran a Spark job")

    def stop(self) -> None:
        return None
