from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gbfix.detect import shared_workers

FIXTURES = Path(__file__).parent / "fixtures"
collect_ignore_glob = ["fixtures/*"]  # programs gbfix runs, not tests of gbfix
# Each test sees what a run of gbfix does, not an earlier test's cached result
# (tests/test_result_cache.py turns the cache on for itself).
os.environ["GBFIX_NO_CACHE"] = "1"


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests that share a module-scoped fixture (one gbfix run, asserted on several
    ways) go to one xdist worker (`--dist loadgroup`): spread over two, each worker would
    run the fixture again. A test grouped already keeps its group."""
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
        if any(d.scope == "module" for fixture in defs.values() for d in fixture):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))


@pytest.fixture(scope="session", autouse=True)
def _shared_workers():
    """The engine runs of this test process fork from warm workers kept from one test to
    the next: torch's import and the worker's warm-up are paid once, not per test
    (tests/test_launch.py checks that a run forked from a kept worker sees nothing of the
    runs before it)."""
    with shared_workers():
        yield


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
