"""GB0033 / GB0124: a tensor given where Python wants an int (a size, a slice bound, an
`arange` bound), read with `.item()`.

    kv_length = cache_position[-1] + 1             kv_length = (cache_position[-1] + 1).item()
    w = scores.view(b, h, q, kv_length)      ->    w = scores.view(b, h, q, kv_length)
    w = w + mask[:, :, :, :kv_length]              w = w + mask[:, :, :, :kv_length]

    return torch.arange(hi, lo - 1, -s)      ->    return torch.arange(hi.item(), (lo - 1).item(), -s)

Python converts the tensor itself (``__index__``, or arange's number parsing); Dynamo
breaks there, and with ``capture_scalar_outputs`` on, torch 2.13 fails inside
(PendingUnbackedSymbolNotFound) where it converts on its own. An explicit `.item()` is
the same number (an int for an integer tensor, a float for a floating one, which arange
takes as it took the tensor) and traces as a symbolic scalar with that setting. So the
edit moves the break to the read and is only tried joined with the setting
(``gbfix.compound``), or alone where the program sets it already.

Only arguments the source shows to be tensors are read: `.item()` of a Python number
would raise. A name bound once and used only in such places (at least twice) is read
where it is bound; anything else where it is used.
"""

from __future__ import annotations

import libcst as cst

from gbfix import edits
from gbfix.recipes.analysis import is_builtin, single_binding
from gbfix.recipes.base import Decline, Recipe, Replacement, SiteContext
from gbfix.recipes.scalar import _INT_ANNOTATIONS, _TENSOR_ANNOTATIONS, _Facts
from gbfix.recipes.tree import walk
from gbfix.recipes.vocabulary import words

# Methods and torch functions whose positional arguments are all sizes (or a tuple of them).
_SIZE_METHODS = words("view reshape expand repeat tile new_zeros new_ones new_empty narrow")
_SIZE_FUNCTIONS = words("torch.arange torch.zeros torch.ones torch.empty torch.rand torch.randn torch.eye")
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
    alone = False  # the `.item()` breaks until capture_scalar_outputs is on
    summary = "read a tensor given as a size or slice bound with .item(), which capture_scalar_outputs traces"
    rule = "GB0033"

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        f = _Facts(ctx)
        consumer = next((n for n in (ctx.node, *ctx.ancestors()) if _size_places(f, n)), None)
        if consumer is None:
            return None
        tensors = [e for e in _size_places(f, consumer) if _tensor_if_evaluated(f, e)]
        if not tensors:
            raise Decline("no size or slice bound here is shown to be a tensor (`.item()` of a Python number raises)")
        self._reads: dict[int, cst.BaseExpression] = {}
        if len(tensors) == 1 and (bound := self._bound_once(ctx, f, tensors[0])) is not None:
            self._reads[id(bound)] = bound
            return ctx.enclosing(cst.SimpleStatementLine, node=bound)
        self._reads = {id(e): e for e in tensors}
        return consumer

    @staticmethod
    def _bound_once(ctx: SiteContext, f: _Facts, e: cst.BaseExpression) -> cst.BaseExpression | None:
        """The value of `name = value` when ``e`` is that name, the function binds it only
        there, and every use of it is a size place (two at least: else the use is as small)."""
        fn = ctx.enclosing(cst.FunctionDef)
        if not isinstance(e, cst.Name) or fn is None:
            return None
        value = single_binding(fn, e.value)
        if value is None or not _tensor_if_evaluated(f, value):
            return None
        assign = ctx.file.parent(value)
        line = ctx.file.parent(assign) if isinstance(assign, cst.Assign) else None
        if not isinstance(line, cst.SimpleStatementLine) or ctx.enclosing(cst.FunctionDef, node=line) is not fn:
            return None  # `name = value` on a line of its own, not in a nested function
        uses = [n for n in walk(fn) if isinstance(n, cst.Name) and n.value == e.value and _is_load(ctx, n)]
        if len(uses) < 2 or not all(_in_size_place(f, n) for n in uses):
            return None
        return value

    def rewrite(self, node: cst.CSTNode) -> Replacement | None:
        return node.visit(edits.Replace({k: _item(v) for k, v in self._reads.items()}))


