"""--fullgraph: fullgraph=True is added only when a real fullgraph run proves zero breaks."""

from __future__ import annotations

import shutil
import subprocess
import sys

from tests.conftest import FIXTURES, run_gbfix


def test_fullgraph_added_and_proven(tmp_path):
    root = tmp_path / "simple"
    shutil.copytree(FIXTURES / "simple", root)
    before = subprocess.run([sys.executable, "run.py"], cwd=root, capture_output=True, text=True, check=True).stdout
    proc = run_gbfix("--apply", "--fullgraph", "--entry", "python run.py", ".", cwd=root)
    assert proc.returncode == 0, proc.stderr
    assert "note: fullgraph=True added at run.py:7, proven by a run with fullgraph=True" in proc.stderr
    assert 'torch.compile(Gate(8), backend="eager", fullgraph=True)' in (root / "run.py").read_text()
    after = subprocess.run([sys.executable, "run.py"], cwd=root, capture_output=True, text=True, check=True).stdout
    assert after == before


def test_fullgraph_refused_while_breaks_remain(tmp_path):
    root = tmp_path / "partial"
    shutil.copytree(FIXTURES / "partial", root)
    proc = run_gbfix("--apply", "--fullgraph", "--entry", "python run.py", ".", cwd=root)
    assert proc.returncode == 1, proc.stderr
    assert "note: fullgraph=True not added: 1 graph break(s) remain" in proc.stderr
    assert "run.py:7:13: GB0109 " in proc.stdout  # the break that remains, with why
    text = (root / "run.py").read_text()
    assert "fullgraph" not in text
    assert "gbfix_print(" in text  # the verified edit is still applied
