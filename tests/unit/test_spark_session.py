from __future__ import annotations

import pytest

from airflow_provider_tiering.spark.session import is_loopback_master


@pytest.mark.parametrize(
    ("master", "loopback"),
    [
        ("spark://127.0.0.1:7077", True),
        ("spark://localhost:7077", True),
        ("spark://127.0.0.1:7077,localhost:7078", True),
        ("spark://127.0.0.1:7077,m2:7077", False),
        ("spark://m1:7077", False),
        ("local[*]", False),
        ("yarn", False),
    ],
)
def test_only_a_standalone_master_on_loopback_gets_the_one_machine_defaults(master, loopback):
    assert is_loopback_master(master) is loopback
