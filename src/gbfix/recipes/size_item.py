"""GB0033 / GB0124: a tensor given where Python wants a number (a size, a slice bound, an
`arange` bound), converted explicitly.

    kv_length = cache_position[-1] + 1             kv_length = operator.index(cache_position[-1] + 1)
    w = scores.view(b, h, q, kv_length)      ->    w = scores.view(b, h, q, kv_length)
    w = w + mask[:, :, :, :kv_length]              w = w + mask[:, :, :, :kv_length]

    return torch.arange(n.max())             ->    return torch.arange(n.max().item())
    return torch.arange(d - 1)               ->    return torch.arange((d - 1).item() if d.dim() == 0 else d - 1)

Python converts the tensor itself there: a size or a slice bound through ``__index__``, an
`arange` bound through torch's number parsing. Dynamo breaks on it, and with
``capture_scalar_outputs`` on, torch 2.13 may fail inside instead
(PendingUnbackedSymbolNotFound). Written out, the conversion traces as a symbolic scalar
with that setting, and it is the same conversion:

- ``operator.index(t)`` is what a size or a slice bound does with ``t``: the same int,
  and the same TypeError for a tensor of more than one element or of a floating dtype
  (``t.item()`` would raise RuntimeError, or return a float);
- ``t.item()`` where `arange` takes a number, for ``t`` shown to be 0-dim (a full
  reduction): arange takes no other tensor, and ``.item()`` of a one-element 1-dim
  tensor would turn its TypeError into a range;
- ``t.item() if t.dim() == 0 else t`` for any other tensor name ``t`` there (``(t - 1).item()
  if t.dim() == 0 else t - 1`` with a Python number added, subtracted or multiplied,
  which keeps the dim): a 0-dim tensor gives arange the same number, any other still
  reaches arange and its TypeError; Dynamo knows the dim, and traces only the first arm.
  Other expressions are declined (testing them would evaluate them twice).

The edit moves the break to the conversion, so it is only tried together with the
setting (``gbfix.compound.pair``), or alone where the program sets it already. Only
arguments shown to be tensors are converted. A name bound once and used only in such
places (twice or more) is converted where it is bound, when nothing between the binding
and its first use has effects (a TypeError then comes earlier, with nothing skipped).
"""

from __future__ import annotations

import libcst as cst

from gbfix import edits
from gbfix.recipes.analysis import is_builtin, number_evidence, pure, scope_of, single_binding
from gbfix.recipes.base import Decline, Recipe, Replacement, SiteContext
from gbfix.recipes.branch import fit
from gbfix.recipes.scalar import _INT_ANNOTATIONS, _TENSOR_ANNOTATIONS, _Facts
from gbfix.recipes.tree import variables
from gbfix.recipes.vocabulary import words

# Methods and torch functions whose positional arguments are all sizes (or a tuple of them),
# each converted by __index__.
_SIZE_METHODS = words("view reshape expand repeat tile new_zeros new_ones new_empty narrow")
_SIZE_FUNCTIONS = words("torch.zeros torch.ones torch.empty torch.rand torch.randn torch.eye")
# torch.arange's bounds are numbers: a 0-dim tensor's value, int or float.
_NUMBER_FUNCTIONS = words("torch.arange")
_SIZE_KEYWORDS = words("start end step length")
# Full reductions (no argument): a 0-dim tensor for a tensor, a numpy scalar for an array.
_READS = words("max min amax amin sum prod argmax argmin count_nonzero")
# Int arithmetic that keeps a size a size: `n - 1`, `2 * n`, `n // 2`.
_INT_OPS = (cst.Add, cst.Subtract, cst.Multiply, cst.FloorDivide)


