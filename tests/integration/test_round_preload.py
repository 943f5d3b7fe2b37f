"""What the scheduler preloads covers what a round imports: after ``import_all`` of the preload's modules, a SQLite
table's first round, tiered for real through ``TierTableOperator.execute`` in a fresh interpreter, imports no
further module of the packages the preload imports (pyiceberg, pyarrow, pandas, this provider, the drivers). A round
that starts importing something new must add it to ``ROUND_MODULES``, or every task process pays for it again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from airflow_provider_tiering.plugins.preload import ROUND_MODULES, source_modules

REPO = Path(__file__).resolve().parents[2]


def test_a_round_imports_nothing_the_scheduler_could_have_preloaded(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "testbed.preloaded_round", str(tmp_path)],
        cwd=REPO, env={**os.environ, "AIRFLOW_HOME": str(tmp_path / "airflow")}, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["tiered_through"] == {"cursor": 50}
    assert found["not_preloaded"] == []  # the test environment has every extra
    packages = {name.split(".")[0] for name in [*ROUND_MODULES, *source_modules()]}
    assert "pyiceberg" in packages and "airflow_provider_tiering" in packages
    late = [name for name in found["imported_by_round"] if name.split(".")[0] in packages]
    assert late == [], f"a round imported these after the preload: add them to ROUND_MODULES: {late}"
