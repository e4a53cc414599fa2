"""Breaks on ops whose output shape depends on the data.

GB0246, ``F.one_hot(x)`` without ``num_classes``: the width is ``x.max() + 1``,
known only once the data is read (an explicit ``num_classes=-1`` keyword is
reported as GB0033). ``one-hot-num-classes`` (unsafe) passes the
class count the surrounding code names::

    F.one_hot(labels)  ->  F.one_hot(labels, num_classes=self.num_classes)

That is not the same function: whenever a batch misses the last class the
original is narrower. Real code mostly relies on the two agreeing (the result
meets ``[..., num_classes]`` logits), so the recipe is offered as unsafe and the
verifier keeps it only if the program's own runs give the same results. The
count must be the one name in reach that says so (``num_classes``,
``n_classes``, ``num_labels``, ``num_experts``, ``num_local_experts``,
``vocab_size``, any case, optionally prefixed): a parameter of the function, a
module global, ``self.<name>`` assigned in the class, or an attribute of
``self``/a parameter read in the function (``self.config.num_labels``). Two
different candidates, or none, and the recipe declines.

GB0036, boolean-mask indexing ``x[m]`` (a data-dependent number of elements)
feeding a reduction. ``masked-reduction`` (safe) reduces over the whole tensor
with the unselected elements zeroed, which gives a fixed shape::

    x[m].sum()     ->  torch.where(m, x, 0).sum()          (also nansum, torch.sum(x[m]))
    x[m].mean()    ->  (torch.where(m, x, 0).sum() / m.sum())   (also torch.mean(x[m]))

Same dtype (a Python ``0`` never promotes), same gradient, and an empty mask
gives 0 for ``sum`` and NaN (0 / 0) for ``mean``, as before. Values agree up to
rounding: the sum runs over more (zero) terms in another order (float32: about
one ulp), and a half-precision ``mean`` rounds the sum to half before dividing
(one ulp of the half type) -- the kind of difference compiling itself makes.

``torch.where`` broadcasts its mask from the right, indexing consumes it from
the left: they agree only when ``m`` has ``x``'s shape. The recipe requires
that to be visible: ``m`` is a boolean expression (a comparison, ``~``, ``&``,
``|``, ``^`` of boolean parts -- an integer part would make it an index --,
``isnan``-like predicates, a name assigned once from one, ``x`` then being a
name bound once) of which one part is ``x`` itself (``x > 0``,
``torch.isfinite(x)``, ``(x > 0) & ~x.isnan()``). A combined mask broadcasts to
at least ``x``'s shape, and if it is any larger, ``x[m]`` raises. A mask of unknown shape
(``hidden[attention_mask]``, which selects rows) is declined, as are ``max``/
``min`` (an empty selection raises), reductions with arguments, and masks with
calls that are not known to be pure (``where`` evaluates the mask first and,
for ``mean``, twice).
"""

from __future__ import annotations

import re

import libcst as cst
from libcst.metadata import Assignment, QualifiedNameSource

from gbfix.recipes.analysis import COMPARISONS, call_at, is_module_global, qualified_names
from gbfix.recipes.base import Recipe, Replacement, SiteContext
from gbfix.recipes.tree import keyword_arg, walk
from gbfix.recipes.vocabulary import CASTS, ELEMENTWISE, PREDICATES


def imported_name(ctx: SiteContext, func: cst.BaseExpression) -> str | None:
    """The imported function ``func`` names (``torch.isnan``), or None: a method, a local."""
    scope = ctx.file.scopes.get(func)
    if scope is None or not isinstance(func, (cst.Name, cst.Attribute)):
        return None
    names = {q.name for q in scope.get_qualified_names_for(func) if q.source is not QualifiedNameSource.LOCAL}
    return next(iter(names)) if len(names) == 1 else None


# ---- GB0246: one_hot ------------------------------------------------------------

_COUNT = re.compile(r"(^|_)(num|n)(_local)?_(class|classes|labels|experts)$|(^|_)vocab_size$", re.IGNORECASE)


def _is_count(name: str) -> bool:
    return _COUNT.search(name) is not None


def _root(expr: cst.BaseExpression) -> cst.BaseExpression:
    while isinstance(expr, cst.Attribute):
        expr = expr.value
    return expr


