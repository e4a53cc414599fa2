"""The command line's shape: `fix` is the default command, `explain` and `lint` are named.

No torch runs here: every fix invocation stops at an input error before the entry runs
(test_cli_apply and test_bad_inputs run the default command end to end).
"""

from __future__ import annotations

from importlib.metadata import version

from tests.conftest import run_gbfix


def test_help_lists_commands_and_fix_options(tmp_path):
    proc = run_gbfix("--help", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("Usage: gbfix [fix] [OPTIONS] [PATHS]...\n")
    assert "gbfix explain [OPTIONS] CODE" in out and "gbfix lint [OPTIONS] [PATHS]..." in out
    for option in ("--dry-run", "--apply", "-e, --entry", "--timeout", "--unsafe-fixes", "--fullgraph", "-q, --quiet", "--version"):
        assert option in out
    for command in ("explain", "fix", "lint"):
        assert f"\n  {command} " in out
    assert run_gbfix("-h", cwd=tmp_path).stdout == out


def test_version(tmp_path):
    proc = run_gbfix("--version", cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (0, f"gbfix, version {version('gbfix')}\n")


def test_subcommand_help(tmp_path):
    for command, needle in (("fix", "--apply"), ("lint", "--output-format"), ("explain", "CODE")):
        proc = run_gbfix(command, "--help", cwd=tmp_path)
        assert proc.returncode == 0 and f"Usage: gbfix {command} " in proc.stdout and needle in proc.stdout


def test_default_command_is_fix(tmp_path):
    # options first, or a path first: both go to `fix` (which stops at the missing path)
    (tmp_path / "run.py").write_text("print('never run')\n")
    for args in (("--dry-run", "--entry", "python run.py", "nowhere"), ("nowhere", "--entry", "python run.py")):
        proc = run_gbfix(*args, cwd=tmp_path)
        assert proc.returncode == 2
        assert proc.stderr.splitlines() == ["gbfix: error: nowhere: no such file or directory"]


def test_a_path_named_like_a_command(tmp_path):
    # `gbfix lint` is the linter; `gbfix fix lint` (or any option first) fixes a path named lint
    (tmp_path / "run.py").write_text("print('never run')\n")
    for args in (("fix", "lint"), ("--apply", "lint")):
        proc = run_gbfix(*args, "--entry", "python run.py", cwd=tmp_path)
        assert proc.stderr.splitlines() == ["gbfix: error: lint: no such file or directory"]
    (tmp_path / "lint").mkdir()
    proc = run_gbfix("lint", "lint", cwd=tmp_path)
    assert proc.returncode == 0 and "No compiled code found (0 files checked)" in proc.stderr


def test_usage_errors_are_one_line(tmp_path):
    for args, needle in ((("--bogus",), "No such option '--bogus'"), (("explain",), "Missing argument 'CODE'"),
                         (("lint", "--output-format", "xml"), "Invalid value for '--output-format'")):
        proc = run_gbfix(*args, cwd=tmp_path)
        assert proc.returncode == 2, args
        lines = proc.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("gbfix: error: ") and needle in lines[0], proc.stderr
