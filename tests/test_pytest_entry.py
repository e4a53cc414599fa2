"""A pytest entry runs in the child, so compiled code reached by tests is seen."""

from __future__ import annotations

import shutil

from tests.conftest import FIXTURES


def test_breaks_reached_by_tests_are_found(gbfix, tmp_path):
    project = tmp_path / "project"
    shutil.copytree(FIXTURES / "pytest_project", project)
    proc = gbfix("--dry-run", "-q", "--entry", "pytest tests", "proj", cwd=project)
    assert proc.returncode == 1, proc.stderr
    assert "proj/ops.py:6:9: GB0124" in proc.stdout


def test_failing_tests_are_an_entry_error(gbfix, tmp_path):
    project = tmp_path / "project"
    shutil.copytree(FIXTURES / "pytest_project", project)
    test = project / "tests" / "test_ops.py"
    test.write_text(test.read_text().replace("x * 3)", "x * 4)"))
    proc = gbfix("--dry-run", "-q", "--entry", "pytest tests", "proj", cwd=project)
    assert proc.returncode == 2
    assert proc.stderr.startswith("gbfix: error: the entry `pytest tests` failed: pytest exited with code 1: ")
    assert "test_ops.py::test_scaled" in proc.stderr
