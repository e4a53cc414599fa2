"""A program that fails only under torch.compile, after a graph break Dynamo mistraces
(tests/fixtures/compile_failure): gbfix compares its edits with the run without compile,
and says so; with no edit that makes it run compiled, the entry's failure is the error.

train.py logs `f"step {step}: loss={loss.item():.4f}"` in a compiled step: torch 2.13 (and
2.15, otherwise) fails in the resume function after the `.item()` break. unfixable.py
builds that text into a list the program prints: no recipe removes that break (torch 2.13
fails on it; 2.15 compiles it, and the test is skipped there).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gbfix import engine
from gbfix.entry import parse as parse_entry
from gbfix.errors import EntryError

FIXTURE = Path(__file__).parent / "fixtures" / "compile_failure"


def _run(folder: Path, script: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, script], cwd=folder, capture_output=True, text=True, timeout=600, env={**os.environ, **env}
    )


@pytest.fixture(scope="module")
def fixed(tmp_path_factory):
    work = tmp_path_factory.mktemp("compile_failure").resolve()
    shutil.copytree(FIXTURE, work, dirs_exist_ok=True)
    result = engine.fix([work / "train.py"], parse_entry("python train.py", work), engine.Options())
    return work, result


def test_the_original_fails_compiled_and_runs_without(fixed):
    work, _ = fixed
    compiled = _run(work, "train.py")
    assert compiled.returncode != 0 and "step 0: loss=" in compiled.stdout  # the second call fails
    assert _run(work, "train.py", TORCHDYNAMO_DISABLE="1").returncode == 0


def test_edits_verified_against_the_run_without_compile(fixed):
    work, result = fixed
    # torch 2.13: "TypeError: sequence item 1: expected str instance, int found"; 2.15 fails otherwise
    assert result.baseline.compile_failure and "Error" in result.baseline.compile_failure
    assert any("fails under torch.compile as it is" in n and "compared its edits with the run without compile" in n for n in result.notes)
    applied = {o.edit.recipe for o in result.outcomes if o.status == "applied"}
    assert any(r.startswith("print-to-") for r in applied), applied  # the print of the f-string
    assert result.remaining == 0
    # the edited program runs compiled, and prints what the original prints uncompiled
    after = work.parent / "compile_failure_fixed"
    shutil.copytree(work, after)
    (after / "train.py").write_bytes(result.fixed[work / "train.py"])
    got = _run(after, "train.py")
    assert got.returncode == 0, got.stderr
    assert got.stdout == _run(work, "train.py", TORCHDYNAMO_DISABLE="1").stdout
    assert got.stdout.startswith("step 0: loss=")


def test_no_edit_that_makes_it_run_compiled_is_the_entrys_failure(tmp_path: Path):
    shutil.copytree(FIXTURE, tmp_path, dirs_exist_ok=True)
    if _run(tmp_path, "unfixable.py").returncode == 0:
        pytest.skip("this torch compiles unfixable.py (2.15 does; 2.13 fails on it)")
    with pytest.raises(EntryError, match=r"failed: .*\(under torch\.compile; without it the program runs, and no edit"):
        engine.fix([tmp_path / "unfixable.py"], parse_entry("python unfixable.py", tmp_path), engine.Options())
    assert (tmp_path / "unfixable.py").read_bytes() == (FIXTURE / "unfixable.py").read_bytes()
