"""The spec field reference in docs/ is generated from the spec models and kept up to date."""

from __future__ import annotations

from pathlib import Path

from airflow_provider_tiering.core.source_specs import SOURCE_SPEC_KINDS
from airflow_provider_tiering.core.spec import EvictionSpec, LakeSpec, MaintenanceSpec, MergeSpec, SparkSpec, TableSpec
from airflow_provider_tiering.spec_reference import main, render

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "spec-reference.md"


def test_docs_reference_is_up_to_date() -> None:
    assert REFERENCE.read_text() == render(), (
        "out of date: python -m airflow_provider_tiering.spec_reference docs/spec-reference.md"
    )


def test_every_field_of_every_spec_model_has_a_row_with_its_default() -> None:
    text = REFERENCE.read_text()
    parts = [("", TableSpec), ("lake.", LakeSpec), ("spark.", SparkSpec), ("maintenance.", MaintenanceSpec)]
    parts += [("eviction.", EvictionSpec), ("merge.", MergeSpec)]
    parts += [("source.", model) for model in SOURCE_SPEC_KINDS.values()]
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    for prefix, model in parts:
        for name, field in model.model_fields.items():
            matching = [row for row in rows if row.startswith(f"| `{prefix}{name}` |")]
            assert matching, f"{prefix}{name} is missing from docs/spec-reference.md"
            if field.is_required():
                assert any("| required |" in row for row in matching), f"{prefix}{name} is required"
            elif isinstance(field.default, (int, float)) and not isinstance(field.default, bool):
                assert any(f"`{field.default}`" in row for row in matching), f"{prefix}{name} default"
    # Spot checks against the user guide's promises.
    assert "| `retry_delay_seconds` | number | `30.0` |" in text
    assert "| `source.settle_lag_seconds` | number | `0.0` |" in text


def test_check_mode_fails_on_a_stale_file_and_passes_on_a_fresh_one(tmp_path: Path) -> None:
    target = tmp_path / "reference.md"
    target.write_text(render().replace("retry_delay_seconds", "retry_delay"))
    assert main([str(target), "--check"]) == 1
    assert main([str(target)]) == 0
    assert main([str(target), "--check"]) == 0
