"""Entry resolution: flag, [tool.gbfix], a single target script."""

from __future__ import annotations

from pathlib import Path

import pytest

from gbfix.entry import parse, resolve
from gbfix.errors import GbfixError


def test_entry_kinds(tmp_path: Path):
    (tmp_path / "train.py").write_text("")
    assert parse("python train.py --lr 3", tmp_path).kind == "script"
    assert parse("train.py --lr 3", tmp_path).args == ("--lr", "3")
    assert parse("python -m pkg.train -v", tmp_path).target == "pkg.train"
    assert parse("python -m pytest tests -k x", tmp_path).kind == "pytest"
    assert parse("pytest -x tests", tmp_path).args == ("-x", "tests")
    with pytest.raises(GbfixError, match="not found"):
        parse("python missing.py", tmp_path)
    with pytest.raises(GbfixError, match="unsupported entry"):
        parse("python -c 'print(1)'", tmp_path)


def test_entry_from_pyproject(tmp_path: Path):
    (tmp_path / "pyproject.toml").write_text('[tool.gbfix]\nentry = "python run.py --fast"\n')
    (tmp_path / "run.py").write_text("")
    (tmp_path / "src").mkdir()
    e = resolve(None, [tmp_path / "src"], Path("/"))
    assert (e.kind, e.args, e.cwd) == ("script", ("--fast",), tmp_path)


def test_entry_from_single_script_with_main_block(tmp_path: Path):
    script = tmp_path / "demo.py"
    script.write_text("if __name__ == '__main__':\n    pass\n")
    assert resolve(None, [script], tmp_path).target == str(script.resolve())
    (tmp_path / "lib.py").write_text("x = 1\n")
    with pytest.raises(GbfixError, match="no entry"):
        resolve(None, [tmp_path / "lib.py"], tmp_path)


def test_the_entrys_own_file_when_it_is_a_target(tmp_path: Path):
    """Where a process-wide setting may go: the script, or the module run with -m, if gbfix may edit it."""
    root = tmp_path.resolve()
    (root / "run.py").write_text("")
    (root / "pkg" / "cli").mkdir(parents=True)
    (root / "pkg" / "train.py").write_text("")
    (root / "pkg" / "cli" / "__main__.py").write_text("")
    targets = {root / "run.py", root / "pkg" / "train.py", root / "pkg" / "cli" / "__main__.py"}
    assert parse("python run.py", root).own_file(targets) == root / "run.py"
    assert parse("python run.py", root).own_file(targets - {root / "run.py"}) is None  # not a target: not edited
    assert parse("python -m pkg.train", root).own_file(targets) == root / "pkg" / "train.py"
    assert parse("python -m pkg.cli", root).own_file(targets) == root / "pkg" / "cli" / "__main__.py"
    assert parse("pytest tests", root).own_file(targets) is None  # many tests, no one place the program starts
