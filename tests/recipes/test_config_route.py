"""Config routes, applied statically: where the assignment goes, what it imports, when they decline."""

from __future__ import annotations

import shutil
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from gbfix import edits, engine
from gbfix.entry import parse as parse_entry
from gbfix.locate import ParsedFile
from gbfix.recipes.config_route import AllowRnn, CaptureDynamicOutputShapeOps, CaptureScalarOutputs, TraceAutogradOps
from gbfix.sources import SourceFile
from tests.helpers import ALL_CAPABILITIES, line_site, rewrite_at, site_context

SOURCE = '''\
"""Loss helpers."""
import torch
import torch.nn.functional as F


def token_loss(logits, labels):
    loss_sum = F.cross_entropy(logits, labels, reduction="sum")
    return loss_sum / (labels != -100).sum().item()


if __name__ == "__main__":
    print(token_loss(torch.randn(4, 3), torch.tensor([0, 1, 2, -100])))
'''


def at(source: str, recipe, needle: str = "(labels != -100).sum().item()", code: str = "GB0124", **kw) -> str | None:
    source = textwrap.dedent(source)
    for number, line in enumerate(source.splitlines(), 1):
        col = line.find(needle)
        if col >= 0:
            return rewrite_at(source, recipe, number, col, col + len(needle), code, **kw)
    raise AssertionError(f"{needle!r} not in source")


def test_assignment_goes_after_the_imports_with_its_reason():
    out = at(SOURCE, CaptureScalarOutputs)
    assert out == SOURCE.replace(
        "import torch.nn.functional as F\n",
        "import torch.nn.functional as F\n\n"
        "# gbfix: trace .item() / .tolist() into the graph as symbolic scalars; set at import: Dynamo reads it when it traces\n"
        "torch._dynamo.config.capture_scalar_outputs = True\n",
    )


@pytest.mark.parametrize(
    "recipe, option",
    [
        (CaptureScalarOutputs, "capture_scalar_outputs"),
        (CaptureDynamicOutputShapeOps, "capture_dynamic_output_shape_ops"),
        (AllowRnn, "allow_rnn"),
        (TraceAutogradOps, "trace_autograd_ops"),
    ],
)
def test_each_route_sets_its_own_option(recipe, option):
    # the entry script: the program starts here
    out = at(SOURCE, recipe)
    assert f"\ntorch._dynamo.config.{option} = True\n" in out
    assert out.count("torch._dynamo.config.") == 1


def test_torch_is_imported_when_the_file_does_not_bind_it():
    source = SOURCE.replace("import torch\nimport torch.nn.functional as F\n", "from torch.nn import functional as F\n")
    out = at(source, CaptureScalarOutputs)
    assert out.startswith('"""Loss helpers."""\nfrom torch.nn import functional as F\nimport torch\n\n# gbfix:')


def test_import_torch_as_alias_does_not_bind_torch():
    source = SOURCE.replace("import torch\n", "import torch as th\n")
    assert "\nimport torch\n" in at(source, CaptureScalarOutputs)


@pytest.mark.parametrize(
    "setting",
    [
        "torch._dynamo.config.capture_scalar_outputs = True\n",  # set already, and the break is still there
        "torch._dynamo.config.capture_scalar_outputs = False\n",  # the user's decision
        "from torch._dynamo import config\nconfig.capture_scalar_outputs = False\n",
    ],
)
def test_declines_when_the_file_sets_the_option(setting):
    source = SOURCE.replace("import torch.nn.functional as F\n", "import torch.nn.functional as F\n" + setting)
    assert at(source, CaptureScalarOutputs) is None


def test_declines_without_a_leading_import():
    source = 'def f(t):\n    return t.sum().item()\n'
    assert at(source, CaptureScalarOutputs, "t.sum().item()") is None


def test_declines_on_a_torch_without_the_option():
    caps = ALL_CAPABILITIES - {"config.capture_scalar_outputs"}
    assert at(SOURCE, CaptureScalarOutputs, capabilities=caps) is None


def test_the_same_edit_for_two_sites_in_one_file():
    """Two breaks in one file propose byte-identical edits (the engine verifies them once)."""
    source = SOURCE + "\n\ndef ratio(a, b):\n    return a / b.max().item()\n"
    first = at(source, CaptureScalarOutputs)
    second = at(source, CaptureScalarOutputs, "b.max().item()")
    assert first == second and first is not None


@pytest.mark.parametrize(
    "check",
    [
        'assert lengths.max().item() <= slen, "lengths exceed the cache"',  # transformers' XLM/FSMT idiom
        "assert int(lengths.max().item()) <= slen",
        "assert (\n        lengths.max().item() <= slen\n    ), 'too long'",
    ],
)
def test_scalar_route_declines_a_read_that_feeds_an_assert(check):
    """Traced, the assert becomes a runtime assert of the graph: a RuntimeError, not an AssertionError."""
    source = f"import torch\n\n\ndef check(lengths, slen):\n    {check}\n    return lengths\n\n\nif __name__ == \"__main__\":\n    check(torch.ones(2), 3)\n"
    assert at(source, CaptureScalarOutputs, needle="lengths.max().item()") is None
    spelled_as_a_statement = source.replace(check, "n = lengths.max().item()")
    assert at(spelled_as_a_statement, CaptureScalarOutputs, needle="lengths.max().item()") is not None


