"""GB0170 on a lookup guarded by a test of its index: `A[i] if i >= 0 else B`.

Diffusion schedulers read a table at the previous timestep, a 0-d tensor, with a
default past its end (`self.alphas_cumprod[prev_t] if prev_t >= 0 else self.one`).
`torch.where(i >= 0, A[i], B)` is not the same program: it reads `A[i]` for every
`i`, a negative one included, and broadcasts and promotes `A[i]` against `B`. So
``guarded-index`` routes the lookup through a module-level helper::

    x = A[i] if i >= 0 else B    ->    x = gbfix_index_or(i >= 0, A, i, B)

which, for what Dynamo knows while tracing (a non-empty 1-d table, one integer
index, a default tensor of the index's shape and the table's dtype and device),
returns `torch.where(ok, A[j], B)` with `j` the index where the test holds and 0
where it fails, so the unselected read is in range (read through table-take's op,
so an index past the end raises IndexError as the original does, also under
inductor); the value, dtype, shape and device are those of the arm the test picks. Anything else runs as written (and
breaks as before). Also taken: the arms swapped (`B if i < 0 else A[i]`, the test
negated with `torch.logical_not`), an upper bound (`i < len(A)`), both bounds
(`0 <= i < len(A)` or an `and`, as `&` of the comparisons: their truth is the
same for one-element tensors), a test of what the index is made of
(`A[i + 1] if i < n - 1 else B`), and `if test: x = A[i] else: x = B`. The index
may be any pure expression (`t - step`): it is evaluated twice, as the original does.

Declined: a default that is a Python number (the graph form would make it a
tensor), impure parts (the rewrite evaluates the table, the index and the default
whatever the test says), and a result that is not only read (the original hands
out a view of the table or the default itself; the helper a new tensor). The
unselected arm gets a zero gradient.
"""

from __future__ import annotations

from typing import cast

import libcst as cst
import libcst.matchers as m
from libcst.metadata.scope_provider import FunctionScope

from gbfix import generated
from gbfix.generated import piece
from gbfix.recipes.analysis import (
    COMPARISONS,
    changed_in_place,
    mutated,
    only_read,
    pure,
    scope_of,
    taken,
)
from gbfix.recipes.base import Decline, Recipe, SiteContext
from gbfix.recipes.branch import fit, make_call, single, statement
from gbfix.recipes.table_lookup import TAKE_OP
from gbfix.recipes.tree import variable_names, walk

HELPER = piece("gbfix_index_or", '''\
def gbfix_index_or(ok, table, index, default):
    # Added by gbfix: `table[index] if ok else default`, where `ok` tests `index`.
    # When Dynamo can tell while tracing that torch.where gives the same tensor (a
    # non-empty 1-d table, one integer index, a default of the index's shape and the
    # table's dtype and device), it is that, with no Python test on a tensor: the
    # index is read where `ok` holds and replaced by 0 where it does not (through
    # the take op, which raises IndexError past the end as the read does; with a
    # gathered read where the table needs a gradient). Otherwise it runs as written.
    tensors = all(isinstance(x, torch.Tensor) for x in (ok, table, index, default))
    if (
        tensors and ok.dtype == torch.bool and index.dtype in (torch.int64, torch.int32)
        and table.dim() == 1 and table.shape[0] > 0 and index.numel() == 1
        and ok.shape == index.shape == default.shape and default.dtype == table.dtype
        and ok.device == index.device == table.device == default.device
    ):
        inside = torch.where(ok, index, 0)
        if table.requires_grad and torch.is_grad_enabled():
            # a 1-d index: a 0-d one would be read as a Python int, a break of its own
            picked = table[inside.reshape(1)]
        else:  # the read as written, so an index past the end raises IndexError
            picked = _gbfix_take_op(table, inside.reshape(()))
        return torch.where(ok, picked.reshape(index.shape), default)
    return table[index] if ok else default
''', needs=(TAKE_OP.name,))



def _lookup(expr: cst.BaseExpression) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
    """(A, i) of `A[i]`: one index, no slice."""
    if not isinstance(expr, cst.Subscript) or len(expr.slice) != 1:
        return None
    index = expr.slice[0].slice
    if not isinstance(index, cst.Index) or index.star is not None:
        return None
    return expr.value, index.value


