"""What a statement the binlog logs as text (a ``QueryEvent``: DDL, and DML a session logged as a statement) does to
one table: the kinds that change its rows without a row event each.

With ``binlog_format = ROW`` a change of rows is logged as row events, but DDL is logged as its text: a TRUNCATE, a
DROP, a RENAME TABLE or a CREATE OR REPLACE replaces the table's rows without one event per row, and the change
stream must refuse to go on past them rather than keep rows the table lost. A session may also set ``binlog_format``
to STATEMENT or MIXED for itself: its INSERT, UPDATE or DELETE of the table then reaches the binlog as text, which
the stream cannot apply. Hand-written, because only a statement's first keywords and the tables it names matter,
and a SQL parser still has to be told MariaDB's DDL; a statement that names the table where this module cannot tell
what it does is taken for one that changes its rows (refused, never ignored).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from dataclasses import dataclass

_TOKENS = re.compile(
    r"""/\*.*?\*/|--[^\n]*|\#[^\n]*      # comments
    |`(?P<quoted>(?:[^`]|``)*)`           # a quoted identifier
    |'(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.|"")*"   # strings
    |(?P<word>[A-Za-z0-9_$\u0080-\uffff]+)
    |(?P<mark>[.,();])""",
    re.VERBOSE | re.DOTALL,
)


class Effect(enum.Enum):
    """What a statement does to the table's rows."""

    NONE = "none"
    #: Its columns or indexes change; its rows stay (the row events after it carry the new columns).
    ALTERED = "altered"
    TRUNCATED = "truncated"
    #: Dropped, renamed away, swapped, or created anew: other rows under its name.
    REPLACED = "replaced"
    #: Its rows changed by a statement logged as text (a session's ``binlog_format`` not ROW).
    STATEMENT = "statement"


@dataclass(frozen=True)
class _Token:
    text: str
    #: A keyword or name as written (upper case for comparing keywords); quoted identifiers are never keywords.
    quoted: bool = False

    @property
    def keyword(self) -> str:
        return "" if self.quoted else self.text.upper()


def _tokens(statement: str) -> list[_Token]:
    found: list[_Token] = []
    for match in _TOKENS.finditer(statement):
        if match.group("quoted") is not None:
            found.append(_Token(match.group("quoted").replace("``", "`"), quoted=True))
        elif match.group("word") is not None:
            found.append(_Token(match.group("word")))
        elif match.group("mark") is not None:
            found.append(_Token(match.group("mark")))
    return found


def _names(tokens: list[_Token], start: int, default_schema: str) -> list[tuple[str, str, int]]:
    """The table names at ``start``: ``(schema, table, position after)`` for each ``[schema.]table``, in a list
    separated by commas."""
    found: list[tuple[str, str, int]] = []
    at = start
    while at < len(tokens):
        first = tokens[at]
        if at + 2 < len(tokens) and tokens[at + 1].text == ".":
            schema, table, at = first.text, tokens[at + 2].text, at + 3
        else:
            schema, table, at = default_schema, first.text, at + 1
        found.append((schema, table, at))
        if at < len(tokens) and tokens[at].text == ",":
            at += 1
            continue
        break
    return found


def _skip(tokens: list[_Token], at: int, *words: str) -> int:
    while at < len(tokens) and tokens[at].keyword in words:
        at += 1
    return at


def effect_on(statement: str, default_schema: str, schema: str, table: str) -> Effect:
    """What ``statement`` (logged with ``default_schema`` as its current database) does to ``schema.table``'s rows.
    Names compare case-sensitively for the table and case-insensitively for the schema (MariaDB's defaults on
    Linux, ``lower_case_table_names = 0``)."""
    tokens = _tokens(statement)
    if not tokens:
        return Effect.NONE

    def ours(found: tuple[str, str, int]) -> bool:
        return found[0].lower() == schema.lower() and found[1] == table

    named = any(t.text == table for t in tokens)
    head = tokens[0].keyword
    if head in ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "XA", "RELEASE"):
        return Effect.NONE
    if head == "TRUNCATE":
        at = _skip(tokens, 1, "TABLE")
        return Effect.TRUNCATED if any(ours(n) for n in _names(tokens, at, default_schema)) else Effect.NONE
    if head == "DROP":
        at = _skip(tokens, 1, "TEMPORARY")
        if at < len(tokens) and tokens[at].keyword in ("TABLE", "TABLES"):
            names = _names(tokens, _skip(tokens, at + 1, "IF", "EXISTS"), default_schema)
            return Effect.REPLACED if any(ours(n) for n in names) else Effect.NONE
        return Effect.NONE
    if head == "RENAME" and len(tokens) > 1 and tokens[1].keyword in ("TABLE", "TABLES"):
        return Effect.REPLACED if _renames_ours(tokens, default_schema, ours) else Effect.NONE
    if head == "ALTER":
        at = _skip(tokens, 1, "ONLINE", "IGNORE")
        if at < len(tokens) and tokens[at].keyword == "TABLE":
            names = _names(tokens, _skip(tokens, at + 1, "IF", "EXISTS"), default_schema)
            if not any(ours(n) for n in names):
                return Effect.NONE
            return Effect.REPLACED if _renames_the_table(tokens, names[0][2]) else Effect.ALTERED
    if head == "CREATE" and len(tokens) > 2 and tokens[1].keyword == "OR" and tokens[2].keyword == "REPLACE":
        # A plain CREATE TABLE of the table cannot follow rows the lake holds without the DROP before it.
        at = _skip(tokens, 3, "TEMPORARY")
        if at < len(tokens) and tokens[at].keyword == "TABLE":
            names = _names(tokens, _skip(tokens, at + 1, "IF", "NOT", "EXISTS"), default_schema)
            return Effect.REPLACED if names and ours(names[0]) else Effect.NONE
        return Effect.NONE
    if head in ("INSERT", "REPLACE", "UPDATE", "DELETE", "LOAD"):
        return Effect.STATEMENT if named else Effect.NONE
    return Effect.NONE


def _renames_ours(tokens: list[_Token], default_schema: str, ours: Callable[[tuple[str, str, int]], bool]) -> bool:
    """``RENAME TABLE a TO b, c TO d``: the table renamed away, or another one renamed to its name."""
    at = 2
    while at < len(tokens):
        source = _names(tokens, at, default_schema)[:1]
        if not source:
            return False
        at = source[0][2]
        if at >= len(tokens) or tokens[at].keyword != "TO":
            return True  # not a form this module knows: taken for one that changes the table's rows
        target = _names(tokens, at + 1, default_schema)[:1]
        if not target:
            return True
        if ours(source[0]) or ours(target[0]):
            return True
        at = target[0][2]
        if at < len(tokens) and tokens[at].text == ",":
            at += 1
            continue
        return False
    return False


def _renames_the_table(tokens: list[_Token], start: int) -> bool:
    """An ALTER TABLE that renames the table itself (``RENAME [TO|AS] name``), not a column, index or key."""
    for at in range(start, len(tokens) - 1):
        if tokens[at].keyword == "RENAME" and tokens[at + 1].keyword not in ("COLUMN", "INDEX", "KEY", "CONSTRAINT"):
            return True
    return False


def names_column(statement: str, column: str) -> bool:
    """Whether ``statement`` names ``column`` (as an identifier: quoted, or a word; names compare case-insensitively,
    as MariaDB's column names do)."""
    return any(token.text.lower() == column.lower() for token in _tokens(statement))
