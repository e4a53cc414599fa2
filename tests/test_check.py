"""gbfix check: one detection run, a baseline keyed by code, file and function, a ratchet.

The torch runs share one project (module fixture): no baseline, --update-baseline, a
clean check, then an edit that adds a break and removes another (checked twice, the
second time with --ignore). The same runs cover the output formats: the first writes
GitHub annotations, the clean one JSON, the edited one text and an HTML report, the
ignored one SARIF. The baseline module itself is tested without torch.
"""

from __future__ import annotations

import json
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from gbfix import baseline as bl
from gbfix.errors import GbfixError
from tests.conftest import run_gbfix
from tests.test_formats import check_sarif

pytestmark = pytest.mark.xdist_group("test_check")

MODEL = textwrap.dedent(
    """\
    import torch


    class Model(torch.nn.Module):
        def forward(self, x):
            print("forward")
            return x * 2


    @torch.compile(backend="eager")
    def helper(x):
        print("helper")
        return x + 1
    """
)

RUN = textwrap.dedent(
    """\
    import torch

    from pkg.model import Model, helper

    if __name__ == "__main__":
        model = torch.compile(Model())
        print(model(torch.ones(2)).tolist(), helper(torch.ones(2)).tolist())
    """
)


def _project(root: Path) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "model.py").write_text(MODEL)
    (root / "run.py").write_text(RUN)
    (root / "pyproject.toml").write_text('[tool.gbfix]\nentry = "python run.py"\n')
    return root


@pytest.fixture(scope="module")
def ratchet(tmp_path_factory):
    """Five checks of one project; each a real torch run."""
    root = _project(tmp_path_factory.mktemp("check") / "proj")
    runs = {"fresh": run_gbfix("check", "-q", "--output-format", "github", "pkg", cwd=root)}
    runs["update"] = run_gbfix("check", "-q", "--update-baseline", "pkg", cwd=root)
    runs["baseline"] = (root / bl.DEFAULT_NAME).read_text()
    runs["clean"] = run_gbfix("check", "-q", "--output-format", "json", "pkg", cwd=root)
    model = root / "pkg" / "model.py"
    # a second print in Model.forward (new, although the key exists), a third one suppressed,
    # the one in helper gone (stale); the lines above move, which does not matter
    edited = MODEL.replace('import torch\n', 'import torch\n\nSCALE = 2\n').replace(
        '        print("forward")\n',
        '        print("forward")\n        print("again")\n        print("quiet")  # gbfix: ignore[GB0059]\n',
    ).replace('    print("helper")\n', "")
    model.write_text(edited)
    runs["edited"] = run_gbfix("check", "-q", "--html", "report.html", "pkg", cwd=root)
    runs["html"] = (root / "report.html").read_text(encoding="utf-8")
    runs["ignored"] = run_gbfix("check", "-q", "--ignore", "GB0059", "--output-format", "sarif", "pkg", cwd=root)
    runs["edited_source"] = edited
    return runs


def test_without_a_baseline_every_break_is_new(ratchet):
    proc = ratchet["fresh"]  # --output-format github
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert [ln.split("::")[1] for ln in lines] == [
        "error file=pkg/model.py,line=6,col=9,title=GB0059", "error file=pkg/model.py,line=12,col=5,title=GB0059",
    ]
    assert all(ln.endswith("(new: not in the baseline)") for ln in lines)
    assert proc.stderr.strip().splitlines()[-1] == (
        "Found 2 graph breaks, all new: no baseline at .gbfix-baseline.json (`gbfix check --update-baseline` writes one)."
    )


def test_update_writes_keys_by_function_not_line(ratchet):
    proc = ratchet["update"]
    assert (proc.returncode, proc.stdout) == (0, ""), proc.stderr
    assert "Wrote .gbfix-baseline.json: 2 graph breaks in 2 entries." in proc.stderr
    assert ratchet["baseline"] == (
        '{\n  "version": 1,\n  "breaks": [\n'
        '    {"code": "GB0059", "path": "pkg/model.py", "function": "Model.forward", "count": 1},\n'
        '    {"code": "GB0059", "path": "pkg/model.py", "function": "helper", "count": 1}\n'
        "  ]\n}\n"
    )


