"""The escape hatch reported with a break gbfix leaves in place."""

from __future__ import annotations

from pathlib import Path

import pytest

from gbfix import engine
from gbfix.entry import parse as parse_entry
from gbfix.escape import hatch
from gbfix.records import Cause


def test_gbfix_advice_for_the_common_codes():
    assert hatch(Cause("GB0124", "Unsupported Tensor.item() call", "")).startswith("read the number outside")


def test_dynamos_hint_from_the_raised_message_comes_first():
    cause = Cause("GB0142", "Unsupported context manager", "", ("Use a nullcontext here.",))
    assert hatch(cause) == "use a nullcontext here."


def test_registry_hints_split_into_sentences_and_unhelpful_ones_skipped():
    # GB0014's registry hints: "Set ...allow_rnn=True ..." then "It may be possible to write Dynamo tracing rules..."
    assert hatch(Cause("GB0014", "Attempted to wrap RNN, GRU, or LSTM", "")).startswith(
        "set torch._dynamo.config.allow_rnn=True"
    )


def test_line_wrapped_registry_hints_are_joined():
    text = hatch(Cause("GB0246", "one_hot", ""))
    assert text.startswith("explicitly set the `num_classes` param of the function call")


def test_data_dependent_expression_without_a_code():
    assert "torch._check" in hatch(Cause(None, "Data-dependent expression", ""))


def test_a_number_read_from_a_tensor_is_not_called_a_list():
    # GB0033 is `.tolist()` as well as float(t) and math.sqrt(t)
    text = hatch(Cause("GB0033", "Data dependent operator", ""))
    assert "list in" not in text and "math.*" in text


def test_last_resort_names_the_cost():
    text = hatch(Cause(None, "SomethingNew", ""))
    assert "torch.compiler.disable" in text and "GB0098" in text


LIBRARY = """\
import torch

STEPS = 0


def log_step(x):
    global STEPS  # a global the function rebinds: library-patch does not copy it
    STEPS += 1
    torch._dynamo.graph_break()  # the library author's own
    return x
"""

PROGRAM = """\
import torch

from steplib import log_step


@torch.compile(backend="eager")
def step(x):
    y = x.sin()
    y = log_step(y)
    return y.cos()


for _ in range(2):
    print(step(torch.ones(3)).sum().item())
"""


def test_a_break_inside_a_library_call_says_where_it_is(tmp_path: Path):
    # the graph_break() sits in a module gbfix may not edit: the advice is for the user's
    # call, not "remove the graph_break() call" (which the user's line does not hold)
    (tmp_path / "steplib.py").write_text(LIBRARY)
    (tmp_path / "train.py").write_text(PROGRAM)
    result = engine.fix([tmp_path / "train.py"], parse_entry("python train.py", tmp_path), engine.Options())
    (left,) = [f for f in result.findings if f.code == "GB0025"]
    assert left.line == 9 and left.status == "unfixed"
    assert "by hand: the graph_break() is in steplib.py:9, which this line calls: move the call out of the compiled function" in left.detail


def test_a_builtin_dynamo_replaces_with_a_polyfill_is_the_lines_own(tmp_path: Path):
    # `any(...)` runs as Dynamo's polyfill: the branch is the user's line, not code it calls
    (tmp_path / "prog.py").write_text(
        "import torch\n\n\n@torch.compile(backend=\"eager\")\ndef f(xs, t):\n"
        "    if any(v > t for v in xs):\n        return xs[0] * 2\n    return xs[0]\n\n\n"
        "for _ in range(2):\n    print(f([torch.tensor(1.0), torch.tensor(3.0)], 2.0))\n"
    )
    result = engine.fix([tmp_path / "prog.py"], parse_entry("python prog.py", tmp_path), engine.Options())
    (branch,) = [f for f in result.findings if f.code == "GB0170"]
    assert "by hand: any() tests each tensor with a Python `if`" in branch.detail and "polyfills" not in branch.detail, branch.detail
    assert "`torch.stack([v > t for v in xs]).any()`" in branch.detail


REDUCTIONS = """\
import torch


@torch.compile(backend="eager")
def first(xs, t):
    if any(v > t for v in xs):
        print("big")
    if not all(v.isfinite() for v in xs):
        print("not finite")
    return xs[0] * 2


@torch.compile(backend="eager")
def second(scores):
    ok = all([s < 1.0 for s in scores.values()])
    return scores["a"] * 2 if ok else scores["a"]


@torch.compile(backend="eager")
def third(xs):
    flags = [x.sum() > 0 for x in xs]
    if any(flags):
        print("some positive")
    return xs[1] + 1


xs = [torch.tensor(1.0), torch.tensor(3.0)]
for _ in range(2):
    first(xs, 2.0)
    second({"a": torch.tensor(0.5), "b": torch.tensor(2.0)})
    third(xs)
"""


@pytest.fixture(scope="module")
def reductions(tmp_path_factory) -> dict[tuple[int, str], str]:
    folder = tmp_path_factory.mktemp("reductions")
    (folder / "prog.py").write_text(REDUCTIONS)
    result = engine.fix([folder / "prog.py"], parse_entry("python prog.py", folder), engine.Options())
    return {(f.line, f.code): f.detail for f in result.findings if f.status != "fixed"}


@pytest.mark.parametrize(
    "line, code, original, rewrite",
    [
        # Dynamo's any() branches on each item and gives up on the function (GB0170 in its polyfill)
        (6, "GB0170", None, "torch.stack([v > t for v in xs]).any()"),
        # the rest of that function then runs eagerly: the generator is offered to Dynamo alone
        (8, "GB0003", "all(v.isfinite() for v in xs)", "torch.stack([v.isfinite() for v in xs]).all()"),
        # a list comprehension, not branched on where it is built
        (15, "GB0170", None, "torch.stack([s < 1.0 for s in scores.values()]).all()"),
    ],
)
def test_any_or_all_over_tensors_advises_the_torch_reduction(reductions, line, code, original, rewrite):
    detail = reductions[(line, code)]
    assert f"`{rewrite}` (the same truth value when each item is a 0-dim tensor, all on one device, and there is at least one" in detail
    if original is None:
        assert "tests each tensor with a Python `if`, where Dynamo gives up on the whole function" in detail
    else:
        assert f"ran eagerly (its function fell back to eager at a break reported before this one): fix that break. `{original}` over tensors" in detail


def test_any_of_a_name_advises_the_reduction_without_quoting(reductions):
    # the items are not written at the call: the advice names the shape of the rewrite only
    assert "`torch.stack([<item> for ...]).any()`" in reductions[(22, "GB0170")]
