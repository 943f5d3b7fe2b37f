"""The building blocks of table specs: validated identifiers and the strict, frozen model every spec part uses."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError

from airflow_provider_tiering.core.errors import InvalidTableSpec

ModelT = TypeVar("ModelT", bound=BaseModel)

# Plain identifiers only: they are also quoted when used, this keeps names portable and readable.
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


def check_identifier(value: str) -> str:
    """Return ``value`` if it is a plain identifier; raise ValueError (a spec validation error) otherwise."""
    if not _IDENTIFIER.match(value):
        raise ValueError(
            f"{value!r} is not a plain identifier (letters, digits, underscore; "
            "starts with a letter or underscore; at most 63 characters)"
        )
    return value


#: A table, schema or column name: validated here, and still quoted wherever it is used.
Identifier = Annotated[str, AfterValidator(check_identifier)]


def check_column_list(value: tuple[str, ...] | None, field: str, when_empty: str) -> tuple[str, ...] | None:
    """Return a declared list of columns if it is neither empty nor repeats a column (``when_empty``: what to do
    instead of declaring it empty); raise ValueError otherwise. None (not declared) passes."""
    if value is None:
        return None
    if not value:
        raise ValueError(f"{field} must not be empty; {when_empty}")
    if len(set(value)) != len(value):
        raise ValueError(f"{field} must not repeat a column")
    return value


class StrictModel(BaseModel):
    """A spec part: unknown fields are an error, and a built spec never changes."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def dotted(loc: tuple[int | str, ...]) -> str:
    """A validation error's location as a field path (``lake.partition_by``)."""
    return ".".join(str(p) for p in loc) or "<root>"


def validated(
    model: type[ModelT], data: ModelT | Mapping[str, Any], what: str, location: Callable[[tuple[int | str, ...]], str]
) -> ModelT:
    """``data`` as a ``model``, or InvalidTableSpec naming what it is (``what``: "table", "stream"), its name and each
    field that failed (``location`` writes a field's path)."""
    if isinstance(data, model):
        return data
    name = data.get("name", "<unnamed>") if isinstance(data, Mapping) else "<not a mapping>"
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"field '{location(err['loc'])}': {err['msg']}" for err in exc.errors())
        raise InvalidTableSpec(f"{what} {name!r}: {problems}") from exc
