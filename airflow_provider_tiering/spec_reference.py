"""The field reference of a table spec, generated from the spec models: every field, its type, default and meaning.

``python -m airflow_provider_tiering.spec_reference docs/spec-reference.md`` writes it (``--check``: exit 1 when the
file differs); ``tests/unit/test_spec_reference.py`` fails when ``docs/spec-reference.md`` is out of date. A field
without a ``description`` is refused, so a new field cannot go undocumented.
"""

from __future__ import annotations

import argparse
import enum
import json
import sys
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from airflow_provider_tiering.core.source_specs import SOURCE_SPEC_KINDS
from airflow_provider_tiering.core.spec import EvictionSpec, LakeSpec, MaintenanceSpec, MergeSpec, SparkSpec, TableSpec
from airflow_provider_tiering.core.spec_types import check_identifier
from airflow_provider_tiering.core.stream_spec import ChangeLogSpec, StreamGroupSpec

HEADER = """# Table spec field reference

Generated from the spec models (`airflow_provider_tiering/core/spec.py`, `core/source_specs.py`) by
`python -m airflow_provider_tiering.spec_reference docs/spec-reference.md`; do not edit by hand.
A table spec is a mapping (a dict in a DAG file, or an entry of a YAML list) validated when the DAG file is parsed:
an unknown field, a missing required one or a bad value fails the parse naming the table and the field."""


def _sections() -> list[tuple[str, str, type[BaseModel]]]:
    """The spec's parts in the order they are documented: (heading, key path in a spec, model)."""
    sections: list[tuple[str, str, type[BaseModel]]] = [("The table", "", TableSpec)]
    for kind, model in SOURCE_SPEC_KINDS.items():
        sections.append((f'`source` of kind `"{kind}"`', "source", model))
    sections += [
        ("`lake`", "lake", LakeSpec),
        ("`spark`", "spark", SparkSpec),
        ("`maintenance`", "maintenance", MaintenanceSpec),
        ("`eviction`", "eviction", EvictionSpec),
        ("`merge`", "merge", MergeSpec),
        ("Stream groups", "streams[]", StreamGroupSpec),
        ("A stream group's `change_log`", "streams[].change_log", ChangeLogSpec),
    ]
    return sections


_SECTION_OF: dict[type[BaseModel], str] = {}


class UndocumentedField(ValueError):
    """A spec field has no description."""


def _is_identifier(metadata: Any) -> bool:
    return any(getattr(item, "func", None) is check_identifier for item in metadata)


def field_type(field: FieldInfo) -> str:
    """A field's type; pydantic keeps a top-level ``Annotated``'s validators in ``metadata``."""
    return "identifier" if field.annotation is str and _is_identifier(field.metadata) else type_name(field.annotation)


def type_name(annotation: Any) -> str:
    """A spec field's type as a reader writes its value (``int``, ``list of str``, ``"a" | "b"``)."""
    if annotation is type(None):
        return "null"
    origin = get_origin(annotation)
    if origin is Annotated:
        base, *metadata = get_args(annotation)
        return "identifier" if _is_identifier(metadata) else type_name(base)
    if origin is Literal:
        return " \\| ".join(json.dumps(v) for v in get_args(annotation))
    if origin in (Union, types.UnionType):
        members = get_args(annotation)
        return " \\| ".join(dict.fromkeys(type_name(m) for m in members))
    if origin is tuple or origin is list:
        return f"list of {type_name(get_args(annotation)[0])}"
    if origin in (dict, Mapping) or origin is typing.Mapping:
        key, value = get_args(annotation)
        return f"mapping of {type_name(key)} to {type_name(value)}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _SECTION_OF.get(annotation, annotation.__name__)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return " \\| ".join(json.dumps(m.value) for m in annotation)
    if isinstance(annotation, type):
        return {"str": "string", "float": "number", "int": "integer", "bool": "boolean"}.get(
            annotation.__name__, annotation.__name__
        )
    return str(annotation).replace("typing.", "")


def default_text(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    value = field.default_factory() if field.default_factory is not None else field.default  # type: ignore[call-arg]
    if value is PydanticUndefined:
        return "required"
    if isinstance(value, BaseModel):
        return "its fields' defaults"
    if isinstance(value, tuple):
        value = list(value)
    return f"`{json.dumps(value)}`"


def constraints_text(field: FieldInfo) -> str:
    """The bounds pydantic enforces (``> 0``, ``≤ 2048``), for the meaning column."""
    bounds = []
    for item in field.metadata:
        for attr, sign in (("gt", ">"), ("ge", "≥"), ("lt", "<"), ("le", "≤")):
            value = getattr(item, attr, None)
            if value is not None:
                bounds.append(f"{sign} {value:g}" if isinstance(value, float) else f"{sign} {value}")
    return f" ({', '.join(bounds)})" if bounds else ""


def render() -> str:
    """The whole reference, as Markdown."""
    sections = _sections()
    _SECTION_OF.clear()
    for heading, path, model in sections:
        if path and model not in SOURCE_SPEC_KINDS.values():
            _SECTION_OF[model] = f"mapping ({heading})"
    _SECTION_OF.update({model: "mapping (see `source` below)" for model in SOURCE_SPEC_KINDS.values()})
    out = [HEADER]
    for heading, path, model in sections:
        out.append(f"\n## {heading}\n")
        doc = " ".join((model.__doc__ or "").split("\n\n")[0].split())
        if doc:
            out.append(f"{doc}\n")
        out.append("| field | type | default | meaning |")
        out.append("| --- | --- | --- | --- |")
        for name, field in model.model_fields.items():
            if not field.description:
                raise UndocumentedField(f"{model.__name__}.{name} has no description")
            key = f"{path}.{name}" if path else name
            meaning = " ".join(field.description.split()).replace("|", "\\|").replace("<", "\\<")
            meaning += constraints_text(field)
            out.append(f"| `{key}` | {field_type(field)} | {default_text(field)} | {meaning} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("path", type=Path, help="where to write the reference (docs/spec-reference.md)")
    parser.add_argument("--check", action="store_true", help="exit 1 when the file is not what would be written")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.path.read_text() if args.path.exists() else ""
        if current != text:
            print(f"{args.path} is out of date: run python -m airflow_provider_tiering.spec_reference {args.path}")
            return 1
        return 0
    args.path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
