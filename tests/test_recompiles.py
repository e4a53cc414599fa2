"""Recompiles are detected and reported like breaks (issue 17, part 1).

tests/fixtures/recompiles/: seven small programs in the shapes that recompile in real code,
run together by run_all.py, so one real torch run covers them all. Each must be named
at its source line, with the guard that failed and the expression it guards.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from gbfix import engine, explain, formats, html_report, rccodes, report
from gbfix.entry import parse as parse_entry
from gbfix.errors import GbfixError
from gbfix.records import Guard
from gbfix.suppress import Filter
from tests.conftest import run_gbfix
from tests.helpers import fixture_copy

FIXTURE = Path(__file__).parent / "fixtures" / "recompiles"
DETECT_ONLY = engine.Options(unsafe_fixes=True, selection=Filter(ignore=("RC",)))
pytest_plugins = ["pytester"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return fixture_copy(tmp_path_factory, "recompiles")


@pytest.fixture(scope="module")
def result(folder: Path) -> engine.Result:
    """One dry run over every program (a real torch run); detection only: the recompile
    recipes are left out (`--ignore RC`; tests/test_rcfix.py and bench/recompiles.py fix them)."""
    return engine.fix([folder], parse_entry("python run_all.py", folder), DETECT_ONLY)


def _line(folder: Path, name: str, needle: str) -> int:
    lines = (folder / name).read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if needle in text)


# (file, the text of the line the finding is on, code, guarded expression, text of the failed guard)
EXPECTED = [
    ("counter.py", "self.calls += 1", "RC001", "self.calls", "self.calls == 7"),
    ("train_lr.py", "return w - lr * grad", "RC002", "lr", "lr == 0.1"),
    ("sampler.py", "return torch.softmax(logits / temperature", "RC002", "temperature", "temperature == 1.0"),
    ("scheduler.py", "scale = min(1.0, (sched.step_num", "RC001", "sched.step_num", "sched.step_num == 0"),
    # a tensor's size: Dynamo keeps no user stack for it; the call of the compiled module is where mark_dynamic goes
    ("generate.py", "next_token = model(tokens)", "RC003", "tokens.size()[1]", "tensor 'tokens' size mismatch at index 1"),
    ("hf_config.py", "if self.config.output_attentions:", "RC004", "self.config.output_attentions", "self.config.output_attentions == False"),
    ("batches.py", "total += model(batch)", "RC003", "x.size()[0]", "tensor 'x' size mismatch at index 0"),
]


@pytest.mark.parametrize(("name", "needle", "code", "source", "guard"), EXPECTED, ids=[e[0] for e in EXPECTED])
def test_each_recompile_is_named_at_its_line_with_its_guard(result, folder, name, needle, code, source, guard):
    hits = [f for f in result.findings if f.path == folder / name and f.code == code]
    assert len(hits) == 1, [report.diagnostic(f) for f in result.findings]
    f = hits[0]
    assert f.line == _line(folder, name, needle)
    assert f.status == "recompile" and f.col is not None
    assert f"guard `{guard}" in f.message and f"failed on `{source}`" in f.message
    # left out by --ignore RC, so no recipe was asked: what is left to the user is said as for a break
    title, hand = rccodes.CODES[code]
    assert f.detail == f"{title}; no recipe applies; by hand: {hand}"
    facts = rccodes.describe(f.code, f.recompiles)
    assert (facts["source"], facts["cause"]) == (source, code)


def test_the_recompile_limit_is_reported_first_in_place_of_gb0039(result, folder):
    first = result.findings[0]
    assert (first.code, first.path, first.line) == ("RC100", folder / "counter.py", _line(folder, "counter.py", "def forward"))
    assert "recompile_limit (8)" in first.message and "runs eagerly" in first.message
    assert "RC001 `self.calls`" in first.message
    assert not [f for f in result.findings if f.code == "GB0039"]  # the same event, said better by RC100
    assert [f.code for f in result.findings].count("RC100") == 1


def test_recompiles_are_reported_not_fixed(result):
    assert not result.fixed and not result.outcomes
    line = report.summary(result, applied=False)
    assert line.startswith("No graph breaks found in")
    assert line.endswith("Found 14 recompiles at 7 sites, 1 frame over the recompile limit (running eagerly): 7 not fixable.")
    assert report.exit_code(result, applied=False) == 1
    # --apply: the frame over the limit is Dynamo's break GB0039 (shown as RC100): it remains
    assert (result.remaining, report.exit_code(result, applied=True)) == (1, 1)


def test_text_json_sarif_github(result, folder):
    text = [report.diagnostic(f, display=lambda p: p.name) for f in result.findings]
    assert text[0].startswith(f"counter.py:{_line(folder, 'counter.py', 'def forward')}:5: RC100 `forward` hit")
    doc = formats.fix_document(result, applied=False, summary="s", exit_code=1, suppressed=0, display=lambda p: p.name)
    data = json.loads(formats.render("json", doc, folder))
    rc001 = next(d for d in data["findings"] if d["code"] == "RC001" and d["path"] == "counter.py")
    assert rc001["recompile"]["count"] == 8 and rc001["recompile"]["function"] == "forward"
    assert data["findings"][0]["level"] == "error" and rc001["level"] == "warning"
    assert data["counts"]["recompile"] == len(result.findings)
    sarif = json.loads(formats.render("sarif", doc, folder))
    rules = {r["id"]: r for r in sarif["runs"][0]["tool"]["driver"]["rules"]}
    assert rules["RC003"]["shortDescription"]["text"] == "a tensor's size changed between calls"
    github = formats.render("github", doc, folder).splitlines()
    assert any(ln.startswith("::error ") and "title=RC100" in ln for ln in github)


def test_html_report(result):
    page = html_report.render(result, summary=report.summary(result, applied=False))
    assert "<title>gbfix fix: 0 graph breaks, 8 recompile sites</title>" in page
    assert page.count(html_report._STATUS["recompile"][0]) >= 16  # a badge in the list and on each finding
    n = len(result.baseline.recompiles)
    assert n == 14  # the counter 8 times (the attempt over the limit included), the six others once each
    assert f"<tr><th>recompiles</th><td class=\"n\">{n}</td>" in page


GUARDS = [
    ("self.calls == 3", "RC001", "self.calls"),
    ("lr == 0.1", "RC002", "lr"),
    ("tensor 'L['x']' size mismatch at index 0. expected 2, actual 3", "RC003", "x.size()[0]"),
    ("tensor 'x' stride mismatch at index 1. expected 1, actual 4", "RC003", "x.stride()[1]"),
    ("self.flag == False", "RC004", "self.flag"),
    ("mode == 'a'", "RC004", "mode"),
    ("G['SCALE'] == 1.0", "RC005", "SCALE"),
    ("tensor 'x' dtype mismatch. expected Float, actual Double", "RC006", "x.dtype"),
    ("___check_obj_id(L['fn'], 140000)", "RC007", "fn"),
    ("len(xs) == 1", "RC008", "xs"),
    ("BACKEND_MATCH failure: torch.compile detected different backend callables.", "RC009", None),
]


@pytest.mark.parametrize(("text", "code", "source"), GUARDS)
def test_guard_causes(text, code, source):
    """Guard texts as torch 2.13's Dynamo writes them (seen in real runs)."""
    why = rccodes.cause(Guard(text))
    assert why.code == code
    if source is not None:
        assert why.source == source


