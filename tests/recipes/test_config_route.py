"""Config routes, applied statically: where the assignment goes, what it imports, when they decline."""

from __future__ import annotations

import textwrap

import pytest

from gbfix.recipes.config_route import AllowRnn, CaptureDynamicOutputShapeOps, CaptureScalarOutputs, TraceAutogradOps
from tests.helpers import ALL_CAPABILITIES, rewrite_at, site_context

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
