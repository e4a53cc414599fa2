"""The shipped example, end to end: gbfix --apply leaves zero breaks on its own (inductor) backend
and the program prints exactly what it printed before."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import run_gbfix

# The module-scoped probe runs once: keep this file on one xdist worker.
pytestmark = pytest.mark.xdist_group("test_example")

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "tinylm"


def run_program(root: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "train.py"], cwd=root, capture_output=True, text=True, check=True,
        env={**os.environ, **env},
    )


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    root = tmp_path_factory.mktemp("example") / "tinylm"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns("__pycache__"))
    originals = {p: p.read_bytes() for p in root.rglob("*.py")}
    before = run_program(root).stdout
    # One gbfix run (the dry-run path is covered on a smaller fixture): it is
    # the slowest test, with inductor compiles on a cold cache.
    applied = run_gbfix("--apply", "--unsafe-fixes", "--entry", "python train.py", ".", cwd=root)
    after = run_program(root, TORCH_LOGS="graph_breaks")
    changed = sorted(str(p.relative_to(root)) for p, data in originals.items() if p.read_bytes() != data)
    return dict(root=root, before=before, applied=applied, after=after, changed=changed)


def test_reports_real_breaks_with_codes(example):
    out = example["applied"].stdout
    codes = {line.split(": ")[1].split()[0] for line in out.splitlines() if line.startswith("tinylm/")}
    assert codes == {"GB0059", "GB0124", "GB0170", "GB0291", "GB0007"}
    assert "tinylm/layers.py:65:9: GB0059 [*] Failed to trace builtin operator" in out
    assert example["changed"] == ["tinylm/layers.py", "tinylm/model.py", "tinylm/utils.py"]


def test_apply_leaves_zero_breaks_on_inductor(example):
    applied = example["applied"]
    assert applied.returncode == 0, applied.stderr
    assert applied.stderr.splitlines()[-1].endswith(" 0 remain after the edits.")
    # Independent of gbfix: Dynamo's own graph-break log of the edited program is empty.
    assert "Graph break" not in example["after"].stderr


def test_apply_keeps_program_output_byte_identical(example):
    assert example["after"].stdout == example["before"]


def test_one_own_backend_run_checks_every_accepted_edit(example):
    # The own-backend check is deferred to the end: one run covers the edits
    # of every round, instead of one (inductor) run per round.
    lines = example["applied"].stderr.splitlines()
    own = [ln for ln in lines if "] own-backend run" in ln]
    assert len(own) == 1 and "every accepted edit" in own[0], lines
    assert not any("round by round" in ln for ln in lines), lines
