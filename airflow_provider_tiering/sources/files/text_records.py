"""Read a JSON-lines or CSV file of a landing zone with pyarrow, and find its bad records when pyarrow refuses it.

A file is parsed whole first: a file without bad records costs one parse. When that fails, the file is split into
records (Python's ``json`` and ``csv`` modules, so quoted values may span lines) and parsed in chunks, halving a
chunk that fails until the bad records are alone (:func:`parse_bisecting`): a good record is always converted by
the same reader, with the same rules, as in a file without bad records.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.json as pajson

from airflow_provider_tiering.core.errors import SourceError
from airflow_provider_tiering.core.ports import RejectedRecord
from airflow_provider_tiering.core.source_specs import FileSourceSpec
from airflow_provider_tiering.sources.files.listing import LandedFile

#: A rejected record keeps at most this much of its raw text.
REJECT_RECORD_BYTES = 64 * 1024
ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, pa.ArrowKeyError)
_PYARROW_ROW_SUFFIX = re.compile(r" in row \d+$")


@dataclass(frozen=True)
class _Record:
    line: int  # 1-based line of the record's first line in its file
    raw: bytes


class _BadRecord(Exception):
    def __init__(self, record: _Record, reason: str) -> None:
        super().__init__(reason)
        self.record = record
        self.reason = reason


class TextFileReader:
    """Reads the JSON-lines or CSV files of one landing zone; bad records set aside go to :attr:`rejects`."""

    def __init__(self, spec: FileSourceSpec, display_name: str) -> None:
        self.spec = spec
        self.display_name = display_name
        self.rejects: list[RejectedRecord] = []

    def read(self, data: bytes, landed: LandedFile, schema: pa.Schema) -> pa.Table:
        """Parse a whole JSON-lines or CSV file with pyarrow; find the bad records only if that fails. Bad records
        fail the read (``on_bad_record="fail"``) or are kept in :attr:`rejects` (``"side_table"``)."""
        if self.spec.format == "jsonl":
            header, parse = b"", _jsonl_parser(schema)
        else:
            header, parse = self._csv_header(data), self._csv_parser(schema)
        try:
            return parse(data)
        except ARROW_ERRORS as exc:
            whole_file_error = exc
        if self.spec.format == "jsonl":
            records, bad = _jsonl_records(data)
        else:
            self._check_csv_header(header, landed, schema)
            records, bad = self._csv_records(data, header)
        tables = []
        for good_or_bad in parse_bisecting(records, lambda chunk: parse(header + chunk)):
            if isinstance(good_or_bad, _BadRecord):
                bad.append(good_or_bad)
            else:
                tables.append(good_or_bad)
        if not bad:  # pyarrow refused the file, yet every record parses on its own
            raise SourceError(
                f"{self.display_name}: cannot read {landed.path}: {whole_file_error}"
            ) from whole_file_error
        bad.sort(key=lambda b: b.record.line)
        if self.spec.on_bad_record == "fail":
            first = bad[0]
            more = f" (and {len(bad) - 1} more bad records)" if len(bad) > 1 else ""
            raise SourceError(f"{self.display_name}: file {landed.path} line {first.record.line}: {first.reason}{more}")
        for b in bad:
            self.rejects.append(
                {
                    "source_file": landed.path,
                    "line": b.record.line,
                    "record": b.record.raw[:REJECT_RECORD_BYTES].decode("utf-8", errors="replace").rstrip("\r\n"),
                    "reason": b.reason,
                }
            )
        return pa.concat_tables(tables) if tables else schema.empty_table()

    # -- CSV -----------------------------------------------------------------------------------
    def _csv_parser(self, schema: pa.Schema) -> Callable[[bytes], pa.Table]:
        header = self.spec.csv_header
        parse_options = pacsv.ParseOptions(delimiter=self.spec.csv_delimiter, newlines_in_values=True)
        convert_options = pacsv.ConvertOptions(
            column_types={f.name: f.type for f in schema}, include_columns=list(schema.names)
        )

        def parse(data: bytes) -> pa.Table:
            if not data.strip():
                return schema.empty_table()
            read_options = pacsv.ReadOptions(
                use_threads=False,
                block_size=min(len(data) + 1, 2**31 - 1),
                column_names=None if header else list(schema.names),
            )
            table = pacsv.read_csv(
                pa.BufferReader(data),  # type: ignore[arg-type]  # pyarrow-stubs leave out pyarrow's own streams
                read_options=read_options,
                parse_options=parse_options,
                convert_options=convert_options,
            )
            return table.select(schema.names).cast(schema)

        return parse

    def _csv_header(self, data: bytes) -> bytes:
        if not self.spec.csv_header:
            return b""
        end = data.find(b"\n")
        return data if end < 0 else data[: end + 1]

    def _check_csv_header(self, header: bytes, landed: LandedFile, schema: pa.Schema) -> None:
        if not header:
            return
        names = next(csv.reader([header.decode("utf-8", errors="replace")], delimiter=self.spec.csv_delimiter), [])
        missing = [n for n in schema.names if n not in names]
        if missing:
            raise SourceError(
                f"{self.display_name}: file {landed.path}: the header has no column(s) {', '.join(missing)}"
            )

    def _csv_records(self, data: bytes, header: bytes) -> tuple[list[_Record], list[_BadRecord]]:
        """Split a CSV file into records (quoted values may span lines) with Python's csv module."""
        lines = data[len(header) :].splitlines(keepends=True)
        first_line = 2 if header else 1
        expected = (
            len(next(csv.reader([header.decode("utf-8", errors="replace")], delimiter=self.spec.csv_delimiter)))
            if header
            else len(self.spec.columns or ())
        )
        consumed: list[int] = []

        def feed() -> Iterator[str]:
            for index, line in enumerate(lines):
                consumed.append(index)
                yield line.decode("utf-8", errors="replace")

        reader = csv.reader(feed(), delimiter=self.spec.csv_delimiter)
        records: list[_Record] = []
        bad: list[_BadRecord] = []
        while True:
            try:
                fields: list[str] | None = next(reader)
                reason = None
            except StopIteration:
                break
            except csv.Error as exc:
                fields, reason = None, f"malformed CSV: {exc}"
            if not consumed:
                break
            raw = b"".join(lines[i] for i in consumed)
            if not raw.endswith(b"\n"):
                raw += b"\n"
            record = _Record(first_line + consumed[0], raw)
            consumed.clear()
            if fields == []:  # an empty line
                continue
            if fields is not None and len(fields) != expected:
                reason = f"expected {expected} columns, got {len(fields)}"
            if reason is None:
                records.append(record)
            else:
                bad.append(_BadRecord(record, reason))
        return records, bad


