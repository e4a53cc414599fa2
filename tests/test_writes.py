"""--apply's writes: the file's permissions respected, every file or none, links kept."""

from __future__ import annotations

import os
import stat
import textwrap
from pathlib import Path

import pytest

from gbfix.errors import GbfixError
from gbfix.sources import read
from gbfix.writes import check_targets, write_all
from tests.conftest import run_gbfix

SCRIPT = textwrap.dedent(
    """\
    #!/usr/bin/env python
    import pathlib

    import torch


    @torch.compile(backend="eager")
    def step(x):
        print("step")
        return x * 2


    if __name__ == "__main__":
        pathlib.Path("ran.marker").write_text("the entry ran")
        print(step(torch.ones(2)).sum())
    """
)


def one_error_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if not ln.startswith("gbfix [")]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("gbfix: error: ") and "Traceback" not in stderr
    return lines[0]


def test_a_read_only_target_is_refused_before_the_entry_runs(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    script.chmod(0o444)
    proc = run_gbfix("--apply", "--entry", "python train.py", "train.py", cwd=tmp_path)
    assert proc.returncode == 2
    assert "train.py: read-only" in one_error_line(proc.stderr)
    assert not (tmp_path / "ran.marker").exists()  # nothing was run
    assert script.read_text() == SCRIPT and stat.S_IMODE(script.stat().st_mode) == 0o444


def test_dry_run_reads_a_read_only_target(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    script.chmod(0o444)
    proc = run_gbfix("--dry-run", "--entry", "python train.py", "train.py", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr  # a break found, a diff shown
    assert "+++ " in proc.stdout and script.read_text() == SCRIPT


def test_apply_through_a_symlink_keeps_the_link_and_the_mode(tmp_path):
    real = tmp_path / "src" / "train.py"
    real.parent.mkdir()
    real.write_text(SCRIPT)
    real.chmod(0o755)  # an executable script stays executable
    link = tmp_path / "train.py"
    link.symlink_to(real)
    proc = run_gbfix("--apply", "--entry", "python train.py", "train.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert link.is_symlink() and os.readlink(link) == str(real)
    edited = real.read_text()
    assert '    print("step")' not in edited and 'gbfix_print("step")' in edited
    assert stat.S_IMODE(real.stat().st_mode) == 0o755
    assert not list(real.parent.glob(".*.gbfix"))  # no temporary file left


def sources(tmp_path: Path, n: int = 3):
    out = []
    for i in range(n):
        path = tmp_path / f"m{i}.py"
        path.write_text(f"x = {i}\n")
        out.append((read(path), f"x = {i}  # edited\n".encode()))
    return out


def contents(changes) -> list[str]:
    return [source.path.read_text() for source, _ in changes]


def test_every_file_is_checked_before_any_is_written(tmp_path):
    changes = sources(tmp_path)
    changes[2][0].path.write_text("x = 2  # changed by someone else\n")
    with pytest.raises(GbfixError, match=r"m2.py: changed on disk while gbfix ran; nothing written"):
        write_all(changes)
    assert contents(changes) == ["x = 0\n", "x = 1\n", "x = 2  # changed by someone else\n"]


def test_a_read_only_file_among_the_edits_stops_every_write(tmp_path):
    changes = sources(tmp_path)
    changes[1][0].path.chmod(0o444)
    with pytest.raises(GbfixError, match=r"m1.py: read-only; nothing written"):
        write_all(changes)
    assert contents(changes) == ["x = 0\n", "x = 1\n", "x = 2\n"]


def test_a_write_failing_midway_puts_back_the_files_written(tmp_path, monkeypatch):
    changes = sources(tmp_path)
    real_replace = os.replace

    def replace(src, dst):
        if str(dst).endswith("m2.py"):
            raise OSError(28, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(GbfixError) as err:
        write_all(changes)
    assert str(err.value).endswith("m2.py: could not be written (No space left on device); the 2 file(s) already written were put back")
    assert contents(changes) == ["x = 0\n", "x = 1\n", "x = 2\n"]
    assert not list(tmp_path.glob(".*.gbfix"))


def test_ctrl_c_midway_puts_back_the_files_written(tmp_path, monkeypatch):
    changes = sources(tmp_path)
    real_replace = os.replace

    def replace(src, dst):
        if str(dst).endswith("m1.py") and src != str(dst):
            if Path(src).read_text().endswith("# edited\n"):
                raise KeyboardInterrupt
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
        write_all(changes)
    assert contents(changes) == ["x = 0\n", "x = 1\n", "x = 2\n"]


def test_all_written_when_nothing_fails(tmp_path):
    changes = sources(tmp_path)
    assert write_all(changes) == [source.path for source, _ in changes]
    assert contents(changes) == [f"x = {i}  # edited\n" for i in range(3)]


def test_check_targets_names_the_read_only_file_in_a_folder(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("x = 1\n")
    locked = tmp_path / "pkg" / "b.py"
    locked.write_text("y = 2\n")
    check_targets([tmp_path / "pkg"])
    locked.chmod(0o400)
    with pytest.raises(GbfixError, match=r"b.py: read-only; --apply writes only files it may write"):
        check_targets([tmp_path / "pkg"])


def test_a_new_file_is_created_with_the_others(tmp_path):
    changes = sources(tmp_path)
    new = tmp_path / "_gbfix.py"
    assert write_all([(new, b"# generated\n"), *changes]) == [new, *(source.path for source, _ in changes)]
    assert new.read_bytes() == b"# generated\n"
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(new.stat().st_mode) == 0o666 & ~umask
    assert not list(tmp_path.glob(".*.gbfix"))


def test_a_new_file_whose_name_is_taken_stops_every_write(tmp_path):
    changes = sources(tmp_path)
    new = tmp_path / "_gbfix.py"
    new.write_text("# someone else's\n")
    with pytest.raises(GbfixError, match=r"_gbfix.py: appeared on disk while gbfix ran; nothing written"):
        write_all([*changes, (new, b"# generated\n")])
    assert contents(changes) == ["x = 0\n", "x = 1\n", "x = 2\n"]
    assert new.read_text() == "# someone else's\n"


def test_a_write_failing_after_a_new_file_removes_it(tmp_path, monkeypatch):
    changes = sources(tmp_path)
    new = tmp_path / "_gbfix.py"
    real_replace = os.replace

    def replace(src, dst):
        if str(dst).endswith("m2.py"):
            raise KeyboardInterrupt
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
        write_all([(new, b"# generated\n"), *changes])
    assert not new.exists()
    assert contents(changes) == ["x = 0\n", "x = 1\n", "x = 2\n"]
    assert not list(tmp_path.glob(".*.gbfix"))
