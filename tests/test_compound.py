"""Compound edits: an edit that moves its break to a later `if` of its function, joined with
that `if`'s fix and verified as one (gbfix.compound, the engine's compound round).

The real run (tests/fixtures/compound/prog.py) has five spellings of a read that an `if`
tests, each `if` taken by another recipe (a warning in a method: report-if; a raise in a
helper function, after `float(t)`: raise-if; a log record with the value used after it:
report-if; a print in a loop that formats the value: report-if, the value read back as a
number; a read bound by `:=` in the test and logged: report-if), and `if`s no recipe takes,
where nothing may change (an attribute updated, also reached by a loop over two modules
first: one site, two breaks, tried once; a `:=` name used after its `if`).
"""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

from gbfix import compound, edits, engine
from gbfix.entry import parse as parse_entry
from gbfix.locate import ParsedFile
from gbfix.recipes.item_branch import ItemBeforeTest
from gbfix.recipes.report_if import ReportIf
from gbfix.sources import SourceFile
from tests.helpers import line_site, site_context

FIXTURE = Path(__file__).parent / "fixtures" / "compound"


@pytest.fixture(scope="module")
def fixed(tmp_path_factory) -> tuple[engine.Result, Path]:
    work = tmp_path_factory.mktemp("compound")
    shutil.copytree(FIXTURE, work, dirs_exist_ok=True)
    script = (work / "prog.py").resolve()
    return engine.fix([script], parse_entry("python prog.py", work), engine.Options()), script


def test_each_read_is_joined_with_the_fix_of_its_if(fixed):
    result, _ = fixed
    joined = sorted(o.edit.recipes for o in result.outcomes if o.status == "applied" and o.edit.also)
    assert joined == [("item-before-test", "raise-if")] + [("item-before-test", "report-if")] * 4
    # never on its own: the read alone only moves the break to the `if`
    assert not [o for o in result.outcomes if o.edit.recipes == ("item-before-test",)]
    reads = {f.line: f.status for f in result.findings if f.code == "GB0124"}
    assert reads == {20: "fixed", 28: "fixed", 36: "fixed", 51: "unfixed", 67: "fixed", 88: "fixed", 95: "unfixed"}
    assert result.remaining == 2


def test_the_joined_edit_rewrites_read_and_if_together(fixed):
    result, script = fixed
    text = result.fixed[script].decode()
    assert (
        "        peak = h.abs().max().detach().double()\n"
        "        pred = peak > 4.0\n"
        '        gbfix_warn_if(pred, "activations above 4.0")\n'
    ) in text
    assert (
        "    total = x.abs().sum().detach().double()\n"
        '    gbfix_raise_if(total > 1e6, ValueError, "input too large to normalise")\n'
        "    return x / (total + 1.0)\n"
    ) in text
    assert '    gbfix_log_if(norm > 3.0, log, "warning", "large weight norm")\n    return y / norm\n' in text
    # in the loop, the message's value is the number the original read: cast back at run time
    assert (
        "            m = h.abs().max().detach().double()\n"
        "            gbfix_print_if(\n"
        "                m > 3.0,\n"
        '                "block {}: activations up to {:.1f}",\n'
        "                i,\n"
        "                m,\n"
        '                cast={1: "item"},\n'
        "            )\n"
    ) in text


def test_a_read_bound_in_the_test_is_read_back_in_its_body(fixed):
    # `if (n := int(t)) > 0: log(..., n)`: n a tensor for the test, the number in the record
    result, script = fixed
    text = result.fixed[script].decode()
    assert (
        "    gbfix_log_if(\n"
        "        (n_empty := (lengths == 0).sum().detach()) > 0,\n"
        "        log,\n"
        '        "warning",\n'
        '        "%d empty rows",\n'
        "        n_empty,\n"
        '        cast={1: "item"},\n'
        "    )\n"
    ) in text


def test_a_read_whose_if_no_recipe_takes_stays_as_it_is(fixed):
    result, script = fixed
    text = result.fixed[script].decode()
    assert "        peak = x.abs().max().item()\n        if peak > 2.0:\n            self.hits += 1\n" in text
    # the name the test binds is used after the `if`, where it was a number
    assert "    if (n := int((lengths == 0).sum())) > 0:\n" in text


SOURCE = textwrap.dedent(
    """\
    import warnings

    import torch


    class Block(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = torch.relu(x)
            peak = h.abs().max().item()
            if peak > 4.0:
                warnings.warn("large")
            return h * peak
    """
)


def _parsed(text: str) -> ParsedFile:
    return ParsedFile(SourceFile(Path("/virtual/example.py"), text.encode(), text, "utf-8"))


def _steps(source: str) -> tuple[ParsedFile, ParsedFile, object, object]:
    """The read's edit on ``source``, and report-if's on the text with the read edited."""
    ctx = site_context(source, *line_site(source, "h.abs().max().item()"), "GB0124")
    first = ItemBeforeTest().propose(ctx)
    assert first is not None
    first_edit = first.edit(1, ctx.site, ItemBeforeTest, ctx.file)
    middle_text = edits.apply(ctx.file, [first_edit]).decode()
    then_ctx = site_context(middle_text, *line_site(middle_text, "if peak > 4.0:"), "GB0170")
    then = ReportIf().propose(then_ctx)
    assert then is not None
    return ctx.file, then_ctx.file, first_edit, then.edit(2, then_ctx.site, ReportIf, then_ctx.file)