@pytest.mark.parametrize("recipe", [CaptureScalarOutputs, CaptureDynamicOutputShapeOps, AllowRnn, TraceAutogradOps])
def test_a_module_others_import_gets_no_process_wide_setting(recipe):
    # a library or model module: importing it would change every compiled function of the program
    source = SOURCE[: SOURCE.index('\n\nif __name__ == "__main__":')] + "\n"
    line = next(n for n, text in enumerate(source.splitlines(), 1) if ".item()" in text)
    col = source.splitlines()[line - 1].index("(labels")
    proposer = recipe()
    assert proposer.propose(site_context(source, line, col, col + len("(labels != -100).sum().item()"), "GB0124")) is None
    assert "process-wide" in proposer.declined and "where the program starts" in proposer.declined


ENTRY = '''\
import torch

from losses import token_loss

if __name__ == "__main__":
    print(token_loss(torch.randn(4, 3), torch.tensor([0, 1, 2, -100])))
'''


@pytest.mark.parametrize("recipe", [CaptureScalarOutputs, AllowRnn])
def test_a_setting_for_an_imported_module_goes_into_the_entry(recipe):
    """The site is in a module others import; the setting lands in the entry script, the module is untouched."""
    source = SOURCE[: SOURCE.index('\n\nif __name__ == "__main__":')] + "\n"
    ctx = site_context(source, *line_site(source, "(labels != -100).sum().item()"), "GB0124", path=Path("/virtual/losses.py"))
    entry = ParsedFile(SourceFile(Path("/virtual/run.py"), ENTRY.encode(), ENTRY, "utf-8"))
    rw = recipe().propose(replace(ctx, entry=entry))
    edit = rw.edit(1, ctx.site, recipe, ctx.file)
    assert edit.path == Path("/virtual/run.py") and edit.site.path == Path("/virtual/losses.py")
    after = edits.apply(entry, [edit]).decode()
    assert after.startswith(f"import torch\n\nfrom losses import token_loss\n\n# gbfix: {recipe.why};")
    assert f"\ntorch._dynamo.config.{recipe.option} = True\n" in after and after.count("import torch\n") == 1


FIXTURE = Path(__file__).parents[1] / "fixtures" / "setting_in_entry"


def test_breaks_in_an_imported_module_are_fixed_by_settings_in_the_entry(tmp_path):
    """Real runs: an LSTM and an ``.item()`` in pkg/model.py; both settings go into run.py, verified."""
    case = shutil.copytree(FIXTURE, tmp_path / "case").resolve()
    result = engine.fix([case], parse_entry("python run.py", case), engine.Options())
    applied = {o.edit.recipe: o.edit for o in result.outcomes if o.status == "applied"}
    assert set(applied) == {"allow-rnn", "capture-scalar-outputs"}
    assert {e.site.path.name for e in applied.values()} == {"model.py"}
    assert set(result.fixed) == {case / "run.py"}
    text = result.fixed[case / "run.py"].decode()
    assert "torch._dynamo.config.allow_rnn = True" in text and "torch._dynamo.config.capture_scalar_outputs = True" in text


def test_a_setting_is_not_blamed_for_a_break_gbfix_already_gave_up_on(tmp_path):
    """Round 1 finds the input check (no safe recipe, in checks.py) and the print in the loop;
    the `.item()` the loop hid shows in round 2, where its setting's trial still has the input
    check breaking: a known break, not one the setting made."""
    case = shutil.copytree(Path(__file__).parents[1] / "fixtures" / "setting_past_known_break", tmp_path / "case").resolve()
    result = engine.fix([case], parse_entry("python run.py", case), engine.Options())
    applied = sorted(o.edit.recipe for o in result.outcomes if o.status == "applied")
    assert applied == ["capture-scalar-outputs", "print-to-op"]
    assert case / "pkg" / "checks.py" not in result.fixed
    assert "torch._dynamo.config.capture_scalar_outputs = True" in result.fixed[case / "run.py"].decode()


def test_a_setting_that_leaves_a_breaking_line_breaking_otherwise_is_kept(tmp_path):
    """The setting removes both `.item()` breaks; line 10 still breaks, on its data-dependent
    test, which no longer counts as a break the setting made: that line broke before."""
    case = shutil.copytree(Path(__file__).parents[1] / "fixtures" / "setting_on_a_breaking_line", tmp_path / "case").resolve()
    result = engine.fix([case], parse_entry("python run.py", case), engine.Options())
    assert [o.edit.recipe for o in result.outcomes if o.status == "applied"] == ["capture-scalar-outputs"]
    fates = {(f.line, f.code): f.status for f in result.findings if f.path == case / "pkg" / "dense.py"}
    assert fates == {(8, "GB0124"): "fixed", (10, "GB0124"): "fixed", (10, "GB0170"): "unfixed"}
    assert result.remaining == 1