def test_breaks_in_the_baseline_pass(ratchet):
    proc = ratchet["clean"]  # --output-format json
    assert proc.returncode == 0, proc.stderr
    summary = "Found 2 graph breaks, all in the baseline (.gbfix-baseline.json)."
    assert proc.stderr.strip() == summary
    doc = json.loads(proc.stdout)
    assert (doc["format"], doc["command"], doc["entry"], doc["baseline"], doc["updated"]) == (1, "check", "python run.py", ".gbfix-baseline.json", False)
    assert [(f["path"], f["line"], f["code"], f["status"], f["level"]) for f in doc["findings"]] == [
        ("pkg/model.py", 6, "GB0059", "baseline", "note"), ("pkg/model.py", 12, "GB0059", "baseline", "note"),
    ]
    assert doc["findings"][0]["detail"] == "in the baseline: GB0059 in pkg/model.py (Model.forward)"
    assert doc["summary"] == {"text": summary, "findings": 2, "suppressed": 0, "exit_code": 0}
    assert (doc["counts"], doc["stale"]) == ({"new": 0, "baseline": 2, "outside": 0, "suppressed": 0}, [])


def test_a_second_break_in_a_function_is_new_and_a_gone_one_is_stale(ratchet):
    proc = ratchet["edited"]
    assert proc.returncode == 1, proc.stderr
    src = ratchet["edited_source"].splitlines()
    lines = proc.stdout.splitlines()
    # both prints of Model.forward are shown: which of the two is the new one cannot be told
    assert [int(ln.split(":")[1]) for ln in lines] == [src.index('        print("forward")') + 1, src.index('        print("again")') + 1]
    assert all(ln.endswith("(new: 2 GB0059 in Model.forward, the baseline allows 1)") for ln in lines)
    err = proc.stderr.strip().splitlines()
    assert err == [
        "note: .gbfix-baseline.json lists 1 graph break that is gone: GB0059 in pkg/model.py (helper); "
        "run `gbfix check --update-baseline` to tighten it",
        "wrote the HTML report report.html",
        "Found 2 graph breaks: 1 new (not in .gbfix-baseline.json), 1 in the baseline. 1 suppressed.",
    ]
    page = ratchet["html"]  # --html: each break with its verdict and its source, no edits
    assert page.count('<section class="finding bad"') == 2 and "New: 2 GB0059 in Model.forward, the baseline allows 1</p>" in page
    assert "print(&quot;again&quot;)" in page and "<h2>Counts</h2>" in page and "Edits tried" not in page


def test_entries_of_ignored_codes_are_neither_checked_nor_stale(ratchet):
    proc = ratchet["ignored"]  # --output-format sarif
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == "No graph breaks found in 2 call(s) of compiled code."
    doc = json.loads(proc.stdout)
    check_sarif(doc)
    assert doc["runs"][0]["results"] == []


@pytest.mark.parametrize(
    "content, why",
    [
        ("{\n", "invalid baseline: not JSON (Expecting property name enclosed in double quotes: line 2 column 1 (char 2)); fix it, or delete it and write a new one"),
        ('{"breaks": {}}', 'invalid baseline: expected an object with a "breaks" list'),
        ('{"version": 2, "breaks": []}', "invalid baseline: version 2, this gbfix reads version 1"),
        ('{"breaks": [{"code": "GB0059", "path": "a.py", "function": "f", "count": 0}]}', 'invalid baseline: breaks[0] needs "code", "path" and "function" strings and a positive "count"'),
    ],
)
def test_a_bad_baseline_is_one_line_exit_2_before_anything_runs(tmp_path, content, why):
    root = _project(tmp_path / "proj")
    (root / "ci").mkdir()
    (root / "ci" / "base.json").write_text(content)
    proc = run_gbfix("check", "--baseline", "ci/base.json", "pkg", cwd=root)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == f"gbfix: error: ci/base.json: {why}\n"  # no progress line: the entry never ran


