"""OpenLineage datasets of a round: the hot table it read (input) and the Iceberg table it wrote (output), with
their schema and the round's row counts, for Airflow's OpenLineage integration (catalogs such as Marquez or DataHub
then show hot -> lake).

Names follow OpenLineage's dataset naming: PostgreSQL ``postgres://host:port`` / ``database.schema.table``;
a landing zone and an Iceberg table by their location (``file`` or ``scheme://authority`` / path), the Iceberg table
also by its catalog name (a symlink). A SQLite hot table: ``sqlite://<database file>`` / ``table``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit


@dataclass(frozen=True)
class LineageDataset:
    namespace: str
    name: str
    fields: tuple[tuple[str, str], ...]  # (column, type)
    symlink: tuple[str, str] | None = None  # (namespace, name) of the same dataset under another name


@dataclass(frozen=True)
class RoundLineage:
    input: LineageDataset
    output: LineageDataset
    rows: int
    bytes: int
    files: int


def _location(uri: str) -> tuple[str, str]:
    parts = urlsplit(uri)
    if parts.scheme in ("", "file"):
        return "file", str(Path(parts.path).resolve()) if parts.scheme == "" else parts.path
    return f"{parts.scheme}://{parts.netloc}", parts.path


def source_dataset(source: Any, spec: Any, fields: tuple[tuple[str, str], ...]) -> LineageDataset:
    """The hot table as an OpenLineage dataset (never with credentials)."""
    from airflow_provider_tiering.sources.postgres import PostgresSource
    from airflow_provider_tiering.sources.sqlite import SqliteSource

    if isinstance(source, PostgresSource):
        dsn = urlsplit(source.dsn)
        database = dsn.path.lstrip("/") or "postgres"
        name = f"{database}.{spec.source.db_schema or 'public'}.{spec.source.table}"
        return LineageDataset(f"postgres://{dsn.hostname}:{dsn.port or 5432}", name, fields)
    if isinstance(source, SqliteSource):
        return LineageDataset(f"sqlite://{Path(source.path).resolve()}", spec.source.table, fields)
    namespace, name = _location(spec.source.path)
    return LineageDataset(namespace, name, fields)


def lake_dataset(location: str, namespace: str, table: str, fields: tuple[tuple[str, str], ...]) -> LineageDataset:
    """The Iceberg table by its location, with its catalog name as a symlink."""
    ns, name = _location(location)
    return LineageDataset(ns, name, fields, symlink=("iceberg", f"{namespace}.{table}"))


def arrow_fields(schema: Any) -> tuple[tuple[str, str], ...]:
    return tuple((field.name, str(field.type)) for field in schema)


def operator_lineage(lineage: RoundLineage) -> Any:
    """The provider's ``OperatorLineage`` of a round (imported here: the OpenLineage provider is optional)."""
    from airflow.providers.openlineage.extractors import OperatorLineage
    from openlineage.client.event_v2 import InputDataset, OutputDataset
    from openlineage.client.facet_v2 import (
        input_statistics_input_dataset,
        output_statistics_output_dataset,
        schema_dataset,
        symlinks_dataset,
    )

    def facets(dataset: LineageDataset) -> dict[str, Any]:
        found: dict[str, Any] = {
            "schema": schema_dataset.SchemaDatasetFacet(
                fields=[schema_dataset.SchemaDatasetFacetFields(name=n, type=t) for n, t in dataset.fields]
            )
        }
        if dataset.symlink is not None:
            found["symlinks"] = symlinks_dataset.SymlinksDatasetFacet(
                identifiers=[
                    symlinks_dataset.Identifier(namespace=dataset.symlink[0], name=dataset.symlink[1], type="TABLE")
                ]
            )
        return found

    source, lake = lineage.input, lineage.output
    return OperatorLineage(
        inputs=[
            InputDataset(
                namespace=source.namespace,
                name=source.name,
                facets=facets(source),
                inputFacets={
                    "inputStatistics": input_statistics_input_dataset.InputStatisticsInputDatasetFacet(
                        rowCount=lineage.rows
                    )
                },
            )
        ],
        outputs=[
            OutputDataset(
                namespace=lake.namespace,
                name=lake.name,
                facets=facets(lake),
                outputFacets={
                    "outputStatistics": output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(
                        rowCount=lineage.rows, size=lineage.bytes, fileCount=lineage.files
                    )
                },
            )
        ],
    )
