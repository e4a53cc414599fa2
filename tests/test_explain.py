"""gbfix explain: the installed registry and the rules/ catalog, offline and without torch."""

from __future__ import annotations

import difflib
import json
import subprocess
import sys
from pathlib import Path

from gbfix import explain, gbcodes, rules
from tests.conftest import run_gbfix

ROOT = Path(__file__).resolve().parent.parent


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gbfix: error: "), proc.stderr
    return lines[0]


def test_registry_catalog_recipes_and_example_diffs(tmp_path):
    proc = run_gbfix("explain", "GB0059", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    current = gbcodes.registry()["GB0059"][0]
    assert out.startswith(f"GB0059: {current['Gb_type']}\n")
    assert "Dynamo does not know how to trace builtin operator" in out  # the registry's explanation
    assert "Hint: If you are attempting to call a logging function (e.g. `print`), you can try" in out  # joined fragments
    assert "gbfix catalog (rules/GB0059.md): print() inside compiled code" in out
    for bullet in ("Dynamo says:", "Why it costs:", "Recipes:", "Torch versions:"):
        assert f"\n  {bullet} " in out
    assert "  print-to-hop (safe): " in out
    # every example as a unified diff, every Not fixed section by its title
    for ex in rules.parse(ROOT / "rules" / "GB0059.md"):
        if ex.after is None:
            assert f"\nNot fixed: {ex.title}\n" in out or out.endswith(f"\nNot fixed: {ex.title}\n")
        else:
            diff = "".join(difflib.unified_diff(ex.before.splitlines(True), ex.after.splitlines(True), "before", "after"))
            assert f"Example: {ex.title}\n{diff}" in out


def test_code_spellings(tmp_path):
    outs = {run_gbfix("explain", c, cwd=tmp_path).stdout for c in ("GB0170", "gb0170", "170")}
    assert len(outs) == 1
    out = outs.pop()
    assert out.startswith("GB0170: Data-dependent branching\n")
    # the current entry has no hints; the earlier versions' are shown once
    assert out.count("Hint: Use `torch.cond` to express dynamic control flow.") == 1
    assert "branch-to-check (unsafe)" in out and "branch-to-where (safe)" in out


def test_code_without_catalog_page(tmp_path):
    proc = run_gbfix("explain", "GB2861", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "No gbfix catalog page for GB2861." in proc.stdout
    assert "No gbfix recipe answers GB2861." in proc.stdout


def test_unknown_and_malformed_codes(tmp_path):
    line = one_line_error(run_gbfix("explain", "GB9999", cwd=tmp_path))
    assert line.startswith("gbfix: error: unknown graph break code GB9999 (not in the installed torch's registry, torch 2.")
    line = one_line_error(run_gbfix("explain", "GB00170x", cwd=tmp_path))
    assert "not a graph break code" in line


def test_no_torch_and_no_torch_import(tmp_path):
    # torch missing: one line, exit 2
    code = "import sys; sys.modules['torch'] = None; from gbfix.cli import main; main()"
    proc = subprocess.run([sys.executable, "-c", code, "explain", "GB0059"], cwd=tmp_path, capture_output=True, text=True)
    assert "torch is not installed" in one_line_error(proc)
    # torch installed: explain reads its registry without importing it
    code = (
        "import sys\nfrom gbfix.cli import main\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "print('torch imported' if 'torch' in sys.modules else 'no torch import')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, "explain", "GB0124"], cwd=tmp_path, capture_output=True, text=True)
    assert proc.stdout.splitlines()[-1] == "no torch import", proc.stderr


def test_json(tmp_path):
    proc = run_gbfix("explain", "--format", "json", "gb0246", cwd=tmp_path)
    data = json.loads(proc.stdout)
    assert data["code"] == "GB0246" and data["catalog"] == "rules/GB0246.md" and data["catalog_installed"]
    assert data["registry"][0]["gb_type"] == gbcodes.registry()["GB0246"][0]["Gb_type"]
    assert {"name": "one-hot-num-classes", "safety": "unsafe"}.items() <= data["recipes"][0].items()
    assert all(e["diff"].startswith("--- before\n+++ after\n") for e in data["examples"] if e["after"] is not None)


def test_catalog_not_installed(monkeypatch):
    # A wheel without rules/: the registry and the recipes still, and a clear note.
    monkeypatch.setattr(explain, "catalog_dir", lambda: None)
    text = explain.render(explain.explain("GB0059"))
    assert "gbfix catalog not installed" in text
    assert "print-to-hop (safe)" in text
    assert "Example:" not in text