def test_check_fails_on_a_recompile_the_baseline_does_not_list(tmp_path):
    shutil.copy(FIXTURE / "counter.py", tmp_path / "counter.py")
    env = {**os.environ, "GBFIX_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("GBFIX_NO_CACHE", None)  # the second check reuses the first one's run
    update = run_gbfix("check", "-q", "-e", "python counter.py", "--update-baseline", "counter.py", cwd=tmp_path, env=env)
    assert update.returncode == 0, update.stderr
    baseline = tmp_path / ".gbfix-baseline.json"
    data = json.loads(baseline.read_text())
    assert sorted(e["code"] for e in data["breaks"]) == ["RC001", "RC100"]
    data["breaks"] = [e for e in data["breaks"] if e["code"] != "RC001"]
    baseline.write_text(json.dumps(data))
    proc = run_gbfix("check", "-q", "-e", "python counter.py", "counter.py", cwd=tmp_path, env=env)
    assert proc.returncode == 1, proc.stderr
    line = _line(tmp_path, "counter.py", "self.calls += 1")
    assert proc.stdout.splitlines() == [
        f"counter.py:{line}:9: RC001 `forward` recompiled 8 times: guard `self.calls == 7` failed on `self.calls` (new: not in the baseline)"
    ]
    ignored = run_gbfix("check", "-q", "-e", "python counter.py", "--ignore", "RC001", "counter.py", cwd=tmp_path, env=env)
    assert ignored.returncode == 0, ignored.stderr


RULES = Path(__file__).resolve().parent.parent / "rules"


def test_every_rc_code_has_a_page_and_explain_shows_it():
    assert {p.stem for p in RULES.glob("RC*.md")} == set(rccodes.CODES)
    for code, (title, _) in rccodes.CODES.items():
        assert explain.explain(code.lower()).title == title
    text = explain.render(explain.explain("RC100"))
    assert "No gbfix recipe answers RC100: gbfix reports it; the page says what to do by hand." in text
    assert "counter-as-buffer (unsafe)" in explain.render(explain.explain("RC001"))
    with pytest.raises(GbfixError, match="unknown recompile code RC010"):
        explain.explain("RC010")


COUNTER_TEST = '''\
import torch

from counter import Scaled


def test_counter():
    model = torch.compile(Scaled())
    for _ in range(10):
        model(torch.ones(2, 4))
    assert model.calls == 10
'''


def test_pytest_plugin_reports_recompiles_and_fails_on_new_ones(pytester, monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # this suite may itself run in a worker
    shutil.copy(FIXTURE / "counter.py", pytester.path / "counter.py")
    pytester.makepyfile(test_counter=COUNTER_TEST)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--gbfix-baseline", "none.json", timeout=240)
    assert result.ret == 1, result.stdout.str()
    result.assert_outcomes(passed=1)
    line = _line(pytester.path, "counter.py", "self.calls += 1")
    result.stdout.fnmatch_lines([
        "test_counter.py::test_counter",
        f"    counter.py:{_line(pytester.path, 'counter.py', 'def forward')}:5: RC100 forward hit recompile_limit (8), runs eagerly (in Scaled.forward)",
        f"    counter.py:{line}:9: RC001 recompile of forward, a number on an object changed between calls: `self.calls == 0` (in Scaled.forward)",  # the test's first
        "gbfix: no graph breaks (eager backend).",
        'gbfix: 2 recompile sites in the project (RC codes); gbfix --entry "pytest ..." tries their recipes.',
        "gbfix: 2 graph breaks not in the baseline none.json (the file does not exist): RC001 in counter.py (Scaled.forward), RC100 in counter.py (Scaled.forward); the session fails.",
    ])


def test_a_torch_without_the_private_hooks_records_less_and_says_so(monkeypatch):
    from torch._dynamo import convert_frame

    from gbfix.child import recompiles as child

    # install() replaces the hooks in this process: monkeypatch puts the originals back
    monkeypatch.setattr(convert_frame, "get_and_maybe_log_recompilation_reasons", convert_frame.get_and_maybe_log_recompilation_reasons)
    monkeypatch.delattr(convert_frame, "exceeds_recompile_limit")
    partial = child.RecompileRecorder()
    child.install(partial)
    assert partial.notes == ["this torch has no convert_frame.exceeds_recompile_limit: recompile-limit hits not flagged"]
    monkeypatch.delattr(convert_frame, "get_and_maybe_log_recompilation_reasons")
    none = child.RecompileRecorder()
    child.install(none)
    assert none.notes == ["this torch has no convert_frame.get_and_maybe_log_recompilation_reasons: recompiles not recorded"]


@pytest.mark.parametrize(
    ("reason", "text"),
    [
        ("0/1: self.calls == 1                    # self.calls += 1  # x.py:20 in forward (HINT: ...)", "self.calls == 1"),
        ('1/0: lr == 0.1    # return x * lr  # x.py:31 in f\nUser stack trace:\n  File "/x.py", line 31, in f\n    return x * lr', "lr == 0.1"),
        ("2/0: tensor 'x' size mismatch at index 0. expected 2, actual 3", "tensor 'x' size mismatch at index 0. expected 2, actual 3"),
    ],
)  # reasons as torch 2.13 writes them (seen in real runs)
def test_guard_text_out_of_dynamos_reason(reason, text):
    from gbfix.child.recompiles import guard_text

    assert guard_text(reason) == text