# Methods that keep the one-hot's axes where they are (dtype changes, copies).
_SAME_AXES = frozenset({"float", "double", "half", "bfloat16", "long", "int", "to", "type_as", "contiguous", "clone"})


def _one_hot_axis(ctx: SiteContext, call: cst.Call) -> tuple[cst.CSTNode, int] | None:
    """The outermost expression of `F.one_hot(x)` followed by dtype casts and at most
    one `.permute(...)` of literal axes, and where the class axis ends up in it
    (-1 without a permute)."""
    expr: cst.CSTNode = call
    axis = -1
    while True:
        up = ctx.file.parent(expr)
        method = ctx.file.parent(up) if isinstance(up, cst.Attribute) and up.value is expr else None
        if not (isinstance(method, cst.Call) and method.func is up):
            return expr, axis
        name = up.attr.value
        if name == "permute" and axis == -1:
            dims = [a.value for a in method.args]
            if not dims or any(a.keyword or a.star or not isinstance(d, cst.Integer) for a, d in zip(method.args, dims)):
                return None
            order = [int(d.value) for d in dims]
            if sorted(order) != list(range(len(order))):
                return None
            axis = order.index(len(order) - 1)
        elif name not in _SAME_AXES:
            return expr, axis
        expr = method


def _partner_width(ctx: SiteContext, fn: cst.FunctionDef, call: cst.Call) -> cst.BaseExpression | None:
    """`other.shape[axis]` when the one-hot meets a tensor `other` elementwise
    (`probs * target_one_hot`, Dice losses): the class axes must agree there
    (or broadcast a width of 1, which the verifier would see). `other` must be
    a parameter or a name assigned before the call, so it is valid there."""
    found = _one_hot_axis(ctx, call)
    if found is None:
        return None
    expr, axis = found
    up = ctx.file.parent(expr)
    holder: cst.CSTNode = expr
    if isinstance(up, cst.Assign) and len(up.targets) == 1 and isinstance(up.targets[0].target, cst.Name):
        holder = up.targets[0].target  # the name the one-hot is kept in
    partners: set[str] = set()
    params = {p.name.value for p in (*fn.params.params, *fn.params.posonly_params, *fn.params.kwonly_params)}
    before = ctx.file.span(call)[0]
    for node in walk(fn.body, nested=False):
        if not (isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.Multiply, cst.Add, cst.Subtract))):
            continue
        for mine, other in ((node.left, node.right), (node.right, node.left)):
            same = mine is expr or (isinstance(holder, cst.Name) and isinstance(mine, cst.Name) and mine.value == holder.value)
            if same and isinstance(other, cst.Name) and (other.value in params or _assigned_before(fn, other.value, before, ctx)):
                partners.add(other.value)
    if len(partners) != 1:
        return None
    index = cst.Integer(str(axis)) if axis >= 0 else cst.UnaryOperation(cst.Minus(), cst.Integer("1"))
    return cst.Subscript(
        value=cst.Attribute(cst.Name(partners.pop()), cst.Name("shape")),
        slice=[cst.SubscriptElement(cst.Index(index))],
    )


def _assigned_before(fn: cst.FunctionDef, name: str, at: tuple[int, int], ctx: SiteContext) -> bool:
    """``name`` is assigned once in the function, by a plain statement before ``at``."""
    writes = [
        n
        for n in walk(fn.body, nested=False)
        if isinstance(n, cst.AssignTarget) and isinstance(n.target, cst.Name) and n.target.value == name
    ]
    return len(writes) == 1 and ctx.file.span(writes[0])[0] < at


