"""``scripts/setup.sh`` keeps pip's and apt's chatter back unless they fail (``scripts/quietly.sh``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CHATTY = (
    "print('Looking in indexes: https://pypi.org/simple, file:///opt/pypi/simple'); import sys; "
    "print('WARNING: Retrying (Retry(total=4)) after connection broken', file=sys.stderr)"
)


def quietly(*command: str) -> subprocess.CompletedProcess[str]:
    script = f'source "{REPO}/scripts/quietly.sh"; quietly "$@"'
    return subprocess.run(["bash", "-c", script, "quietly", *command], capture_output=True, text=True, timeout=60)


def test_a_command_that_succeeds_says_nothing() -> None:
    done = quietly(sys.executable, "-c", CHATTY)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_a_command_that_fails_shows_everything_it_said_and_its_exit_code() -> None:
    done = quietly(sys.executable, "-c", CHATTY + "; raise SystemExit(3)")
    assert done.returncode == 3 and done.stdout == ""
    assert "failed (exit code 3)" in done.stderr
    assert "Looking in indexes" in done.stderr and "WARNING: Retrying" in done.stderr


def test_setup_runs_every_pip_and_apt_call_quietly() -> None:
    calls = [
        line.strip()
        for line in (REPO / "scripts" / "setup.sh").read_text().splitlines()
        if ("pip install" in line or "apt-get" in line) and not line.strip().startswith(("#", "echo"))
    ]
    assert len(calls) >= 5 and all(call.startswith("quietly ") for call in calls), calls
