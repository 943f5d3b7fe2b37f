"""OpenLineage datasets of a round: the hot table it read (input) and the Iceberg table it wrote (output), with
their schema and the round's row counts, for Airflow's OpenLineage integration (catalogs such as Marquez or DataHub
then show hot -> lake).

Names follow OpenLineage's dataset naming. Each source kind names its own hot table (``Source.lineage_dataset``:
PostgreSQL ``postgres://host:port`` / ``database.schema.table``, MariaDB ``mysql://host:port`` / ``database.table``,
SQLite ``sqlite://<database file>`` / ``table``, a landing zone by its location); the Iceberg table is named by its
location (``file`` or ``scheme://authority`` / path), and by its catalog name as a symlink.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_tiering.core.ports import LineageDataset, location_dataset_name

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass(frozen=True)
class RoundLineage:
    input: LineageDataset
    output: LineageDataset
    rows: int
    bytes: int
    files: int


def lake_dataset(location: str, namespace: str, table: str, fields: tuple[tuple[str, str], ...]) -> LineageDataset:
    """The Iceberg table by its location, with its catalog name as a symlink."""
    ns, name = location_dataset_name(location)
    return LineageDataset(ns, name, fields, symlink=("iceberg", f"{namespace}.{table}"))


def arrow_fields(schema: pa.Schema) -> tuple[tuple[str, str], ...]:
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