class OneHotNumClasses(Recipe):
    name = "one-hot-num-classes"
    codes = ("GB0246", "GB0033")  # GB0033: `num_classes=-1` as a keyword reaches the op itself
    safety = "unsafe"
    summary = "F.one_hot(x) -> F.one_hot(x, num_classes=<the class count in scope>): a fixed width, not x.max() + 1"
    rule = "GB0246"

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        call = call_at(ctx)
        if call is None or qualified_names(ctx, call.func) != {"torch.nn.functional.one_hot"}:
            return None
        args = call.args
        if not args or any(a.star for a in args) or args[0].keyword is not None or len(args) > 2:
            return None
        if len(args) == 2:  # an explicit num_classes=-1 is the default: data-dependent
            second = args[1]
            if (second.keyword and second.keyword.value != "num_classes") or ctx.code(second.value).strip() != "-1":
                return None
        fn = ctx.enclosing(cst.FunctionDef, node=call)
        if fn is None:
            return None
        found = self._candidates(ctx, fn)
        if not found:
            partner = _partner_width(ctx, fn, call)
            found = {ctx.code(partner): partner} if partner is not None else {}
        if len(found) != 1:
            return None
        (self._count,) = found.values()
        return call

    def rewrite(self, node: cst.CSTNode) -> Replacement:
        assert isinstance(node, cst.Call)
        count = keyword_arg("num_classes", self._count)
        first = node.args[0]
        if len(node.args) == 1:
            first = first.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            return node.with_changes(args=[first, count])
        return node.with_changes(args=[first, count.with_changes(comma=node.args[1].comma)])

    @staticmethod
    def _candidates(ctx: SiteContext, fn: cst.FunctionDef) -> dict[str, cst.BaseExpression]:
        """Expressions naming a class count that are valid at the call, by their code."""
        params = {p.name.value for p in (*fn.params.params, *fn.params.posonly_params, *fn.params.kwonly_params)}
        found: dict[str, cst.BaseExpression] = {p: cst.Name(p) for p in params if _is_count(p)}

        class _Reads(cst.CSTVisitor):
            def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
                return node is fn  # a nested def runs elsewhere

            def visit_Attribute(self, node: cst.Attribute) -> bool:
                root = _root(node)
                up = ctx.file.parent(node)
                called = isinstance(up, cst.Call) and up.func is node
                stored = isinstance(up, (cst.AssignTarget, cst.AugAssign)) and getattr(up, "target", None) is node
                if (
                    _is_count(node.attr.value)
                    and isinstance(root, cst.Name)
                    and (root.value == "self" or root.value in params)
                    and not called
                    and not stored
                ):
                    found[ctx.code(node)] = node
                return True

            def visit_Name(self, node: cst.Name) -> None:
                up = ctx.file.parent(node)
                if (isinstance(up, cst.Attribute) and up.attr is node) or (
                    isinstance(up, cst.Arg) and up.keyword is node
                ):
                    return  # `a.num_classes`, `f(num_classes=...)`: no variable
                if _is_count(node.value) and node.value not in params and is_module_global(ctx, node):
                    found[node.value] = node  # an imported constant, say

        fn.visit(_Reads())
        # module constants (`NUM_CLASSES = 10`) that the call would see
        scope = ctx.file.scopes.get(fn.body)
        for line in ctx.module.body:
            for small in line.body if isinstance(line, cst.SimpleStatementLine) else ():
                targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else []
                for t in targets:
                    if isinstance(t, cst.Name) and _is_count(t.value) and t.value not in params and scope is not None:
                        if all(a.scope is scope.globals for a in scope[t.value]):
                            found[t.value] = cst.Name(t.value)
        cls = ctx.enclosing(cst.ClassDef, node=fn)
        if cls is not None and params and fn.params.params[0].name.value == "self":

            class _SelfAssigns(cst.CSTVisitor):
                def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
                    t = node.target
                    if isinstance(t, cst.Attribute) and isinstance(t.value, cst.Name) and t.value.value == "self":
                        if _is_count(t.attr.value):
                            found[f"self.{t.attr.value}"] = cst.parse_expression(f"self.{t.attr.value}")

            cls.visit(_SelfAssigns())
        return found


# ---- GB0036: boolean-mask indexing feeding a reduction ------------------------------

_BITWISE = (cst.BitAnd, cst.BitOr, cst.BitXor)
# Predicates: a boolean tensor shaped like the receiver (the comparisons broadcast with their argument).
_BOOL_METHODS = PREDICATES | {"bool"}
_BOOL_FNS = frozenset(f"torch.{n}" for n in _BOOL_METHODS - {"bool"})
# Methods that keep their receiver's shape (and take no argument here).
_SHAPE_KEEPING = ELEMENTWISE | CASTS
# Side-effect-free methods a mask may call; their results may be read twice.
_PURE_METHODS = _BOOL_METHODS | _SHAPE_KEEPING | frozenset(
    "sum mean std var amax amin max min norm clamp clamp_min clamp_max unsqueeze view reshape".split()
)
_REDUCE_METHODS = frozenset({"sum", "nansum", "mean"})
_REDUCE_FNS = {"torch.sum": "sum", "torch.nansum": "nansum", "torch.mean": "mean"}


