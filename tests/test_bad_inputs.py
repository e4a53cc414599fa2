"""Every bad input: exit code 2, one line on stderr, no traceback, no file changed."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURES
from tests.helpers import processes_in


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def bad(tmp_path: Path) -> Path:
    shutil.copytree(FIXTURES / "bad", tmp_path / "bad")
    return tmp_path / "bad"


def assert_one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if not ln.startswith("gbfix [")]  # progress lines
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("gbfix: error: ")
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0]


def test_missing_path(gbfix, bad):
    before = snapshot(bad)
    proc = gbfix("--entry", "python raises.py", "nowhere/", cwd=bad)
    assert_one_line_error(proc, "nowhere", "no such file")
    assert snapshot(bad) == before


def test_missing_path_is_reported_before_a_missing_entry(gbfix, bad):
    proc = gbfix("nowhere/", cwd=bad)
    assert_one_line_error(proc, "nowhere", "no such file")


def test_syntax_error_in_target(gbfix, bad):
    proc = gbfix("--entry", "python raises.py", "syntax_error.py", cwd=bad)
    assert_one_line_error(proc, "syntax_error.py:4", "syntax error")
    assert processes_in(bad) == []  # the warm worker, booted before the targets are read, is gone


def test_non_utf8_target(gbfix, bad):
    (bad / "latin.py").write_bytes(b"# caf\xe9\nx = 1\n")
    before = snapshot(bad)
    proc = gbfix("--entry", "python raises.py", "latin.py", cwd=bad)
    assert_one_line_error(proc, "latin.py", "cannot decode")
    assert snapshot(bad) == before


def test_no_entry(gbfix, bad):
    proc = gbfix("no_main.py", cwd=bad)
    assert_one_line_error(proc, "no entry", "--entry")


def test_unsupported_entry(gbfix, bad):
    proc = gbfix("--entry", "make train", "no_main.py", cwd=bad)
    assert_one_line_error(proc, "unsupported entry")


def test_entry_raises(gbfix, bad):
    before = snapshot(bad)
    proc = gbfix("--dry-run", "--entry", "python raises.py", "raises.py", cwd=bad)
    assert_one_line_error(proc, "ValueError: the model blew up")
    assert snapshot(bad) == before


def test_entry_exits_nonzero(gbfix, bad):
    proc = gbfix("--apply", "--entry", "python exits3.py", "exits3.py", cwd=bad)
    assert_one_line_error(proc, "sys.exit(3)")


def test_entry_hangs(gbfix, bad):
    before = snapshot(bad)
    proc = gbfix("--apply", "--timeout", "8", "--entry", "python hangs.py", "hangs.py", cwd=bad)
    assert_one_line_error(proc, "timed out after 8 s")
    assert snapshot(bad) == before


def test_no_torch(bad):
    # The interpreter gbfix runs under cannot import torch.
    code = "import sys; sys.modules['torch'] = None; from gbfix.cli import main; main()"
    proc = subprocess.run(
        [sys.executable, "-c", code, "--entry", "python raises.py", "raises.py"],
        cwd=bad, capture_output=True, text=True,
    )
    assert_one_line_error(proc, "torch is not installed")
