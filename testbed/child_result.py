"""What a child process of the tests and benchmarks reports: the JSON of its last ``RESULT {...}`` line."""

from __future__ import annotations

import json
import subprocess
from typing import Any


def child_report(proc: subprocess.CompletedProcess[str], what: str) -> dict[str, Any]:
    """The last ``RESULT`` line of ``proc``'s output, parsed.

    Raises:
        RuntimeError: the child failed or printed no result (its exit code and the tails of its output).
    """
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{what} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-6000:]}")
    report: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))
    return report