def _same(a: cst.BaseExpression, b: cst.BaseExpression) -> bool:
    return a.with_changes(lpar=[], rpar=[]).deep_equals(b.with_changes(lpar=[], rpar=[]))


def _about(expr: cst.BaseExpression, index: cst.BaseExpression) -> bool:
    """``expr`` is the index or reads a variable it reads (`i` for `A[i + 1]`)."""
    return _same(expr, index) or bool((variable_names(expr) & variable_names(index)) - {"self"})


def _comparisons(test: cst.BaseExpression) -> list[cst.Comparison] | None:
    """The test as one-operator comparisons: itself, a chain's links or an `and`'s operands."""
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        left, right = _comparisons(test.left), _comparisons(test.right)
        return None if left is None or right is None else left + right
    if not isinstance(test, cst.Comparison) or not all(isinstance(c.operator, COMPARISONS) for c in test.comparisons):
        return None
    out: list[cst.Comparison] = []
    prev = test.left
    for c in test.comparisons:
        out.append(cst.Comparison(left=prev, comparisons=[c]))
        prev = c.comparator
    return out


def _bound(expr: cst.BaseExpression, table: cst.BaseExpression) -> bool:
    """A bound that is cheap and total to read: a number, a name, `len(A)`, `A.shape[0]`,
    `A.size(0)` (an `and` reads it even where the original stopped before it)."""
    expr = expr.with_changes(lpar=[], rpar=[])
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        expr = expr.expression
    if isinstance(expr, (cst.Integer, cst.Name)):
        return True
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, (cst.Add, cst.Subtract)):
        return _bound(expr.left, table) and _bound(expr.right, table)
    size = m.Call(func=m.Name("len"), args=[m.Arg(keyword=None)]) | m.Call(
        func=m.Attribute(attr=m.Name("size")), args=[m.Arg(m.Integer("0"), keyword=None)]
    )
    if m.matches(expr, size):
        of = expr.args[0].value if isinstance(expr.func, cst.Name) else expr.func.value
        return _same(of, table)
    if m.matches(expr, m.Subscript(value=m.Attribute(attr=m.Name("shape")), slice=[m.SubscriptElement(m.Index(m.Integer("0")))])):
        return _same(expr.value.value, table)
    return False


def _guard(test: cst.BaseExpression, table: cst.BaseExpression, index: cst.BaseExpression) -> cst.BaseExpression | None:
    """The test as one tensor expression when it compares the index (several
    comparisons joined with `&`), or None."""
    parts = _comparisons(test.with_changes(lpar=[], rpar=[]))
    if not parts or not any(_about(side, index) for c in parts for side in (c.left, c.comparisons[0].comparator)):
        return None
    if len(parts) == 1:
        return parts[0]
    for c in parts[1:]:  # read even where the original's chain stopped early
        if not all(_same(side, index) or _bound(side, table) for side in (c.left, c.comparisons[0].comparator)):
            return None
    paren = [cst.LeftParen()], [cst.RightParen()]
    out: cst.BaseExpression = parts[0].with_changes(lpar=paren[0], rpar=paren[1])
    for c in parts[1:]:
        out = cst.BinaryOperation(left=out, operator=cst.BitAnd(), right=c.with_changes(lpar=paren[0], rpar=paren[1]))
    return out


def _number(expr: cst.BaseExpression) -> bool:
    if isinstance(expr, cst.UnaryOperation):
        return _number(expr.expression)
    return isinstance(expr, (cst.Integer, cst.Float, cst.Imaginary)) or (
        isinstance(expr, cst.Name) and expr.value in ("None", "True", "False")
    )


def conditional(ctx: SiteContext) -> cst.If | cst.IfExp | None:
    """The `if` or conditional expression whose test the break is in (or that the
    reported statement holds)."""
    node = ctx.node
    if isinstance(node, (cst.SimpleStatementLine, cst.Assign)):
        assign = single(node) if isinstance(node, cst.SimpleStatementLine) else node
        return assign.value if isinstance(assign, cst.Assign) and isinstance(assign.value, cst.IfExp) else None
    for anc in (node, *ctx.ancestors()):
        if isinstance(anc, (cst.If, cst.IfExp)):
            return anc if anc is node or any(n is node for n in walk(anc.test)) else None
        if isinstance(anc, (cst.BaseStatement, cst.BaseSmallStatement, cst.Lambda, cst.BaseSuite)):
            return None
    return None


