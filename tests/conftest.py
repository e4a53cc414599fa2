from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
collect_ignore_glob = ["fixtures/*"]  # programs gbfix runs, not tests of gbfix


def run_gbfix(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    """gbfix as a user runs it: a real process, real exit code, real output."""
    return subprocess.run(
        [sys.executable, "-m", "gbfix", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def gbfix():
    return run_gbfix
