"""Write landing-zone files and compute, independently of the source under test, the rows they hold."""

from __future__ import annotations

import csv
import json
import os
from datetime import datetime
from decimal import Decimal
from pathlib import Path

#: The columns of the test files: name -> Arrow type, as a spec declares them.
COLUMNS = {"id": "int64", "name": "string", "amount": "decimal128(12, 2)", "at": "timestamp[us, tz=UTC]"}
AN_HOUR_AGO = datetime.now().timestamp() - 3600


def record(i: int) -> dict:
    return {
        "id": i,
        "name": f"customer-{i % 97}",
        "amount": f"{i % 1000}.{i % 100:02d}",
        "at": f"2024-03-{1 + i % 28:02d}T{i % 24:02d}:00:00Z",
    }


def write_jsonl(path: Path, ids: range, mtime: float | None = AN_HOUR_AGO) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(record(i)) + "\n" for i in ids))
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def jsonl_rows(paths: list[Path]) -> list[tuple]:
    rows = []
    for path in paths:
        for line in path.read_text().splitlines():
            value = json.loads(line)
            rows.append((value["id"], value["name"], Decimal(value["amount"]), datetime.fromisoformat(value["at"])))
    return rows


def csv_rows(paths: list[Path]) -> list[tuple]:
    """Rows of header CSV files with exactly the declared columns; rows that do not convert are left out."""
    rows = []
    for path in paths:
        with path.open(newline="") as handle:
            for value in csv.DictReader(handle):
                if None in value or None in value.values():  # too many or too few fields
                    continue
                try:
                    rows.append(
                        (int(value["id"]), value["name"], Decimal(value["amount"]), datetime.fromisoformat(value["at"]))
                    )
                except (ValueError, ArithmeticError):  # decimal.InvalidOperation is an ArithmeticError
                    continue
    return rows
