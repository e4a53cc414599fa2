"""--dry-run and --apply end to end on a small multi-file package, as a user runs them."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tests.conftest import FIXTURES, run_gbfix

# The module-scoped probe runs once: keep this file on one xdist worker.
pytestmark = pytest.mark.xdist_group("test_cli_apply")


def snapshot(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.py"))}


def program_stdout(root) -> str:
    return subprocess.run([sys.executable, "run.py"], cwd=root, capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One copy of the fixture taken through dry-run, apply and apply again."""
    root = tmp_path_factory.mktemp("simple") / "simple"
    shutil.copytree(FIXTURES / "simple", root)
    original = snapshot(root)
    original_stdout = program_stdout(root)
    dry = run_gbfix("--dry-run", "--entry", "python run.py", "pkg", cwd=root)
    after_dry = snapshot(root)
    applied = run_gbfix("--apply", "--entry", "python run.py", "pkg", cwd=root)
    after_apply = snapshot(root)
    again = run_gbfix("--apply", "--entry", "python run.py", "pkg", cwd=root)
    return dict(
        root=root, original=original, original_stdout=original_stdout, dry=dry,
        after_dry=after_dry, applied=applied, after_apply=after_apply, again=again,
    )


def test_dry_run_shows_verified_diff_and_writes_nothing(runs):
    dry = runs["dry"]
    assert dry.returncode == 1, dry.stderr
    assert runs["after_dry"] == runs["original"]
    assert "--- a/pkg/blocks.py\n+++ b/pkg/blocks.py\n" in dry.stdout
    assert "pkg/blocks.py:12:9: GB0059 [*]" in dry.stdout
    assert "pkg/blocks.py:15:12: GB0170 [*]" in dry.stdout
    assert "pkg/blocks.py:13:17: GB0124 [*]" in dry.stdout
    assert dry.stderr.splitlines()[-1] == (
        "Found 3 graph break sites: 3 fixable (verified; --apply writes them). 0 sites would still break after the edits."
    )


def test_apply_writes_what_dry_run_showed_and_keeps_behaviour(runs):
    applied = runs["applied"]
    changed = {k for k in runs["original"] if runs["after_apply"][k] != runs["original"][k]}
    assert changed == {"pkg/blocks.py"}
    # the print's helper: in the package's generated module, new, written with the module
    assert set(runs["after_apply"]) - set(runs["original"]) == {"pkg/_gbfix.py"}
    assert "wrote pkg/blocks.py" in applied.stderr and "wrote pkg/_gbfix.py" in applied.stderr
    written = None
    for line in runs["dry"].stdout.splitlines():
        if line.startswith("+++ b/"):
            written = runs["after_apply"][line[len("+++ b/") :]].decode()
        elif line.startswith("+"):
            assert line[1:] in written
    assert program_stdout(runs["root"]) == runs["original_stdout"]
    assert applied.returncode == 0, applied.stderr
    assert applied.stderr.splitlines()[-1] == "Found 3 graph break sites: 3 fixed. 0 sites still break after the edits."


def test_second_apply_is_a_no_op(runs):
    again = runs["again"]
    assert snapshot(runs["root"]) == runs["after_apply"]
    assert not any(line.startswith("wrote ") for line in again.stderr.splitlines())  # no file written
    assert again.returncode == 0
    assert again.stdout == ""
    assert again.stderr.splitlines()[-1] == "No graph breaks found in 3 call(s) of compiled code."

