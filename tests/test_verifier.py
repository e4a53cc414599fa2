"""The verifier rejects rewrites that change behaviour, with real torch runs.

The recipes here are deliberately naive stand-ins for a buggy recipe: they
propose rewrites that remove the break but change what the program does.
"""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from gbfix import engine, recipes
from gbfix.entry import parse
from gbfix.recipes.base import Recipe

# The module-scoped probe runs once: keep this file on one xdist worker.
pytestmark = pytest.mark.xdist_group("test_verifier")

PROGRAM = textwrap.dedent(
    """
    import torch

    hits = []


    @torch.compile(backend="eager")
    def step(x, w):
        print("stepping")
        if x.sum() > 0:
            hits.append(1)
            x = x * 2
        return x * w.max().item()


    if __name__ == "__main__":
        for i in range(2):
            out = step(torch.arange(3.0) - i, torch.tensor([1.5, 2.0]))
        print("out", out.tolist(), "hits", len(hits))
    """
)


class DropPrint(Recipe):
    """Loses the printed line."""

    name, codes, safety, summary, rule = "test-drop-print", ("GB0059",), "safe", "drop print", "GB0059"

    def anchor(self, ctx):
        return ctx.enclosing(cst.SimpleStatementLine)

    def rewrite(self, node):
        return cst.RemoveFromParent()


class WhereDroppingSideEffect(Recipe):
    """Turns the if into a select and forgets the side effect in the arm."""

    name, codes, safety, summary, rule = "test-where", ("GB0170",), "safe", "if -> where", "GB0170"

    def anchor(self, ctx):
        return ctx.enclosing(cst.If)

    def rewrite(self, node):
        return cst.parse_statement("x = torch.where(x.sum() > 0, x * 2, x)\n")


class KeepTensor(Recipe):
    """Drops .item(): correct here, so the verifier must keep it."""

    name, codes, safety, summary, rule = "test-keep-tensor", ("GB0124",), "safe", "drop .item()", "GB0124"

    def anchor(self, ctx):
        call = ctx.enclosing(cst.Call)
        return call if call and isinstance(call.func, cst.Attribute) and call.func.attr.value == "item" else None

    def rewrite(self, node):
        return node.func.value


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    root = tmp_path_factory.mktemp("verifier")
    (root / "prog.py").write_text(PROGRAM)
    saved = recipes.all_recipes
    recipes.all_recipes = lambda: (DropPrint, WhereDroppingSideEffect, KeepTensor)
    try:
        yield engine.fix([root / "prog.py"], parse("python prog.py", root)), root
    finally:
        recipes.all_recipes = saved


def outcome(result, recipe):
    [o] = [o for o in result.outcomes if o.edit.recipe == recipe]
    return o


def test_lost_print_is_rejected(result):
    res, _ = result
    o = outcome(res, "test-drop-print")
    assert o.status == "rejected:output-mismatch"
    assert "stdout differs" in o.detail


def test_arm_side_effect_is_rejected(result):
    res, _ = result
    o = outcome(res, "test-where")
    assert o.status == "rejected:output-mismatch"
    assert o.detail.endswith("'out [-2.0, 0.0, 2.0] hits 1' became 'out [-2.0, 0.0, 2.0] hits 0'")


def test_behaviour_preserving_edit_is_kept_alone(result):
    res, root = result
    assert outcome(res, "test-keep-tensor").status == "applied"
    new = res.fixed[(root / "prog.py").resolve()].decode()
    assert "return x * w.max()\n" in new
    assert 'print("stepping")' in new and "hits.append(1)" in new
    statuses = {f.code: f.status for f in res.findings}
    assert statuses == {"GB0059": "unfixed", "GB0170": "unfixed", "GB0124": "fixed"}