def assigned_arms(ctx: SiteContext, node: cst.If) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
    """`if t: x = a else: x = b` (not an `elif`): (a, b)."""
    parent = ctx.file.parent(node)
    if not isinstance(node.orelse, cst.Else) or (isinstance(parent, cst.If) and parent.orelse is node):
        return None
    one = m.Assign(targets=[m.AssignTarget(target=m.Name())])
    a, b = single(node.body), single(node.orelse.body)
    if not (m.matches(a, one) and m.matches(b, one)) or a.targets[0].target.value != b.targets[0].target.value:
        return None
    return a.value, b.value


class GuardedIndex(Recipe):
    name = "guarded-index"
    codes = ("GB0170",)
    safety = "safe"
    rule = "GB0170"
    summary = "`A[i] if i >= 0 else B` with a tensor index -> a helper that picks with torch.where over an index kept in range"

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        node = conditional(ctx)
        if node is None:
            return None
        arms: tuple[cst.BaseExpression, cst.BaseExpression] | None
        if isinstance(node, cst.IfExp):
            arms = node.body, node.orelse
        else:
            arms = assigned_arms(ctx, node)
            if arms is None:
                return None
        for pick, default, negate in ((arms[0], arms[1], False), (arms[1], arms[0], True)):  # noqa: B007 (read after the break)
            look = _lookup(pick)
            ok = look and _guard(node.test, *look)
            if ok:
                break
        else:
            return None
        table, index = cast("tuple[cst.BaseExpression, cst.BaseExpression]", look)  # ok was truthy: look is set
        if _number(default):
            raise Decline("the default is a Python value, not a tensor: torch.where would return a tensor in its place")
        if not all(pure(e) for e in (node.test, table, index, default)):
            raise Decline("the table, the index, the test or the default may have effects: the rewrite evaluates each of them")
        scope = scope_of(ctx, node)
        if changed_in_place(scope, table) or changed_in_place(scope, default):
            raise Decline("the function changes the table or the default in place: the original's pick may be a view of it")
        if not self._only_read(ctx, node):
            raise Decline("the picked tensor is not only read: the original's is the table's element or the default itself, the rewrite's a copy")
        if taken(ctx, HELPER.name):
            raise Decline(f"the module binds {HELPER.name} to something else")
        if negate:
            ok = make_call("torch.logical_not", ok)
        self._call = cst.Call(cst.Name(HELPER.name), [cst.Arg(e) for e in (ok, table, index, default)])
        up = ctx.file.parent(node)
        return up if isinstance(up, cst.Assign) and up.value is node else node  # a statement: laid out to fit

    @staticmethod
    def _only_read(ctx: SiteContext, node: cst.If | cst.IfExp) -> bool:
        if isinstance(node, cst.IfExp):
            return only_read(ctx, node)
        # the statement form binds the name in both arms (and maybe elsewhere, by plain
        # assignments only): every read of it must be a read only
        target = single(node.body).targets[0].target
        scope = ctx.file.scopes.get(target)
        if not isinstance(scope, FunctionScope) or mutated(scope_of(ctx, node), target.value):
            return False
        bindings = scope.assignments[target.value]
        if len(bindings) < 2 or not all(isinstance(ctx.file.parent(a.node), cst.AssignTarget) for a in bindings):
            return False
        refs = [ref.node for a in scope.assignments[target.value] for ref in a.references]
        return bool(refs) and all(isinstance(r, cst.Name) and only_read(ctx, r) for r in refs)

    def rewrite(self, node: cst.CSTNode) -> cst.CSTNode:
        for p in generated.closure([HELPER.name]):  # the take op first
            self.need_helper(p.name, p.code)
        if isinstance(node, cst.IfExp):
            return self._call
        column = self.ctx.file.span(node)[0][1]
        if isinstance(node, cst.Assign):
            return fit(node.with_changes(value=self._call), column)
        return statement(fit(single(node.body).with_changes(value=self._call), column), node)


RECIPES = (GuardedIndex,)
