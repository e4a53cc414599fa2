"""gbfix.upstream: what the shipped data says of a break in an installed package at newer releases.

A fake distribution (a dist-info folder beside its package on sys.path) stands in
for an installed package; no torch run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gbfix import report, upstream
from gbfix.engine import Finding
from gbfix.records import Break, Cause, Frame

REPO = Path(__file__).resolve().parent.parent

BLOCKS = """\
class Mixer:
    def forward(self, x):
        print("mixing")
        return x


def helper(x):
    print("helping")
    return x
"""


def installed(tmp_path: Path, monkeypatch, version: str = "0.9.0") -> Path:
    """tinylib <version> installed in tmp_path; the path of tinylib/blocks.py."""
    (tmp_path / "tinylib").mkdir()
    (tmp_path / "tinylib" / "__init__.py").write_text("")
    blocks = tmp_path / "tinylib" / "blocks.py"
    blocks.write_text(BLOCKS)
    info = tmp_path / f"tinylib-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: tinylib\nVersion: {version}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return blocks


def data(tmp_path: Path, measured: dict, function: str = "Mixer.forward", code: str = "GB0059") -> tuple[upstream.Known, ...]:
    site = {"package": "tinylib", "path": "tinylib/blocks.py", "function": function, "code": code, "measured": measured}
    path = tmp_path / "upstream.json"
    path.write_text(json.dumps({"format": 1, "sites": [site]}))
    return upstream.load(path)


def brk(blocks: Path, line: int = 3, name: str = "forward") -> Break:
    """A print in tinylib reached from the user's run.py."""
    return Break((Cause("GB0059", "print", ""),), (Frame("/home/me/run.py", 9, 4, 20, "main"), Frame(str(blocks), line, 8, 23, name)))


def test_a_newer_release_that_no_longer_breaks(tmp_path, monkeypatch):
    """The first newer release measured fixed; versions compare as numbers (0.10 after 0.9)."""
    blocks = installed(tmp_path, monkeypatch)
    known = data(tmp_path, {"0.8.0": "fixed", "0.9.0": "breaks", "0.9.5": "breaks", "0.10.0": "fixed", "0.11.0": "fixed"})
    assert upstream.note(brk(blocks), "GB0059", known) == "tinylib 0.10.0 no longer breaks here, 0.9.0 is installed"


def test_every_newer_release_measured_still_breaks(tmp_path, monkeypatch):
    blocks = installed(tmp_path, monkeypatch)
    known = data(tmp_path, {"0.9.0": "breaks", "0.10.0": "breaks", "0.12.1": "breaks"})
    assert upstream.note(brk(blocks), "GB0059", known) == "tinylib 0.12.1 still breaks here"


def test_a_module_level_function(tmp_path, monkeypatch):
    blocks = installed(tmp_path, monkeypatch)
    known = data(tmp_path, {"1.0.0": "fixed"}, function="helper")
    assert upstream.note(brk(blocks, 8, "helper"), "GB0059", known) == "tinylib 1.0.0 no longer breaks here, 0.9.0 is installed"
    assert upstream.note(brk(blocks), "GB0059", known) is None  # Mixer.forward is another site


@pytest.mark.parametrize(
    ("measured", "code", "version"),
    [
        ({"0.8.0": "fixed", "0.9.0": "breaks"}, "GB0059", "0.9.0"),  # nothing newer measured
        ({"1.0.0": "fixed"}, "GB0007", "0.9.0"),  # another break at that site
        ({"1.0.0": "fixed"}, "GB0059", "0.9.0.dev1"),  # a pre-release installed: no order to tell
    ],
    ids=["nothing-newer", "other-code", "pre-release"],
)
def test_nothing_to_say(tmp_path, monkeypatch, measured, code, version):
    blocks = installed(tmp_path, monkeypatch, version)
    assert upstream.note(brk(blocks), code, data(tmp_path, measured)) is None


def test_a_package_not_installed(tmp_path):
    (tmp_path / "tinylib").mkdir()
    (tmp_path / "tinylib" / "__init__.py").write_text("")
    (tmp_path / "tinylib" / "blocks.py").write_text(BLOCKS)
    known = data(tmp_path, {"1.0.0": "fixed"})
    assert upstream.note(brk(tmp_path / "tinylib" / "blocks.py"), "GB0059", known) is None


@pytest.mark.parametrize(
    "doc",
    [
        {"format": 2, "sites": []},
        {"format": 1, "sites": [{"package": "p", "path": "p.py", "function": "f", "code": "GB0059", "measured": {"1.0": "gone"}}]},
        {"format": 1, "sites": [{"package": "p", "path": "p.py", "function": "f", "code": "GB0059", "measured": {"1.0rc1": "fixed"}}]},
        {"format": 1, "sites": [{"package": "p", "path": "p.py", "function": "f", "code": "GB0059", "measured": {}}]},
    ],
    ids=["format", "verdict", "version", "empty"],
)
def test_a_malformed_file(tmp_path, doc):
    path = tmp_path / "upstream.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError):
        upstream.load(path)


def test_the_shipped_file_loads():
    assert isinstance(upstream.load(), tuple)


def test_the_report_line_carries_the_note(tmp_path, monkeypatch):
    blocks = installed(tmp_path, monkeypatch)
    known = data(tmp_path, {"0.10.0": "fixed"})
    monkeypatch.setattr(upstream, "_shipped", lambda: known)
    f = Finding(Path("/home/me/run.py"), 9, 5, "GB0059", "print", "unfixed", "no recipe applies", brk(blocks))
    assert report.diagnostic(f, str) == (
        "/home/me/run.py:9:5: GB0059 print (no recipe applies; tinylib 0.10.0 no longer breaks here, 0.9.0 is installed)"
    )


def test_the_shipped_data_is_what_the_census_results_give():
    """data/upstream.json is computed by bench/census/upstream.py from the kept census results,
    never edited by hand."""
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "census" / "upstream.py"), "--check"],
                          capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr
    sites = upstream.load(upstream.DATA)
    assert any(dict(k.measured).get("5.23.0") == "fixed" for k in sites)
    assert any(dict(k.measured).get("5.23.0") == "breaks" for k in sites)