def _jsonl_parser(schema: pa.Schema) -> Callable[[bytes], pa.Table]:
    # pyarrow's JSON reader does not parse dates from strings: they are read as text and cast.
    read_schema = pa.schema([pa.field(f.name, pa.string()) if pa.types.is_date(f.type) else f for f in schema])
    parse_options = pajson.ParseOptions(explicit_schema=read_schema, unexpected_field_behavior="ignore")

    def parse(data: bytes) -> pa.Table:
        if not data.strip():
            return schema.empty_table()
        read_options = pajson.ReadOptions(use_threads=False, block_size=min(len(data) + 1, 2**31 - 1))
        table = pajson.read_json(
            pa.BufferReader(data),  # type: ignore[arg-type]  # pyarrow-stubs leave out pyarrow's own streams
            read_options=read_options,
            parse_options=parse_options,
        )
        return table.select(schema.names).cast(schema)

    return parse


def _jsonl_records(data: bytes) -> tuple[list[_Record], list[_BadRecord]]:
    """Split a JSON-lines file into records; lines that are not a JSON object are bad at once."""
    records: list[_Record] = []
    bad: list[_BadRecord] = []
    for number, line in enumerate(data.splitlines(keepends=True), start=1):
        if not line.strip():
            continue
        record = _Record(number, line if line.endswith(b"\n") else line + b"\n")
        try:
            value = json.loads(line)
        except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
            bad.append(_BadRecord(record, f"malformed JSON: {exc}"))
            continue
        if not isinstance(value, dict):
            bad.append(_BadRecord(record, f"not a JSON object but {type(value).__name__}"))
        else:
            records.append(record)
    return records, bad


def parse_bisecting(records: Sequence[_Record], parse: Callable[[bytes], pa.Table]) -> Iterator[pa.Table | _BadRecord]:
    """Parse records in chunks with pyarrow, halving a chunk that fails until the bad records are alone.

    Bad records are rare, so this costs a few parses per bad record, and a good record is always
    converted by the same reader (and the same rules) as a file without bad records.
    """
    if not records:
        return
    try:
        yield parse(b"".join(r.raw for r in records))
        return
    except ARROW_ERRORS as exc:
        if len(records) == 1:
            yield _BadRecord(
                records[0], "does not convert to the declared columns: " + _PYARROW_ROW_SUFFIX.sub("", str(exc))
            )
            return
    middle = len(records) // 2
    yield from parse_bisecting(records[:middle], parse)
    yield from parse_bisecting(records[middle:], parse)
