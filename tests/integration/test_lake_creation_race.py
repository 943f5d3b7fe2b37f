"""Sibling tasks create their lake tables in one namespace at the same time (as under LocalExecutor)."""

from __future__ import annotations

import multiprocessing

import pyarrow as pa
from pyiceberg.catalog import load_catalog

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])


NAMESPACES = 8
TABLES_PER_NAMESPACE = 4


def create(catalog_properties: dict[str, str], table: str, barrier: multiprocessing.synchronize.Barrier) -> None:
    from airflow_provider_tiering.core.spec import LakeSpec
    from testbed.rounds import lake_of

    lakes = [lake_of(LakeSpec(namespace=f"race{n}", table=table), catalog_properties) for n in range(NAMESPACES)]
    for lake in lakes:  # every worker races every other one, once per namespace
        barrier.wait()
        lake.ensure_table(SCHEMA)


def test_concurrent_first_rounds_create_namespace_and_tables_once(catalog_properties):
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(TABLES_PER_NAMESPACE, timeout=30)  # a dead peer breaks it quickly
    tables = [f"t{i}" for i in range(TABLES_PER_NAMESPACE)]
    workers = [context.Process(target=create, args=(catalog_properties, t, barrier)) for t in tables]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    assert [w.exitcode for w in workers] == [0] * TABLES_PER_NAMESPACE
    catalog = load_catalog("default", **catalog_properties)
    for n in range(NAMESPACES):
        assert sorted(t for _, t in catalog.list_tables(f"race{n}")) == tables
