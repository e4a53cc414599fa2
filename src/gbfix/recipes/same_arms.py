"""GB0170 on a conditional whose arms give the same Python number: `a if t else b`.

k-diffusion's Euler step, copied into diffusers' Euler, Heun and other samplers, reads
``gamma = min(s_churn / (len(sigmas) - 1), 2**0.5 - 1) if s_tmin <= sigma <= s_tmax
else 0.0`` with ``sigma`` a 0-d tensor: a Python test on a tensor. With the default
``s_churn=0.0`` both arms are ``0.0``, so the test decides nothing. ``branch-same-arms``
routes the conditional through a module-level helper::

    g = A if lo <= s <= hi else 0.0
      ->  g = gbfix_if_same((lo, s, hi), lambda: lo <= s <= hi, lambda: A, lambda: 0.0)

which, when every operand of the test is a Python number or a one-element, non-complex
tensor (on one device), so that the test can neither raise nor change anything,
evaluates both arms and, when they give the same Python number (same type, equal, same
sign of zero), returns it without asking the test. Otherwise (an arm raises, the arms
differ, another operand) it runs ``A if test else B`` as written, in the original's
order (and breaks as before).

Taken: the test is comparisons (chained or not, no ``is``/``in``) joined by ``and``,
``or`` and ``not``; one arm is a number literal; in a conditional expression anywhere
or as ``if t: x = a else: x = b``. Declined: impure operands or arms (the helper
evaluates both arms, and the operands once more where it falls back), a class body
(a lambda there does not see the class's names).
"""

from __future__ import annotations

import libcst as cst

from gbfix.generated import piece
from gbfix.recipes.analysis import COMPARISONS, pure, taken
from gbfix.recipes.base import Decline, Recipe, SiteContext
from gbfix.recipes.branch import _bare, fit, single, statement
from gbfix.recipes.guarded_index import assigned_arms, conditional

HELPER = piece("gbfix_if_same", '''\
def gbfix_if_same(operands, test, then, other):
    # Added by gbfix: `then() if test() else other()`, where `test` compares the
    # values in `operands`. When they are Python numbers and one-element tensors
    # (so the test can neither raise nor change anything) and both arms give the
    # same Python number, that number, without a Python test on a tensor.
    # Otherwise it runs as written.
    tensors = [x for x in operands if isinstance(x, torch.Tensor)]
    if (
        all(isinstance(x, (int, float)) or isinstance(x, torch.Tensor) for x in operands)
        and all(x.numel() == 1 and not x.is_complex() and x.device == tensors[0].device for x in tensors)
    ):
        try:
            a, b = then(), other()
        except Exception:
            return then() if test() else other()
        if type(a) is type(b) and type(a) in (int, float, bool) and a == b and math.copysign(1, a) == math.copysign(1, b):
            return b
    return then() if test() else other()
''', imports=(("math", None), ("torch", None)))



def _operands(test: cst.BaseExpression) -> list[cst.BaseExpression] | None:
    """The values the test compares, in order, or None when it is not comparisons
    joined by `and`, `or`, `not`."""
    if isinstance(test, cst.BooleanOperation):
        left, right = _operands(test.left), _operands(test.right)
        return None if left is None or right is None else left + right
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return _operands(test.expression)
    if isinstance(test, cst.Comparison) and all(isinstance(c.operator, COMPARISONS) for c in test.comparisons):
        values = [test.left, *(c.comparator for c in test.comparisons)]
        return None if any(isinstance(v, (cst.Comparison, cst.BooleanOperation)) for v in values) else values
    return None


def _number(expr: cst.BaseExpression) -> bool:
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, (cst.Minus, cst.Plus)):
        return _number(expr.expression)
    return isinstance(expr, (cst.Integer, cst.Float))


def _lambda(expr: cst.BaseExpression) -> cst.Lambda:
    return cst.Lambda(params=cst.Parameters(), body=_bare(expr), colon=cst.Colon(whitespace_after=cst.SimpleWhitespace(" ")))


class BranchSameArms(Recipe):
    name = "branch-same-arms"
    codes = ("GB0170",)
    safety = "safe"
    rule = "GB0170"
    summary = "`a if t else b` whose arms give the same Python number -> a helper that does not ask the tensor test then"

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        node = conditional(ctx)
        if node is None:
            return None
        arms = (node.body, node.orelse) if isinstance(node, cst.IfExp) else assigned_arms(ctx, node)
        if arms is None:
            return None
        values = _operands(_bare(node.test))
        if values is None:
            return None
        if not any(_number(a) for a in arms):
            raise Decline("neither arm is a number literal: arms that are tensors would still need the test")
        if all(_number(a) for a in arms) and not _bare(arms[0]).deep_equals(_bare(arms[1])):
            raise Decline("the arms are two different numbers: the test decides between them")
        if not all(pure(e) for e in (*values, *arms)):
            raise Decline("an arm or an operand of the test may have effects: the helper evaluates both arms")
        if isinstance(ctx.enclosing(cst.FunctionDef, cst.Lambda, cst.ClassDef, node=node), cst.ClassDef):
            raise Decline("in a class body: a lambda there does not see the class's names")
        if taken(ctx, HELPER.name):
            raise Decline(f"the module binds {HELPER.name} to something else")
        operands = cst.Tuple([cst.Element(_bare(v)) for v in values]) if len(values) > 1 else cst.Tuple(
            [cst.Element(_bare(values[0]), comma=cst.Comma())]
        )
        self._call = cst.Call(
            cst.Name(HELPER.name), [cst.Arg(operands), *(cst.Arg(_lambda(e)) for e in (node.test, *arms))]
        )
        up = ctx.file.parent(node)
        return up if isinstance(up, cst.Assign) and up.value is node else node  # a statement: laid out to fit

    def rewrite(self, node: cst.CSTNode) -> cst.CSTNode:
        self.need_helper(HELPER.name, HELPER.code)
        if isinstance(node, cst.IfExp):
            return self._call  # a call needs no parentheses of its own, and inside its own a line may break
        column = self.ctx.file.span(node)[0][1]
        if isinstance(node, cst.Assign):
            return fit(node.with_changes(value=self._call), column)
        return statement(fit(single(node.body).with_changes(value=self._call), column), node)


RECIPES = (BranchSameArms,)
