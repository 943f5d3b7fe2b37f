"""Write tiered tables' state documents straight into an Airflow's metadata database, as a tiering round would
leave them, for pages and endpoints that need many tables without tiering them.

Airflow's scheduler deletes the asset state of every asset no DAG references, so the tables' assets come from a
DAG: :func:`assets_dag_file` writes one whose single task has them as outlets. Once it is parsed, each document
is stored through Airflow's state backend (as ``status.reset_table`` writes one), in a process with the
cluster's environment::

    python -m testbed.state_documents documents.json     # a JSON list of state documents, each with "namespace"
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ASSET_GROUP = "tiering"


def state_document(
    table: str, status: str = "TIERED", *, epoch: int = 1, rows: int = 1000, **extra: Any
) -> dict[str, Any]:
    """A plausible state document (``TableState.to_json()`` shape) of a table last tiered a minute ago."""
    now = datetime.now(UTC)
    doc: dict[str, Any] = {
        "table": table,
        "status": status,
        "epoch": epoch,
        "last_tiered_time": (now - timedelta(minutes=1)).isoformat(),
        "last_checked_time": now.isoformat(),
        "committed": {
            "snapshot_id": 1000 + epoch,
            "epoch": epoch,
            "end_offsets": {"cursor": rows},
            "committed_at": (now - timedelta(minutes=1)).isoformat(),
        },
        "last_round": {"rows": rows, "bytes": rows * 40, "files": 1, "splits": 1, "duration_seconds": 2.5},
        "consecutive_failures": 0,
    }
    doc.update(extra)
    return doc


def assets_dag_file(dag_id: str, documents: Sequence[dict[str, Any]]) -> str:
    """A DAG file whose task ``hold_assets`` has every document's table asset as an outlet (never run)."""
    tables = sorted({(doc["namespace"], doc["table"]) for doc in documents})
    return textwrap.dedent(
        f"""
        from airflow.providers.standard.operators.empty import EmptyOperator
        from airflow.sdk import DAG, Asset

        TABLES = {tables!r}

        with DAG({dag_id!r}, schedule=None):
            EmptyOperator(
                task_id="hold_assets",
                outlets=[
                    Asset(
                        name=f"tiering/{{namespace}}/{{table}}",
                        uri=f"iceberg://iceberg_default/{{namespace}}/{{table}}",
                        group={ASSET_GROUP!r},
                        extra={{"tiered_table": table}},
                    )
                    for namespace, table in TABLES
                ],
            )
        """
    )


def write_state_documents(documents: Sequence[dict[str, Any]]) -> list[int]:
    """Store each document as the state of its table's asset (``tiering/<namespace>/<table>``, which a parsed DAG
    must have created: see :func:`assets_dag_file`); the asset ids."""
    from airflow._shared.state import AssetScope
    from airflow.models.asset import AssetModel
    from airflow.state import get_state_backend
    from airflow.utils.session import create_session
    from sqlalchemy import select

    from airflow_provider_tiering.core.state import TableState
    from airflow_provider_tiering.hooks.asset_state import STATE_KEY

    backend = get_state_backend()
    ids = []
    with create_session() as session:
        for doc in documents:
            doc = dict(doc)
            namespace = doc.pop("namespace")
            state = TableState.from_json(doc)  # the documents must be ones the provider can read
            name = f"tiering/{namespace}/{state.table}"
            asset_id = session.scalar(select(AssetModel.id).where(AssetModel.name == name))
            if asset_id is None:
                raise LookupError(f"no asset {name!r}: parse a DAG that has it as an outlet first")
            backend.set(AssetScope(asset_id=asset_id), STATE_KEY, json.dumps(state.to_json()), session=session)
            ids.append(asset_id)
    return ids


def write_in_cluster(cluster: Any, documents: Sequence[dict[str, Any]], work_dir: Path) -> None:
    """Run :func:`write_state_documents` in a process with ``cluster``'s environment (its metadata database)."""
    path = work_dir / "state_documents.json"
    path.write_text(json.dumps(list(documents)))
    done = subprocess.run(
        [str(cluster.python_bin), "-m", "testbed.state_documents", str(path)],
        env=cluster.env(),
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"writing state documents failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")


if __name__ == "__main__":
    written = write_state_documents(json.loads(Path(sys.argv[1]).read_text()))
    print(f"wrote {len(written)} state document(s)")
