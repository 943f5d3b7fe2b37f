"""A test run stopped with SIGTERM (a cancelled CI job, the suite script's trap) still runs every fixture's teardown,
as after Ctrl-C: the teardowns stop the Airflow clusters and unmount the chaos run's tmpfs."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

MODULE = """
import pathlib, time, pytest

@pytest.fixture
def resource():
    yield
    pathlib.Path({torn_down!r}).write_text("torn down")

def test_waits(resource):
    pathlib.Path({started!r}).write_text("")
    time.sleep(120)
"""


def test_sigterm_ends_the_run_with_every_fixtures_teardown(tmp_path: Path) -> None:
    started, torn_down = tmp_path / "started", tmp_path / "torn-down"
    module = tmp_path / "test_waiting.py"
    module.write_text(MODULE.format(started=str(started), torn_down=str(torn_down)))
    run = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider", "-q", str(module)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not started.exists():
            assert run.poll() is None, run.communicate()[0]
            assert time.monotonic() < deadline, "the test never started"
            time.sleep(0.1)
        run.send_signal(signal.SIGTERM)
        output, _ = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 2, output  # pytest's "interrupted", not killed by the signal (-15)
    assert torn_down.read_text() == "torn down", output
    assert "terminated by signal 15" in output, output