class MaskedReduction(Recipe):
    name = "masked-reduction"
    codes = ("GB0036",)
    safety = "safe"
    summary = "x[m].sum() / x[m].mean() -> torch.where(m, x, 0).sum() (/ m.sum()): no data-dependent shape"
    rule = "GB0036"

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        sub = ctx.node
        if not isinstance(sub, cst.Subscript) or len(sub.slice) != 1:
            return None
        index = sub.slice[0].slice
        if not isinstance(index, cst.Index) or index.star is not None:
            return None
        self._ctx, self._x, self._mask = ctx, sub.value, index.value
        reduction = self._reduction(sub)
        if reduction is None:
            return None
        call, self._op = reduction
        if not (self._is_bool(self._mask, 0) and self._shaped_like_x(self._mask, 0) and self._pure(self._mask)):
            return None
        return call

    def rewrite(self, node: cst.CSTNode) -> Replacement:
        assert isinstance(node, cst.Call)
        self.need_import("torch")
        where = cst.Call(
            cst.parse_expression("torch.where"), [cst.Arg(self._mask), cst.Arg(self._x), cst.Arg(cst.Integer("0"))]
        )
        if self._op != "mean":
            if not node.args:  # x[m].sum()
                return node.with_changes(func=node.func.with_changes(value=where))
            return node.with_changes(args=[node.args[0].with_changes(value=where)])
        total = cst.Call(cst.Attribute(where, cst.Name("sum")))
        count = cst.Call(cst.Attribute(_atom(self._mask), cst.Name("sum")))
        mean = cst.BinaryOperation(total, cst.Divide(), count)
        if node.lpar:
            return mean.with_changes(lpar=node.lpar, rpar=node.rpar)
        statement_level = (cst.Arg, cst.Assign, cst.AnnAssign, cst.AugAssign, cst.Return, cst.Element)
        if isinstance(self._ctx.file.parent(node), statement_level):
            return mean
        return mean.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])

    def _reduction(self, sub: cst.Subscript) -> tuple[cst.Call, str] | None:
        """The call reducing ``sub`` over all its elements, and which reduction it is."""
        up = self._ctx.file.parent(sub)
        if isinstance(up, cst.Attribute) and up.value is sub and up.attr.value in _REDUCE_METHODS:
            call = self._ctx.file.parent(up)
            if isinstance(call, cst.Call) and call.func is up and not call.args:
                return call, up.attr.value
            return None
        if isinstance(up, cst.Arg) and up.value is sub and up.keyword is None and not up.star:
            call = self._ctx.file.parent(up)
            if isinstance(call, cst.Call) and len(call.args) == 1:
                fn = imported_name(self._ctx, call.func)
                if fn in _REDUCE_FNS:
                    return call, _REDUCE_FNS[fn]
        return None

    # ---- what the mask is ----

    def _binding(self, name: cst.Name) -> cst.BaseExpression | None:
        """The value of a name assigned exactly once, by a plain ``name = value``."""
        scope = self._ctx.file.scopes.get(name)
        if scope is None:
            return None
        bound = list(scope[name.value])
        if len(bound) != 1 or not isinstance(bound[0], Assignment):
            return None
        target = self._ctx.file.parent(bound[0].node)
        assign = self._ctx.file.parent(target) if isinstance(target, cst.AssignTarget) else None
        if not isinstance(assign, cst.Assign) or len(assign.targets) != 1:
            return None
        return assign.value

    def _is_bool(self, e: cst.BaseExpression, depth: int) -> bool:
        """Shown to be a boolean tensor (or to raise where indexing would)."""
        if depth > 8:
            return False
        if isinstance(e, cst.Comparison):
            return len(e.comparisons) == 1 and isinstance(e.comparisons[0].operator, COMPARISONS)
        if isinstance(e, cst.UnaryOperation):
            return isinstance(e.operator, cst.BitInvert) and self._is_bool(e.expression, depth + 1)
        if isinstance(e, cst.BinaryOperation):
            return (
                isinstance(e.operator, _BITWISE)
                and self._is_bool(e.left, depth + 1)
                and self._is_bool(e.right, depth + 1)
            )
        if isinstance(e, cst.Call):
            return self._predicate(e) is not None
        if isinstance(e, cst.Name):
            value = self._binding(e)
            return value is not None and self._is_bool(value, depth + 1)
        return False

    def _shaped_like_x(self, e: cst.BaseExpression, depth: int) -> bool:
        """A boolean ``e`` with one part shaped like ``x`` (so all of ``e`` is, or ``x[e]`` raises)."""
        if depth > 8:
            return False
        if isinstance(e, cst.Comparison):
            return self._like_x(e.left) or self._like_x(e.comparisons[0].comparator)
        if isinstance(e, cst.UnaryOperation):
            return self._shaped_like_x(e.expression, depth + 1)
        if isinstance(e, cst.BinaryOperation):
            return self._shaped_like_x(e.left, depth + 1) or self._shaped_like_x(e.right, depth + 1)
        if isinstance(e, cst.Call):
            operands = self._predicate(e) or []
            return any(
                self._like_x(o) or (self._is_bool(o, depth + 1) and self._shaped_like_x(o, depth + 1)) for o in operands
            )
        if isinstance(e, cst.Name):
            # the mask was computed earlier: `x` must still be the tensor it was computed from
            value = self._binding(e)
            return (
                value is not None
                and isinstance(self._x, cst.Name)
                and self._binding_count(self._x) == 1
                and self._shaped_like_x(value, depth + 1)
            )
        return False

    def _binding_count(self, name: cst.Name) -> int:
        scope = self._ctx.file.scopes.get(name)
        return len(scope[name.value]) if scope is not None else 0

    def _predicate(self, call: cst.Call) -> list[cst.BaseExpression] | None:
        """The tensor operands of a boolean-valued call, or None if it is not one."""
        if any(a.star or a.keyword for a in call.args):
            return None
        args = [a.value for a in call.args]
        func = call.func
        if (fn := imported_name(self._ctx, func)) is not None:
            return args if fn in _BOOL_FNS else None
        if isinstance(func, cst.Attribute) and func.attr.value in _BOOL_METHODS:
            return [func.value, *args]
        return None

    def _like_x(self, e: cst.BaseExpression) -> bool:
        """``e`` is ``x`` or a shape-keeping method chain on it (``x.abs()``)."""
        while (
            isinstance(e, cst.Call)
            and not e.args
            and isinstance(e.func, cst.Attribute)
            and e.func.attr.value in _SHAPE_KEEPING
        ):
            e = e.func.value
        return self._ctx.code(e) == self._ctx.code(self._x)

    def _pure(self, e: cst.CSTNode) -> bool:
        """Reads only: evaluating ``e`` before ``x``, or twice, changes nothing."""
        if isinstance(e, (cst.Name, cst.Integer, cst.Float)):
            return True
        if isinstance(e, cst.Attribute):
            return self._pure(e.value)
        if isinstance(e, cst.UnaryOperation):
            return self._pure(e.expression)
        if isinstance(e, cst.BinaryOperation):
            return self._pure(e.left) and self._pure(e.right)
        if isinstance(e, cst.Comparison):
            return self._pure(e.left) and all(self._pure(c.comparator) for c in e.comparisons)
        if isinstance(e, cst.Subscript):
            return self._pure(e.value) and all(self._pure(el.slice) for el in e.slice)
        if isinstance(e, cst.Index):
            return e.star is None and self._pure(e.value)
        if isinstance(e, cst.Slice):
            return all(p is None or self._pure(p) for p in (e.lower, e.upper, e.step))
        if isinstance(e, cst.Call):
            if any(a.star or not self._pure(a.value) for a in e.args):
                return False
            if (fn := imported_name(self._ctx, e.func)) is not None:
                return fn in _BOOL_FNS
            func = e.func
            return isinstance(func, cst.Attribute) and func.attr.value in _PURE_METHODS and self._pure(func.value)
        return False


def _atom(e: cst.BaseExpression) -> cst.BaseExpression:
    """``e`` parenthesised unless it already binds tighter than an attribute access."""
    if e.lpar or isinstance(e, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)):
        return e
    return e.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


RECIPES = (OneHotNumClasses, MaskedReduction)
