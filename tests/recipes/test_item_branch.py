"""item-then-where: a scalar read whose value an `if` tests, as item-to-tensor and
branch-to-where in one edit of the function."""

from __future__ import annotations

import textwrap

import pytest

from gbfix.recipes.item_branch import ItemThenWhere
from tests.helpers import at

CASES = {
    "a named read, used again after the if": (
        """
        def f(h, w):
            x = h @ w
            peak = x.abs().max().item()
            if peak > 1e4:
                x = x.clamp(-1e4, 1e4)
            return x * peak
        """,
        "x.abs().max().item()",
        """
        def f(h, w):
            x = h @ w
            peak = x.abs().max().detach().double()
            x = torch.where(peak > 1e4, x.clamp(-1e4, 1e4), x)
            return x * peak
        """,
    ),
    "inline in the test": (
        """
        def f(h, w):
            x = h @ w
            if x.abs().max().item() > 1e4:
                x = x.clamp(-1e4, 1e4)
            return x
        """,
        "x.abs().max().item()",
        """
        def f(h, w):
            x = h @ w
            x = torch.where(x.abs().max().detach().double() > 1e4, x.clamp(-1e4, 1e4), x)
            return x
        """,
    ),
    "a method: a static part and an elif": (
        """
        class Router(torch.nn.Module):
            def forward(self, x):
                norm = x.norm().item()
                if self.training and norm > 0.1:
                    x = x * 0.5
                elif norm < 1e-3:
                    x = x + 1
                return x
        """,
        "x.norm().item()",
        """
        class Router(torch.nn.Module):
            def forward(self, x):
                norm = x.norm().detach().double()
                if self.training:
                    x = torch.where(norm > 0.1, x * 0.5, torch.where(norm < 1e-3, x + 1, x))
                else:
                    x = torch.where(norm < 1e-3, x + 1, x)
                return x
        """,
    ),
    "two ifs test the value": (
        """
        def f(h, w):
            x = h @ w
            spread = x.std().item()
            if spread < 1e-6:
                x = x + 1e-3
            y = x.abs()
            if spread > 10.0:
                y = y.clamp_max(10.0)
            return y
        """,
        "x.std().item()",
        """
        def f(h, w):
            x = h @ w
            spread = x.std().detach().double()
            x = torch.where(spread < 1e-6, x + 1e-3, x)
            y = x.abs()
            y = torch.where(spread > 10.0, y.clamp_max(10.0), y)
            return y
        """,
    ),
}


def _src(text: str) -> str:
    return "import torch\n\n\n" + textwrap.dedent(text).lstrip("\n")


@pytest.mark.parametrize("case", CASES)
def test_item_then_where(case):
    before, needle, after = CASES[case]
    assert at(_src(before), needle, ItemThenWhere, "GB0124") == _src(after)


DECLINES = {
    "an effect in the arm": (
        """
        def f(h, w):
            x = h @ w
            peak = x.abs().max().item()
            if peak > 1e4:
                print("clamping")
                x = x.clamp(-1e4, 1e4)
            return x
        """,
        "x.abs().max().item()",
    ),
    "another use item-to-tensor declines": (
        """
        def f(h, w):
            x = h @ w
            peak = x.abs().max().item()
            if peak > 1e4:
                x = x.clamp(-1e4, 1e4)
            return x, f"peak {peak}"
        """,
        "x.abs().max().item()",
    ),
    "an integer count": (
        """
        def f(h, w):
            x = h @ w
            n = (x > 0).sum().item()
            if n > 3:
                x = x * 2.0
            return x
        """,
        "(x > 0).sum().item()",
    ),
    "no if tests it: item-to-tensor's case": (
        """
        def f(h, w):
            x = h @ w
            peak = x.abs().max().item()
            return x * peak
        """,
        "x.abs().max().item()",
    ),
}


@pytest.mark.parametrize("case", DECLINES)
def test_item_then_where_declines(case):
    before, needle = DECLINES[case]
    assert at(_src(before), needle, ItemThenWhere, "GB0124") is None


def test_a_division_by_the_value_divides_by_one_where_the_test_is_false():
    """`x / peak` on the arm torch.where drops would divide by whatever peak holds there
    (a zero gradient times 1/0 is NaN): the divisor is selected instead, and the select
    is the checked one (an integer x divided by 1 would become a float)."""
    import libcst as cst

    from gbfix.recipes.branch import WHERE
    from gbfix.recipes.layout import add_helpers

    before = """
        def f(h, w):
            x = h @ w
            peak = x.abs().max().item()
            if peak > 3.0:
                x = x / peak
            return x
        """
    after = """
        def f(h, w):
            x = h @ w
            peak = x.abs().max().detach().double()
            pred = peak > 3.0
            x = gbfix_where(pred, x / torch.where(pred, peak, 1), x)
            return x
        """
    expected = add_helpers(cst.parse_module(_src(after)), {WHERE.name: WHERE.code}).code
    assert at(_src(before), "x.abs().max().item()", ItemThenWhere, "GB0124") == expected
