"""The shared analysis recipes ask about code: effects, bindings, tensor use."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from gbfix.locate import Locator
from gbfix.recipes.analysis import (
    global_bindings,
    is_torch_call,
    mutated,
    pure,
    single_binding,
    target_names,
    tensor_evidence,
)
from gbfix.recipes.base import SiteContext
from gbfix.records import Break, Cause, Frame
from gbfix.sources import read


def expr(code: str) -> cst.BaseExpression:
    return cst.parse_expression(code)


def function(code: str) -> cst.FunctionDef:
    fn = cst.parse_module(textwrap.dedent(code)).body[0]
    assert isinstance(fn, cst.FunctionDef)
    return fn


@pytest.mark.parametrize(
    "code",
    ["x * 2 + y", "torch.where(m, a, b)", "x.sum(dim=1).abs()", "len(xs) - 1", "max(a, b)", "a[i]", 'float("-inf")', "int(-3)"],
)
def test_pure(code):
    assert pure(expr(code))


@pytest.mark.parametrize(
    "code",
    [
        "torch.randn(3)",  # randomness
        "x.item()",  # a host sync
        "x.add_(1)",  # in place
        "self.layer(x)",  # a body out of sight
        "torch.add(a, b, out=c)",
        "print(x)",
        "(y := x + 1)",
        "[v for v in xs]",
        "open(path)",  # a builtin not known to be pure
        "float(x)",  # of anything but a literal: a tensor's value (a sync), or any __float__
        "F.dropout(x, 0.1)",  # random, spelled through torch.nn.functional's usual name
    ],
)
def test_impure(code):
    assert not pure(expr(code))


@pytest.mark.parametrize(
    "code, torch_call",
    [
        ("torch.softmax(x, -1)", True),
        ("torch.nn.functional.softmax(x, -1)", True),
        ("F.cross_entropy(a, b)", True),
        ("nn.functional.pad(x, (1, 1))", True),
        ("torch.linalg.norm(x)", True),
        ("x.softmax(-1)", False),
        ("np.sum(x)", False),
        ("torchvision.ops.nms(b, s, 0.5)", False),
    ],
)
def test_is_torch_call_knows_the_usual_spellings(code, torch_call):
    call = expr(code)
    assert isinstance(call, cst.Call) and is_torch_call(call) == torch_call


def test_mutated_sees_in_place_updates_through_access_chains():
    fn = function(
        """
        def f(x, y, z, w):
            x[0] = 1
            y.weight.data.mul_(2)
            torch.add(z, 1, out=w)
            return x
        """
    )
    assert mutated(fn, "x") and mutated(fn, "y") and mutated(fn, "w")
    assert not mutated(fn, "z")


def test_augmented_assignment_counts_only_when_asked():
    fn = function(
        """
        def f(x):
            x += 1
            return x
        """
    )
    assert mutated(fn, "x")
    assert not mutated(fn, "x", augmented=False)


def test_single_binding_is_the_only_assignment():
    fn = function(
        """
        def f(a):
            lcm = math.lcm(a, 4)
            s = 1
            s = 2
            for k in range(3):
                pass
            return lcm, s, k
        """
    )
    assert cst.Module([]).code_for_node(single_binding(fn, "lcm")) == "math.lcm(a, 4)"
    assert single_binding(fn, "s") is None  # assigned twice
    assert single_binding(fn, "k") is None  # a loop target
    assert single_binding(fn, "a") is None  # a parameter


def test_target_names_unpacks():
    target = cst.parse_statement("a, (b, *c), d.e = v").body[0].targets[0].target
    assert list(target_names(target)) == ["a", "b", "c"]


def test_tensor_evidence_needs_a_tensor_use_not_arithmetic():
    fn = function(
        """
        def f(x, n, m):
            y = x.softmax(-1) * n
            return torch.where(m, y, 0)
        """
    )
    assert tensor_evidence("x", fn)  # a tensor method
    assert tensor_evidence("m", fn)  # torch.f(m, ...)
    assert not tensor_evidence("n", fn)  # arithmetic fits a Python number too


def test_global_bindings_of_a_builtin_is_empty_not_a_crash(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("def helper(x):\n    return len(x)\n\n\nprint(helper([1]))\n")
    source = read(path)
    locator = Locator({source.path: source})
    brk = Break((Cause("GB0059", "GB0059", ""),), (Frame(str(source.path), 5, 0, 5, "<module>"),))
    site = locator.site(brk)
    ctx = SiteContext(site, locator.node(site), locator.parsed(source.path), frozenset())
    assert global_bindings(ctx, "len") == [] and global_bindings(ctx, "print") == []
    (fn,) = global_bindings(ctx, "helper")
    assert isinstance(fn, cst.FunctionDef) and fn.name.value == "helper"


def test_the_vocabulary_names_only_real_tensor_calls():
    """Each family of calls the recipes share names Tensor methods or torch functions (a typo
    would silently make a recipe decline, or accept, the wrong calls), and behaves as its
    family says on a tensor."""
    import torch

    from gbfix.recipes import vocabulary as v

    families = {n: getattr(v, n) for n in ("ALIASING", "SHAPE_VIEWS", "CASTS", "PREDICATES", "FULL_REDUCTIONS", "TUPLE_WITH_DIM", "ELEMENTWISE")}
    unknown = {n: sorted(c for c in f if not hasattr(torch.Tensor, c) and not hasattr(torch, c)) for n, f in families.items()}
    assert not any(unknown.values()), unknown
    assert v.SHAPE_VIEWS <= v.ALIASING  # a view shares memory
    x = torch.ones(2, 3)
    assert {r for r in v.FULL_REDUCTIONS if getattr(x, r)().dim() != 0} == set()
    binary = v.PREDICATES - {"isnan", "isinf", "isfinite", "isneginf", "isposinf", "isreal", "logical_not"}
    assert {p for p in binary if getattr(x, p)(x).dtype != torch.bool} == set()
    assert {c for c in v.ELEMENTWISE if c not in {"clamp", "clip", "clamp_min", "clamp_max", "pow", "mul", "div", "add", "sub", "masked_fill"} and getattr(x, c)().data_ptr() == x.data_ptr()} == set()  # they allocate



def test_closure_owner_of_a_builtin_is_none():
    # a builtin read in a nested function has no binding node (LibCST's BuiltinAssignment)
    from gbfix.recipes.analysis import closure_owner
    from gbfix.recipes.tree import variables
    from tests.helpers import site_context

    source = "def outer(n):\n    def inner(x):\n        return int(x) + n\n    return inner\n"
    ctx = site_context(source, 3, 15, 18, "GB0124")
    reads = {n.value: n for n in variables(ctx.module)}  # the last occurrence of each: the reads in `inner`
    assert closure_owner(ctx, reads["int"]) is None
    owner = closure_owner(ctx, reads["n"])
    assert owner is not None and owner.name.value == "outer"


@pytest.mark.parametrize(
    "code, expected",
    [
        ("torch.empty(0, 2)", True),
        ("x.new_empty((0, 4))", True),
        ("torch.empty(0, dtype=torch.long)", True),
        ("torch.empty(n, 2)", False),  # uninitialized values
        ("torch.empty_like(x)", False),
        ("torch.zeros(0, 2)", True),
    ],
)
def test_an_empty_tensor_with_no_elements_is_pure(code, expected):
    assert pure(cst.parse_expression(code)) is expected
