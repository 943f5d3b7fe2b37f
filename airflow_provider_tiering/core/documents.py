"""The one JSON codec of the package's documents: a table's state, its maintenance status, and their parts.

Documents are dataclasses; pydantic's ``TypeAdapter`` turns them into JSON-native dicts and back (times as
ISO-8601 text with their offset, enums as their values, nested dataclasses as objects). Reading tolerates what
older versions wrote: unknown keys are ignored, missing ones take the field's default.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, TypeVar

from pydantic import BeforeValidator, JsonValue, PlainSerializer, TypeAdapter

from airflow_provider_tiering.core.offsets import Offsets

T = TypeVar("T")

#: A JSON object the kernel keeps for a source without looking inside (a watermark candidate, an emptied stretch).
JsonObject = dict[str, JsonValue]

#: Offsets in a document; an empty object, which older versions wrote for none, reads as None.
DocumentOffsets = Annotated[Offsets | None, BeforeValidator(lambda value: value or None)]

#: A time in a document: written as ``datetime.isoformat()`` (``+00:00``, as documents always had it).
DocumentTime = Annotated[datetime, PlainSerializer(lambda value: value.isoformat(), return_type=str)]


_ADAPTERS: dict[type[Any], TypeAdapter[Any]] = {}


def _adapter(kind: type[Any]) -> TypeAdapter[Any]:
    adapter = _ADAPTERS.get(kind)
    if adapter is None:
        adapter = _ADAPTERS[kind] = TypeAdapter(kind)
    return adapter


def to_document(value: Any) -> dict[str, Any]:
    """A document dataclass as a JSON-native dict."""
    document: dict[str, Any] = _adapter(type(value)).dump_python(value, mode="json")
    return document


def from_document(kind: type[T], document: dict[str, Any]) -> T:
    """The ``kind`` dataclass a JSON-native dict holds.

    Raises:
        pydantic.ValidationError: the dict is not such a document.
    """
    value: T = _adapter(kind).validate_python(document)
    return value


def iso_time(value: datetime | None) -> str | None:
    """A time as documents write it (None stays None)."""
    return None if value is None else value.isoformat()