def test_joined_is_one_edit_of_the_function_with_both_changes():
    before, middle, first, then = _steps(SOURCE)
    both = compound.joined(first, then, before, middle, 3)
    assert both is not None and both.recipes == ("item-before-test", "report-if")
    assert both.start[0] == 7 and both.site is first.site  # the method (line 7), judged by the read's site
    text = edits.apply(before, [both]).decode()
    assert (
        "        peak = h.abs().max().detach().double()\n"
        "        pred = peak > 4.0\n"
        '        gbfix_warn_if(pred, "large")\n'
        "        return h * peak\n"
    ) in text
    assert text.count("def gbfix_warn_if(") == 1  # the helpers of both, once


def test_joined_declines_a_function_defined_twice():
    # which of the two definitions the edited text's function is cannot be told
    source = SOURCE + "\n\nclass Block(torch.nn.Module):\n    pass\n"
    before, middle, first, then = _steps(source)
    assert compound.joined(first, then, before, middle, 3) is None


def test_joined_declines_edits_of_two_files():
    before, middle, first, then = _steps(SOURCE)
    elsewhere = type(then)(**{**then.__dict__, "file": Path("/virtual/other.py")})
    assert compound.joined(first, elsewhere, before, middle, 3) is None


# ---------------------------------------------------------------- a setting first, then its guard

COND_REST = Path(__file__).parent / "fixtures" / "cond_rest"


@pytest.fixture(scope="module")
def guarded(tmp_path_factory) -> tuple[engine.Result, Path]:
    """tests/fixtures/cond_rest: `kept = boxes[keep]` in an imported module, then an early
    return when nothing is kept, and a second function with its own selection and early
    return; the entry script compiles both."""
    work = tmp_path_factory.mktemp("cond_rest")
    shutil.copytree(COND_REST, work, dirs_exist_ok=True)
    return engine.fix([work / "detect.py", work / "main.py"], parse_entry("python main.py", work), engine.Options()), work


def test_a_setting_that_moves_the_break_is_kept_with_the_fix_of_its_guard(guarded):
    result, work = guarded
    applied = sorted(o.edit.recipe for o in result.outcomes if o.status == "applied")
    # one setting, and a torch.cond for the test it moves the break to in each function
    assert applied == ["branch-to-cond", "branch-to-cond", "capture-dynamic-output-shape-ops"]
    assert result.remaining == 0
    # tried alone first: the selection traced, the break moved to the length test
    assert any(
        o.edit.recipe == "capture-dynamic-output-shape-ops" and o.status == "rejected:new-break" for o in result.outcomes
    )
    detect = result.fixed[(work / "detect.py").resolve()].decode()
    assert (
        "    def otherwise(kept):\n"
        "        kept = kept * scale\n"
        "        kept_scores = scores[keep]\n"
        "        return kept.clamp(min=0), kept_scores.clone()\n"
        "\n"
        "    # gbfix: as written under autograd: torch.cond's outputs would all require grad\n"
        "    if torch.is_grad_enabled():\n"
        "        return (\n"
        "            (boxes.new_zeros((0, 4)), scores.new_zeros(0))\n"
        "            if kept.numel() == 0\n"
        "            else otherwise(kept)\n"
        "        )\n"
        "    return torch.cond(\n"
        "        kept.numel() == 0,\n"
        "        lambda kept: (boxes.new_zeros((0, 4)), scores.new_zeros(0)),\n"
    ) in detect
    assert (
        "    def otherwise(picked):\n"
        "        picked = picked * 2\n"
        "        return picked.mean(0)\n"
    ) in detect
    main = result.fixed[(work / "main.py").resolve()].decode()
    assert "torch._dynamo.config.capture_dynamic_output_shape_ops = True\n" in main


def test_under_autograd_the_early_return_is_as_written(guarded):
    """The verifier ran the program under no_grad; the guard's side (autograd on) is run here,
    eager and compiled, against the original: the same values and the same requires_grad."""
    import torch

    result, work = guarded
    fixed: dict = {}
    exec(compile(result.fixed[(work / "detect.py").resolve()].decode(), "detect_fixed.py", "exec"), fixed)
    original: dict = {}
    exec(compile((COND_REST / "detect.py").read_text(), "detect.py", "exec"), original)
    boxes, scores = torch.rand(6, 4, requires_grad=True), torch.rand(6)
    for run in (lambda f: f, lambda f: torch.compile(f, backend="eager")):
        for threshold in (0.5, 2.0):  # some kept, none kept
            want = run(original["postprocess"])(boxes, scores, threshold, 2.0)
            got = run(fixed["postprocess"])(boxes, scores, threshold, 2.0)
            assert [(torch.equal(w, g), w.requires_grad, g.requires_grad) for w, g in zip(want, got)] == [
                (True, w.requires_grad, w.requires_grad) for w in want
            ]
