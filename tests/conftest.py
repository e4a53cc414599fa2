from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
collect_ignore_glob = ["fixtures/*"]  # programs gbfix runs, not tests of gbfix
# Each test sees what a run of gbfix does, not an earlier test's cached result
# (tests/test_result_cache.py turns the cache on for itself).
os.environ["GBFIX_NO_CACHE"] = "1"


def run_gbfix(*args: str, cwd: Path, timeout: float = 600, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """gbfix as a user runs it: a real process, real exit code, real output."""
    return subprocess.run(
        [sys.executable, "-m", "gbfix", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


@pytest.fixture
def gbfix():
    return run_gbfix