def _item(e: cst.BaseExpression) -> cst.Call:
    if not isinstance(e, (cst.Name, cst.Attribute, cst.Subscript, cst.Call)) and not e.lpar:
        e = e.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return cst.Call(cst.Attribute(e, cst.Name("item")))


def _size_places(f: _Facts, node: cst.CSTNode) -> list[cst.BaseExpression]:
    """The expressions ``node`` takes as Python ints: a size call's arguments (and the
    elements of a tuple given as one), `range`'s, and slice bounds."""
    if isinstance(node, cst.Subscript):
        return [
            b for el in node.slice if isinstance(el.slice, cst.Slice)
            for b in (el.slice.lower, el.slice.upper, el.slice.step) if b is not None
        ]
    if not isinstance(node, cst.Call):
        return []
    recv, method, fn = f.callee(node)
    sized = fn in _SIZE_FUNCTIONS or (recv is not None and method in _SIZE_METHODS) or (
        isinstance(node.func, cst.Name) and node.func.value == "range" and is_builtin(f.ctx, node.func)
    )
    if not sized:
        return []
    out: list[cst.BaseExpression] = []
    for a in node.args:
        if a.star:
            return []
        if a.keyword is not None and a.keyword.value not in _SIZE_KEYWORDS:
            continue
        if isinstance(a.value, (cst.Tuple, cst.List)):
            out.extend(el.value for el in a.value.elements if not isinstance(el, cst.StarredElement))
        else:
            out.append(a.value)
    return out


def _in_size_place(f: _Facts, node: cst.BaseExpression) -> bool:
    """``node`` is a size place, or int arithmetic with a number that is one."""
    up = f.parent(node)
    if isinstance(up, cst.BinaryOperation) and isinstance(up.operator, _INT_OPS):
        other = up.right if up.left is node else up.left
        return isinstance(other, cst.Integer) and _in_size_place(f, up)
    # the holder: a Subscript (through SubscriptElement, Slice) or a Call (through Arg, Tuple, Element)
    return any(any(p is node for p in _size_places(f, holder)) for holder in f.ctx.ancestors(node)[:4])


def _is_load(ctx: SiteContext, name: cst.Name) -> bool:
    """A read of the variable, not a binding, keyword or attribute named like it."""
    up = ctx.file.parent(name)
    if isinstance(up, cst.Attribute):
        return up.value is name
    if isinstance(up, cst.Arg):
        return up.value is name
    return not isinstance(up, (cst.AssignTarget, cst.Param))


def _tensor_if_evaluated(f: _Facts, e: cst.BaseExpression) -> bool:
    """Shown to be a tensor, or to raise before `.item()` could: `p[-1]` of a parameter
    annotated `Optional[Tensor]` is a tensor or a TypeError, with or without the read."""
    if f.tensor(e):
        return True
    if isinstance(e, cst.Call) and not e.args:
        recv, method, fn = f.callee(e)
        if recv is not None and fn is None and method in _READS:
            return True  # a tensor's or a numpy array's full reduction: either has `.item()`
    if isinstance(e, cst.Subscript):
        return _optional_tensor_param(f, e.value)
    if isinstance(e, cst.BinaryOperation) and isinstance(e.operator, _INT_OPS):
        return _tensor_if_evaluated(f, e.left) or _tensor_if_evaluated(f, e.right)
    if isinstance(e, cst.UnaryOperation) and isinstance(e.operator, cst.Minus):
        return _tensor_if_evaluated(f, e.expression)
    if isinstance(e, cst.Name):
        found = f.bindings(e) or []
        return len(found) == 1 and not isinstance(found[0], (cst.Param, cst.AugAssign)) and _tensor_if_evaluated(f, found[0])
    return False


def _optional_tensor_param(f: _Facts, e: cst.BaseExpression) -> bool:
    found = f.bindings(e) if isinstance(e, cst.Name) else None
    if not found or len(found) != 1 or not isinstance(found[0], cst.Param) or found[0].annotation is None:
        return False
    ann = f.ctx.code(found[0].annotation.annotation).strip("'\"").replace(" ", "")
    inner = ann.removeprefix("Optional[").removeprefix("typing.Optional[").removesuffix("]").removesuffix("|None")
    return inner.rpartition(".")[2] in _TENSOR_ANNOTATIONS | _INT_ANNOTATIONS


RECIPES = (SizeItem,)