class SizeItem(Recipe):
    name = "item-for-size"
    codes = ("GB0033", "GB0124")
    safety = "safe"
    requires = frozenset({"config.capture_scalar_outputs"})
    alone = False  # the conversion breaks until capture_scalar_outputs is on
    summary = (
        "convert a tensor given as a size or slice bound explicitly (operator.index, or .item() of a 0-dim tensor "
        "for an arange bound, the dim tested where not shown), which capture_scalar_outputs traces"
    )
    rule = "GB0033"

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        f = _Facts(ctx)
        consumer = next((n for n in (ctx.node, *ctx.ancestors()) if _places(f, n)), None)
        if consumer is None:
            return None
        places = [(e, number) for e, number in _places(f, consumer) if _tensor_if_evaluated(f, e)]
        if not places:
            raise Decline("no size or slice bound here is shown to be a tensor")
        if not _operator_module(ctx, consumer):
            raise Decline("the name `operator` is bound to something else here")
        self._reads: dict[int, cst.BaseExpression] = {}
        self._column: int | None = None
        if len(places) == 1 and (bound := _bound_once(ctx, f, places[0][0])) is not None:
            value, numbers = bound
            try:
                self._reads[id(value)] = self._convert(f, value, any_number=numbers)
            except Decline:
                pass  # a value whose dim cannot be tested: the name's can, where it is used
            else:
                return ctx.enclosing(cst.SimpleStatementLine, node=value)
        for e, number in places:
            self._reads[id(e)] = self._convert(f, e, any_number=number)
        owner = ctx.file.parent(consumer)
        if isinstance(owner, (cst.Return, cst.Assign)) and owner.value is consumer:
            # `return torch.arange(<tested>, <tested>)` may grow long: laid out as black would
            self._column = ctx.file.span(owner)[0][1]
            return owner
        return consumer

    def _convert(self, f: _Facts, e: cst.BaseExpression, any_number: bool) -> cst.BaseExpression:
        """``e`` converted as its places convert it (``any_number``: one is an arange bound)."""
        # a tensor (the caller showed it) that is a number or a 0-dim tensor: 0-dim
        if f.zero_dim(e) or number_evidence(f.ctx, e, scope_of(f.ctx, e)):
            return _item(e)
        if not any_number:
            return cst.Call(cst.Attribute(cst.Name("operator"), cst.Name("index")), [cst.Arg(e)])
        tested = _dim_of(f, e)
        if tested is None:
            raise Decline(
                f"`{f.ctx.code(e)}` is an arange bound not shown to be 0-dim, nor a tensor name (or `name op number`) "
                "whose dim can be tested: arange takes no other tensor, and `.item()` of a one-element tensor "
                "would turn its TypeError into a range"
            )
        # `.item()` where arange would read the number; any other tensor still reaches arange, and
        # its TypeError. Under Dynamo the dim is static: only the taken arm is traced.
        zero = cst.Comparison(
            cst.Call(cst.Attribute(tested, cst.Name("dim"))), [cst.ComparisonTarget(cst.Equal(), cst.Integer("0"))]
        )
        bare = e.with_changes(lpar=[], rpar=[])  # e's own parentheses go around the conditional
        return cst.IfExp(test=zero, body=_item(bare), orelse=bare, lpar=e.lpar, rpar=e.rpar)

    def rewrite(self, node: cst.CSTNode) -> Replacement | None:
        if any(
            isinstance(c, cst.Call) and isinstance(c.func, cst.Attribute) and c.func.attr.value == "index"
            for c in self._reads.values()
        ):
            self.need_import("operator")
        new = node.visit(edits.Replace(self._reads))
        return fit(new, self._column) if self._column is not None else new


def _bound_once(ctx: SiteContext, f: _Facts, e: cst.BaseExpression) -> tuple[cst.BaseExpression, bool] | None:
    """The value of `name = value` when ``e`` is that name, the function binds it only
    there, on a line of its own, every use of it is a size place (two at least: else
    the use is as small), and the statements between the binding and the first use
    have no effects; with whether a use is an arange bound."""
    fn = ctx.enclosing(cst.FunctionDef)
    if not isinstance(e, cst.Name) or fn is None:
        return None
    value = single_binding(fn, e.value)
    if value is None or not _tensor_if_evaluated(f, value):
        return None
    assign = ctx.file.parent(value)
    line = ctx.file.parent(assign) if isinstance(assign, cst.Assign) else None
    block = ctx.file.parent(line) if isinstance(line, cst.SimpleStatementLine) else None
    if not isinstance(block, cst.IndentedBlock) or ctx.enclosing(cst.FunctionDef, node=line) is not fn:
        return None
    targets = {id(t.target) for t in assign.targets}
    uses = [n for n in variables(fn) if n.value == e.value and id(n) not in targets]
    kinds = [_place_kind(f, n) for n in uses]
    if len(uses) < 2 or None in kinds:
        return None
    first = min(ctx.file.span(n)[0] for n in uses)
    between = block.body[block.body.index(line) + 1:]
    for stmt in between:
        if ctx.file.span(stmt)[1] >= first:
            break
        if not pure(stmt):
            return None
    return value, "number" in kinds


def _operator_module(ctx: SiteContext, node: cst.CSTNode) -> bool:
    """`operator` at ``node`` is the standard module, or nothing yet (the edit imports it)."""
    scope = ctx.file.scopes.get(node)
    if scope is None:
        return False
    for a in scope["operator"]:
        up = ctx.file.parent(a.node) if isinstance(a.node, cst.ImportAlias) else None
        if not (isinstance(up, cst.Import) and a.node.asname is None and ctx.code(a.node.name) == "operator"):
            return False
    return True


def _dim_of(f: _Facts, e: cst.BaseExpression) -> cst.BaseExpression | None:
    """The tensor whose dim ``e`` has, where ``e`` is a name (or `a.b`) shown to be a tensor, or
    one with a Python number (or 0-dim tensor) added, subtracted or multiplied: `n - 1`, `2 * n`."""
    if _dotted_name(e):
        return e if _tensor_if_evaluated(f, e, any_reads=False) else None
    if not isinstance(e, cst.BinaryOperation) or not isinstance(e.operator, (cst.Add, cst.Subtract, cst.Multiply)):
        return None
    for x, k in ((e.left, e.right), (e.right, e.left)):
        number = isinstance(k, (cst.Integer, cst.Float)) or (
            isinstance(k, cst.Name) and number_evidence(f.ctx, k, scope_of(f.ctx, k))
        )
        if number and _dotted_name(x) and _tensor_if_evaluated(f, x, any_reads=False):
            return x
    return None


