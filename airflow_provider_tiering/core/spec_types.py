"""The building blocks of table specs: validated identifiers and the strict, frozen model every spec part uses."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict

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
