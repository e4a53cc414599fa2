"""The shared analysis recipes ask about code: effects, bindings, tensor use."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from gbfix.recipes.analysis import mutated, pure, single_binding, target_names, tensor_evidence


def expr(code: str) -> cst.BaseExpression:
    return cst.parse_expression(code)


def function(code: str) -> cst.FunctionDef:
    fn = cst.parse_module(textwrap.dedent(code)).body[0]
    assert isinstance(fn, cst.FunctionDef)
    return fn


@pytest.mark.parametrize(
    "code",
    ["x * 2 + y", "torch.where(m, a, b)", "x.sum(dim=1).abs()", "len(xs) - 1", "max(a, b)", "a[i]"],
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
    ],
)
def test_impure(code):
    assert not pure(expr(code))


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