def _dotted_name(e: cst.BaseExpression) -> bool:
    """`n` or `self.n`: read twice by the rewrite, with no effects."""
    while isinstance(e, cst.Attribute):
        e = e.value
    return isinstance(e, cst.Name)


def _item(e: cst.BaseExpression) -> cst.Call:
    return cst.Call(cst.Attribute(_atom(e), cst.Name("item")))


def _atom(e: cst.BaseExpression) -> cst.BaseExpression:
    if isinstance(e, (cst.Name, cst.Attribute, cst.Subscript, cst.Call)) or e.lpar:
        return e
    return e.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def _places(f: _Facts, node: cst.CSTNode) -> list[tuple[cst.BaseExpression, bool]]:
    """The expressions ``node`` converts to Python numbers, each with True where it is an
    arange bound (a number) rather than a size or slice bound (an index): a size call's
    arguments (and the elements of a tuple given as one), `range`'s, and slice bounds."""
    if isinstance(node, cst.Subscript):
        return [
            (b, False) for el in node.slice if isinstance(el.slice, cst.Slice)
            for b in (el.slice.lower, el.slice.upper, el.slice.step) if b is not None
        ]
    if not isinstance(node, cst.Call):
        return []
    recv, method, fn = f.callee(node)
    number = fn in _NUMBER_FUNCTIONS
    sized = number or fn in _SIZE_FUNCTIONS or (recv is not None and method in _SIZE_METHODS) or (
        isinstance(node.func, cst.Name) and node.func.value == "range" and is_builtin(f.ctx, node.func)
    )
    if not sized:
        return []
    out: list[tuple[cst.BaseExpression, bool]] = []
    for a in node.args:
        if a.star:
            return []
        if a.keyword is not None and a.keyword.value not in _SIZE_KEYWORDS:
            continue
        if isinstance(a.value, (cst.Tuple, cst.List)):
            out.extend((el.value, number) for el in a.value.elements if not isinstance(el, cst.StarredElement))
        else:
            out.append((a.value, number))
    return out


def _place_kind(f: _Facts, node: cst.BaseExpression) -> str | None:
    """"index" or "number" where ``node`` (or int arithmetic with a literal around it) is
    converted by a size, slice bound or arange bound; None elsewhere."""
    up = f.parent(node)
    if isinstance(up, cst.BinaryOperation) and isinstance(up.operator, _INT_OPS):
        other = up.right if up.left is node else up.left
        return _place_kind(f, up) if isinstance(other, cst.Integer) else None
    # the holder: a Subscript (through SubscriptElement, Slice) or a Call (through Arg, Tuple, Element)
    for holder in f.ctx.ancestors(node)[:4]:
        for e, number in _places(f, holder):
            if e is node:
                return "number" if number else "index"
    return None


def _tensor_if_evaluated(f: _Facts, e: cst.BaseExpression, any_reads: bool = True) -> bool:
    """Shown to be a tensor, or to raise before a conversion could: `p[-1]` of a parameter
    annotated `Optional[Tensor]` is a tensor or a TypeError, with or without it. With
    ``any_reads``, a full reduction of anything counts too (a numpy array's has `.item()`,
    but no `.dim()`)."""
    if f.tensor(e):
        return True
    if any_reads and isinstance(e, cst.Call) and not e.args:
        recv, method, fn = f.callee(e)
        if recv is not None and fn is None and method in _READS:
            return True  # a tensor's or a numpy array's full reduction
    if isinstance(e, cst.Subscript):
        return _optional_tensor_param(f, e.value)
    if isinstance(e, cst.BinaryOperation) and isinstance(e.operator, _INT_OPS):
        return _tensor_if_evaluated(f, e.left, any_reads) or _tensor_if_evaluated(f, e.right, any_reads)
    if isinstance(e, cst.UnaryOperation) and isinstance(e.operator, cst.Minus):
        return _tensor_if_evaluated(f, e.expression, any_reads)
    if isinstance(e, cst.Name):
        found = f.bindings(e) or []
        return (
            len(found) == 1 and not isinstance(found[0], (cst.Param, cst.AugAssign))
            and _tensor_if_evaluated(f, found[0], any_reads)
        )
    return False


def _optional_tensor_param(f: _Facts, e: cst.BaseExpression) -> bool:
    found = f.bindings(e) if isinstance(e, cst.Name) else None
    if not found or len(found) != 1 or not isinstance(found[0], cst.Param) or found[0].annotation is None:
        return False
    ann = f.ctx.code(found[0].annotation.annotation).strip("'\"").replace(" ", "")
    inner = ann.removeprefix("Optional[").removeprefix("typing.Optional[").removesuffix("]").removesuffix("|None")
    return inner.rpartition(".")[2] in _TENSOR_ANNOTATIONS | _INT_ANNOTATIONS


RECIPES = (SizeItem,)
