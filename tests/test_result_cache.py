"""The result cache: an unchanged program costs no run, any change to what it loads does."""

from __future__ import annotations

import os
import pickle
import shutil
import stat

import pytest

from gbfix import result_cache
from tests.conftest import FIXTURES, run_gbfix
from tests.helpers import processes_in

ENTRY = ("--entry", "python run.py", "pkg")
RAN = "] baseline run of"
REUSED = "reusing its verified result"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("cached") / "simple"
    shutil.copytree(FIXTURES / "simple", root)
    cache = tmp_path_factory.mktemp("cache")
    env = {k: v for k, v in os.environ.items() if k != "GBFIX_NO_CACHE"} | {"GBFIX_CACHE_DIR": str(cache)}

    def gbfix(*args):
        return run_gbfix(*args, *ENTRY, cwd=root, env=env)

    blocks = root / "pkg" / "blocks.py"
    original = blocks.read_bytes()
    out = {"check": gbfix("check"), "check_again": gbfix("check")}
    out |= {"fresh": gbfix("--dry-run"), "again": gbfix("--dry-run")}
    out["left_after_reuse"] = processes_in(root)  # the worker booted early, then not needed
    out["apply"] = gbfix("--apply")
    out["applied"] = blocks.read_bytes()
    generated = root / "pkg" / "_gbfix.py"  # the package's helpers, new with the edit
    out["generated"] = generated.read_bytes()
    generated.unlink()
    blocks.write_bytes(original)  # back to the code the cached result is for...
    with open(root / "run.py", "a", encoding="utf-8") as f:
        f.write("# changed\n")  # ...but a file outside the targets that the program runs changed
    out["script_changed"] = gbfix("--dry-run")
    out["check_changed"] = gbfix("check")
    out["no_cache"] = gbfix("--dry-run", "--no-cache")
    for entry in cache.glob("*.pickle"):
        entry.write_bytes(b"not a pickle")
    out["corrupt"] = gbfix("--dry-run")
    out["original"] = original
    return out


def test_unchanged_code_reuses_the_verified_result_without_running(runs):
    fresh, again = runs["fresh"], runs["again"]
    assert fresh.returncode == again.returncode == 1, fresh.stderr + again.stderr
    assert RAN in fresh.stderr and REUSED not in fresh.stderr
    assert RAN not in again.stderr and REUSED in again.stderr, again.stderr
    assert again.stdout == fresh.stdout and "+++ b/pkg/blocks.py" in again.stdout
    assert "note: the program and the files it loads are unchanged" in again.stderr
    assert "note: ran `" in fresh.stderr and "note: ran `" not in again.stderr  # the reused run ran nothing


def test_a_reused_result_leaves_no_worker_behind(runs):
    assert REUSED in runs["again"].stderr
    assert runs["left_after_reuse"] == []


def test_apply_after_dry_run_writes_the_reused_edits(runs):
    applied = runs["apply"]
    assert applied.returncode == 0, applied.stderr
    assert REUSED in applied.stderr and "wrote pkg/blocks.py" in applied.stderr
    assert runs["applied"] != runs["original"]
    written = runs["applied"]
    for line in runs["fresh"].stdout.splitlines():  # what the dry run showed is what was written
        if line.startswith("+++ "):
            written = runs["generated"] if line.endswith("/_gbfix.py") else runs["applied"]
        elif line.startswith("+"):
            assert line[1:].encode() in written


@pytest.mark.parametrize("case", ["script_changed", "no_cache", "corrupt"])
def test_a_changed_loaded_file_no_cache_or_a_broken_cache_runs_again(runs, case):
    proc = runs[case]
    assert proc.returncode == 1, proc.stderr
    assert RAN in proc.stderr and REUSED not in proc.stderr, proc.stderr
    assert proc.stdout == runs["fresh"].stdout


def test_check_reuses_its_detection_run_until_a_loaded_file_changes(runs):
    fresh, again, changed = runs["check"], runs["check_again"], runs["check_changed"]
    assert fresh.returncode == again.returncode == changed.returncode == 1, fresh.stderr  # no baseline: all new
    assert "detection run of" in fresh.stderr and "reusing its detection run" not in fresh.stderr
    assert "detection run of" not in again.stderr and "reusing its detection run" in again.stderr, again.stderr
    assert "note: the program and the files it loads are unchanged since an earlier run: its detection run is reused" in again.stderr
    assert again.stdout == fresh.stdout and "GB" in fresh.stdout
    assert "detection run of" in changed.stderr and changed.stdout == fresh.stdout


class _Payload:
    """Unpickling this runs code: it creates the marker file."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv("GBFIX_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_a_stored_result_is_signed_and_loaded(folder):
    result_cache.store("k", {"answer": 42}, [], [])
    assert result_cache.load("k") == {"answer": 42}
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / ".key").stat().st_mode) == 0o600


def test_a_file_gbfix_did_not_sign_is_never_unpickled(folder, tmp_path):
    result_cache.store("k", {"answer": 42}, [], [])  # makes the folder and its key
    marker = tmp_path / "pwned"
    (folder / "k.pickle").write_bytes(bytes(32) + pickle.dumps({"format": result_cache.FORMAT, "files": {}, "result": _Payload(marker)}))
    assert result_cache.load("k") is None
    assert not marker.exists()


def test_a_changed_byte_voids_the_signature(folder):
    result_cache.store("k", {"answer": 42}, [], [])
    path = folder / "k.pickle"
    blob = bytearray(path.read_bytes())
    blob[-3] ^= 1
    path.write_bytes(bytes(blob))
    assert result_cache.load("k") is None


def test_no_cache_in_a_folder_others_may_write_to(folder):
    folder.mkdir(mode=0o700)
    folder.chmod(0o777)
    result_cache.store("k", {"answer": 42}, [], [])
    assert not (folder / "k.pickle").exists() and result_cache.load("k") is None


def test_no_cache_with_a_key_others_may_read(folder):
    result_cache.store("k", {"answer": 42}, [], [])
    (folder / ".key").chmod(0o644)
    assert result_cache.load("k") is None