def test_check_is_a_command_with_its_options(tmp_path):
    assert "\n  check " in run_gbfix("--help", cwd=tmp_path).stdout
    proc = run_gbfix("check", "--help", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.startswith("Usage: gbfix check [OPTIONS] [PATHS]...")
    for option in ("--baseline FILE", "--update-baseline", "-e, --entry", "--timeout", "-q, --quiet"):
        assert option in proc.stdout
    proc = run_gbfix("check", "nope", cwd=tmp_path)
    assert (proc.returncode, proc.stderr) == (2, "gbfix: error: nope: no such file or directory\n")
    proc = run_gbfix("check", cwd=tmp_path)  # nothing names an entry
    assert proc.returncode == 2 and proc.stderr.startswith("gbfix: error: no entry to run; ")


# --- the baseline module (no torch) ------------------------------------------------


def test_enclosing_names_functions_as_qualname_does(tmp_path):
    f = tmp_path / "m.py"
    f.write_text(
        textwrap.dedent(
            """\
            X = 1


            class Model:
                @staticmethod
                @decorate
                def forward(x):
                    def inner():
                        return x
                    return inner()

                class Sub:
                    async def run(self):
                        pass

                y = 2
            """
        )
    )
    expected = {1: "<module>", 5: "Model.forward", 6: "Model.forward", 7: "Model.forward", 9: "Model.forward.<locals>.inner",
                10: "Model.forward", 13: "Model.Sub.run", 16: "Model", 17: "<module>"}
    assert {line: bl.enclosing(f, line) for line in expected} == expected


def test_keys_are_relative_posix_paths(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    f = tmp_path / "a" / "b" / "m.py"
    f.write_text("def f():\n    print(1)\n")
    assert bl.key("GB0059", f, 2, tmp_path) == ("GB0059", "a/b/m.py", "f")
    assert bl.key("GB0059", f, 2, tmp_path / "a" / "b" / "c") == ("GB0059", "../m.py", "f")


def test_compare_counts_new_and_stale():
    a, b, c = ("GB0059", "m.py", "f"), ("GB0170", "m.py", "g"), ("GB0124", "n.py", "<module>")
    cmp = bl.compare([a, a, b], Counter({a: 1, c: 2}))
    assert (cmp.new, cmp.stale, cmp.new_total, cmp.stale_total) == ({a: 1, b: 1}, {c: 2}, 2, 2)
    assert bl.stale_note(cmp, "base.json", "update") == "base.json lists 2 graph breaks that are gone: GB0124 in n.py (<module>) x2; update to tighten it"
    assert bl.compare([a], None).new == {a: 1} and bl.compare([], Counter()).stale == {}


def test_dump_and_load_round_trip(tmp_path):
    counts = Counter({("GB0170", "z.py", "f"): 2, ("GB0059", "a.py", "g"): 1})
    path = tmp_path / "sub" / "base.json"
    bl.dump(path, counts)
    assert bl.load(path) == counts
    assert json.loads(path.read_text())["breaks"][0]["path"] == "a.py"  # sorted by path, function, code
    assert bl.load(tmp_path / "missing.json") is None
    with pytest.raises(GbfixError, match="^shown.json: invalid baseline"):
        (tmp_path / "bad.json").write_text("[]")
        bl.load(tmp_path / "bad.json", "shown.json")


def test_default_path_is_next_to_pyproject_else_cwd(tmp_path, monkeypatch):
    (tmp_path / "proj" / "src").mkdir(parents=True)
    (tmp_path / "proj" / "pyproject.toml").write_text("")
    assert bl.default_path(tmp_path / "proj" / "src") == (tmp_path / "proj" / bl.DEFAULT_NAME).resolve()
    monkeypatch.chdir(tmp_path)
    (tmp_path / "loose").mkdir()
    assert bl.default_path(tmp_path / "loose") == tmp_path.resolve() / bl.DEFAULT_NAME
