"""MoE dispatch loops over the experts that received tokens (Mixtral, Qwen-MoE, ...):

    expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()
    for expert_idx in expert_hit.squeeze(-1).tolist():
        idx, top_x = torch.where(expert_mask[expert_idx])
        ...

`nonzero` has a data-dependent shape (GB0036) and `.tolist()` turns it into Python
ints (GB0033). Visiting every index of the mask instead,

    expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0)
    for expert_idx in range(expert_hit.shape[0]):

gives the same result when the loop body does nothing for an expert without
tokens (an empty selection, an expert run on zero rows, an `index_add_` of
nothing), which is how these loops are written. Unsafe: experts without tokens
now run on empty inputs, and their parameters get zero gradients instead of
None (weight decay and momentum then still move them). The selection inside
the body (`torch.where(mask)`) keeps its data-dependent shape; the config
route for GB0036 takes that site once this loop is gone.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from gbfix.recipes.base import Recipe, Replacement, SiteContext
from gbfix.recipes.tree import variables

# What may stand between `hit` and `.tolist()`: reshapes of the [n, 1] nonzero result.
_FLATTEN = (
    m.Call(func=m.Attribute(attr=m.Name("squeeze")), args=[m.Arg(value=m.Integer("1") | m.UnaryOperation(operator=m.Minus(), expression=m.Integer("1")))]),
    m.Call(func=m.Attribute(attr=m.Name("flatten")), args=[]),
    m.Call(func=m.Attribute(attr=m.Name("view") | m.Name("reshape")), args=[m.Arg(value=m.UnaryOperation(operator=m.Minus(), expression=m.Integer("1")))]),
)


def _nonzero_receiver(expr: cst.BaseExpression) -> cst.BaseExpression | None:
    """``x`` for ``x.nonzero()`` / ``torch.nonzero(x)`` (no other arguments)."""
    if not isinstance(expr, cst.Call):
        return None
    if m.matches(expr, m.Call(func=m.Attribute(attr=m.Name("nonzero")), args=[])):
        return expr.func.value
    if m.matches(expr, m.Call(func=m.Attribute(value=m.Name("torch"), attr=m.Name("nonzero")), args=[m.Arg(keyword=None, star="")])):
        return expr.args[0].value
    return None


def _indices(iterable: cst.BaseExpression) -> cst.BaseExpression | None:
    """``h`` for ``h.squeeze(-1).tolist()`` (or `.flatten()`, `.view(-1)`, none)."""
    if not m.matches(iterable, m.Call(func=m.Attribute(attr=m.Name("tolist")), args=[])):
        return None
    inner = iterable.func.value
    if any(m.matches(inner, pattern) for pattern in _FLATTEN):
        inner = inner.func.value
    return inner


def _range_over(mask: cst.BaseExpression) -> cst.Call:
    shape0 = cst.Subscript(cst.Attribute(mask, cst.Name("shape")), [cst.SubscriptElement(cst.Index(cst.Integer("0")))])
    return cst.Call(cst.Name("range"), [cst.Arg(shape0)])


class VisitAllExperts(Recipe):
    name = "visit-all-experts"
    codes = ("GB0036", "GB0033")
    safety = "unsafe"
    summary = "for i in mask.nonzero().squeeze(-1).tolist() -> for i in range(mask.shape[0]): every expert visited, none skipped"
    rule = "GB0036"

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        loop = ctx.enclosing(cst.For)
        stmt = ctx.enclosing(cst.SimpleStatementLine)
        if loop is not None and (stmt is None or ctx.file.span(stmt)[0] < ctx.file.span(loop)[0]):
            # The site is in the loop header (`.tolist()`, a fused `.nonzero()`).
            return self._plan_loop(ctx, loop)
        if stmt is not None:  # `hit = mask.nonzero()` before the loop
            return self._plan_assignment(ctx, stmt)
        return None

    def _plan_loop(self, ctx: SiteContext, loop: cst.For) -> cst.CSTNode | None:
        if loop.orelse is not None or loop.asynchronous is not None or not ctx.file.span(ctx.node)[0][0] == ctx.file.span(loop)[0][0]:
            return None
        inner = _indices(loop.iter)
        if inner is None:
            return None
        mask = _nonzero_receiver(inner)
        if mask is not None:  # fused: `for i in x.nonzero().squeeze(-1).tolist():`
            self._plan: dict[cst.CSTNode, cst.CSTNode] = {loop: loop.with_changes(iter=_range_over(mask))}
            return loop
        if not isinstance(inner, cst.Name):
            return None
        return self._with_assignment(ctx, loop, inner.value)

    def _plan_assignment(self, ctx: SiteContext, stmt: cst.SimpleStatementLine) -> cst.CSTNode | None:
        small = stmt.body[0]
        if len(stmt.body) != 1 or not m.matches(small, m.Assign(targets=[m.AssignTarget(target=m.Name())])):
            return None
        body = ctx.file.parent(stmt)
        siblings = list(getattr(body, "body", ()))
        at = next((i for i, s in enumerate(siblings) if s is stmt), None)
        if at is None or at + 1 >= len(siblings) or not isinstance(siblings[at + 1], cst.For):
            return None
        loop = siblings[at + 1]
        inner = _indices(loop.iter)
        if not (isinstance(inner, cst.Name) and inner.value == small.targets[0].target.value):
            return None
        return self._with_assignment(ctx, loop, inner.value)

    def _with_assignment(self, ctx: SiteContext, loop: cst.For, hit: str) -> cst.CSTNode | None:
        """`hit = x.nonzero()` right before the loop, `hit` read nowhere else."""
        body = ctx.file.parent(loop)
        siblings = list(getattr(body, "body", ()))
        at = next(i for i, s in enumerate(siblings) if s is loop)
        before = siblings[at - 1] if at > 0 else None
        if not (
            isinstance(before, cst.SimpleStatementLine)
            and len(before.body) == 1
            and m.matches(before.body[0], m.Assign(targets=[m.AssignTarget(target=m.Name(hit))]))
        ):
            return None
        mask = _nonzero_receiver(before.body[0].value)
        fn = ctx.enclosing(cst.FunctionDef, node=loop)
        if mask is None or fn is None:
            return None
        if sum(n.value == hit for n in variables(fn.body)) != 2:  # the assignment and the loop header
            return None
        new_before = before.with_changes(body=[before.body[0].with_changes(value=mask)])
        new_loop = loop.with_changes(iter=_range_over(cst.Name(hit)))
        self._plan = {before: new_before, loop: new_loop}
        return body

    def rewrite(self, node: cst.CSTNode) -> Replacement | None:
        plan = self._plan

        class _Swap(cst.CSTTransformer):
            def on_leave(self, original, updated):
                return plan.get(original, updated)

        return node.visit(_Swap())


RECIPES = (VisitAllExperts,)
