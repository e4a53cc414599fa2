"""Breaks in mixture-of-experts and multi-head dispatch: run every branch densely.

GB0036, ``masked-assign-to-where`` (unsafe). Switch-Transformers-style experts
gather their tokens with a boolean mask and scatter the result back::

    out[mask] = expert(h[mask]).to(out.dtype)
    ->  out = torch.where(mask[..., None], expert(h).to(out.dtype), out)

``h[mask]`` has a data-dependent number of rows. The dense form runs the right
side on every row and keeps the rows of ``out`` the mask leaves out. Values are
the same when the right side works row by row (``Linear``, activations, the
``.to``): a ``mask`` over the leading k dims selects rows of k+1-dim tensors,
which ``mask[..., None]`` broadcasts over. Anything else (a mask over every dim,
a right side mixing rows, reshaping to ``(n, d)``) raises or changes the
outputs, and the verifier rejects it. The dtype needs no cast: indexing
assignment already requires the right side to have ``out``'s dtype.
Unsafe: every row goes through the expert (cost, RNG draws for dropout, running
statistics of batch norms, which the verifier does not see), and a NaN or inf
the expert makes on a masked-out row reaches the gradient through ``where``.

The write in place becomes a new binding, so ``out`` must be nobody else's:
a local name of the function, bound only by fresh tensors (``clone()``,
``torch.zeros_like``, arithmetic, ...), not used in nested functions, and read
before the site (or anywhere in the loop around it) only in ways that keep no
reference (``out.dtype``, arithmetic, writes ``out[i] = ...``). The right side
must use the mask only to index (``x[mask]`` becomes ``x``). Declined: other
targets (attributes, parameters, ``out[i, mask]``), augmented assignment, and
a mask used otherwise on the right.

GB0124, ``modulelist-index-to-stack`` (unsafe). ``nn.ModuleList.__getitem__``
calls ``operator.index`` on its index, a ``.item()`` on a tensor (the break is
in torch's ``container.py``; the site is the user's subscript)::

    self.heads[lang_id](h)  ->  torch.stack([m(h) for m in self.heads])[lang_id]

Every module runs and the indexed output is picked: the same values when the
outputs share a shape and dtype (``stack`` raises on shapes, promotes dtypes).
Unsafe: the cost, the RNG and running statistics of the modules not chosen, and
their parameters getting zero gradients instead of none (an optimizer with
weight decay or momentum then updates them). The arguments, evaluated once per
module, must be names, attributes or literals, as must the container and the
index; declined: starred arguments, an index that is an int literal or a
``range``/``enumerate`` counter, and code in a class body.
"""

from __future__ import annotations

import libcst as cst

from gbfix.recipes.analysis import qualified_names
from gbfix.recipes.base import Recipe, Replacement, SiteContext
from gbfix.recipes.tree import nodes, param_names, variables

_SCOPES = (cst.FunctionDef, cst.Lambda, cst.ClassDef, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)


def _index(sub: cst.Subscript) -> cst.BaseExpression | None:
    """The index of ``x[i]`` (one plain element), or None."""
    if len(sub.slice) != 1:
        return None
    el = sub.slice[0].slice
    return el.value if isinstance(el, cst.Index) and el.star is None else None


def _binding(ctx: SiteContext, name: cst.Name) -> bool:
    """``name`` is bound, declared or deleted here (``out += x`` aside: in place for a tensor)."""
    node: cst.CSTNode = name
    up = ctx.file.parent(name)
    while isinstance(up, (cst.Element, cst.StarredElement, cst.Tuple, cst.List)):
        node, up = up, ctx.file.parent(up)
    if isinstance(up, (cst.AssignTarget, cst.AnnAssign, cst.For, cst.CompFor, cst.NamedExpr)):
        return up.target is node
    return isinstance(up, (cst.AsName, cst.Del, cst.NameItem, cst.Param))


# ---- GB0036: masked assignment ------------------------------------------------------

# Methods that return a new tensor whatever the receiver is.
_FRESH_METHODS = frozenset("clone new_zeros new_ones new_empty new_full new_tensor".split())
# Methods that return their receiver or a tensor sharing only its storage.
_PASS_METHODS = frozenset("to detach contiguous float double half bfloat16".split())
_FRESH_FNS = frozenset(
    f"torch.{n}"
    for n in "zeros ones empty full zeros_like ones_like empty_like full_like clone where cat stack tensor".split()
)
# Attributes read for metadata: no reference to the data is kept.
_METADATA = frozenset("dtype shape device ndim size dim numel is_cuda requires_grad".split())
_VALUE_OPS = (cst.BinaryOperation, cst.UnaryOperation, cst.Comparison)


class MaskedAssignToWhere(Recipe):
    name = "masked-assign-to-where"
    codes = ("GB0036",)
    safety = "unsafe"
    summary = "out[m] = f(x[m]) -> out = torch.where(m[..., None], f(x), out): every row computed, no dynamic shape"
    rule = "GB0036"

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        sub = ctx.node
        if not isinstance(sub, cst.Subscript) or not isinstance(mask := _index(sub), cst.Name):
            return None
        assign = ctx.enclosing(cst.BaseSmallStatement, node=sub)
        if not isinstance(assign, cst.Assign) or len(assign.targets) != 1:
            return None
        target = assign.targets[0].target
        if not (
            isinstance(target, cst.Subscript)
            and isinstance(target.value, cst.Name)
            and isinstance(m := _index(target), cst.Name)
            and m.value == mask.value
        ):
            return None
        if sub is not target and assign.value not in (sub, *ctx.ancestors(sub)):
            return None
        uses = [n for n in variables(assign.value) if n.value == mask.value]
        if not uses or any(not self._indexes(ctx, u) for u in uses):
            return None  # the mask must only select rows on the right
        fn = ctx.enclosing(cst.FunctionDef, node=assign)
        if fn is None or not self._private(ctx, fn, assign, target.value.value):
            return None
        self._mask, self._out = mask.value, target.value.value
        return assign

    def rewrite(self, node: cst.CSTNode) -> Replacement:
        assert isinstance(node, cst.Assign)
        self.need_import("torch")
        where = cst.Call(
            cst.parse_expression("torch.where"),
            [
                cst.Arg(cst.parse_expression(f"{self._mask}[..., None]")),
                cst.Arg(node.value.visit(_Unmask(self._mask))),
                cst.Arg(cst.Name(self._out)),
            ],
        )
        return node.with_changes(targets=[node.targets[0].with_changes(target=cst.Name(self._out))], value=where)

    @staticmethod
    def _indexes(ctx: SiteContext, name: cst.Name) -> bool:
        """``name`` is the whole index of a subscript: ``x[name]``."""
        index = ctx.file.parent(name)
        element = ctx.file.parent(index) if isinstance(index, cst.Index) else None
        sub = ctx.file.parent(element) if isinstance(element, cst.SubscriptElement) else None
        return isinstance(sub, cst.Subscript) and len(sub.slice) == 1 and index.star is None

    def _private(self, ctx: SiteContext, fn: cst.FunctionDef, site: cst.Assign, out: str) -> bool:
        """Rebinding ``out`` instead of writing into it is invisible: no one else holds its tensor."""
        if out in param_names(fn):
            return False
        loops = [a for a in ctx.ancestors(site)[: ctx.ancestors(site).index(fn)] if isinstance(a, (cst.For, cst.While))]
        horizon = ctx.file.span(loops[-1] if loops else site)[1]
        bound = False
        for name in (n for n in variables(fn.body) if n.value == out):
            chain = ctx.ancestors(name)
            if site in chain:
                continue
            if any(isinstance(a, _SCOPES) for a in chain[: chain.index(fn)]):
                return False  # a closure or comprehension could keep the old tensor
            up = ctx.file.parent(name)
            if isinstance(up, cst.AssignTarget):
                assign = ctx.file.parent(up)
                if not (isinstance(assign, cst.Assign) and len(assign.targets) == 1 and self._fresh(ctx, assign.value)):
                    return False
                bound = True
            elif isinstance(up, cst.AnnAssign) and up.target is name:
                if up.value is None or not self._fresh(ctx, up.value):
                    return False
                bound = True
            elif _binding(ctx, name):
                return False  # unpacking, loop targets, global, del, ...
            elif not (self._harmless(ctx, name, up) or ctx.file.span(name)[0] > horizon):
                return False  # a view or alias made before the write would miss it
        return bound  # else a global or closure variable

    @staticmethod
    def _harmless(ctx: SiteContext, name: cst.Name, up: cst.CSTNode | None) -> bool:
        """A use that keeps no reference to the tensor: metadata, arithmetic, a write into it."""
        if isinstance(up, cst.Attribute) and up.value is name:
            return up.attr.value in _METADATA
        if isinstance(up, cst.Subscript) and up.value is name:
            return isinstance(ctx.file.parent(up), (cst.AssignTarget, cst.AugAssign))
        if isinstance(up, cst.AugAssign):
            return up.target is name  # `out += x` updates the tensor in place
        return isinstance(up, (*_VALUE_OPS, cst.ComparisonTarget))

    def _fresh(self, ctx: SiteContext, value: cst.BaseExpression) -> bool:
        """``value`` is a new tensor that nothing else refers to."""
        if isinstance(value, cst.BinaryOperation):
            return True
        if not isinstance(value, cst.Call):
            return False
        func = value.func
        if isinstance(func, cst.Attribute) and func.attr.value in _FRESH_METHODS:
            return True
        if isinstance(func, cst.Attribute) and func.attr.value in _PASS_METHODS:
            return self._fresh(ctx, func.value)
        names = qualified_names(ctx, func)
        return bool(names) and names <= _FRESH_FNS


class _Unmask(cst.CSTTransformer):
    """``x[mask]`` -> ``x``, keeping parentheses."""

    def __init__(self, mask: str) -> None:
        super().__init__()
        self.mask = mask

    def leave_Subscript(self, original: cst.Subscript, updated: cst.Subscript) -> cst.BaseExpression:
        index = _index(updated)
        if not (isinstance(index, cst.Name) and index.value == self.mask):
            return updated
        value = updated.value
        if updated.lpar and not value.lpar:
            value = value.with_changes(lpar=updated.lpar, rpar=updated.rpar)
        return value


# ---- GB0124: ModuleList indexed by a tensor -----------------------------------------


def _plain(e: cst.BaseExpression) -> bool:
    """A value that costs nothing to evaluate again: a name, attribute, literal or constant subscript."""
    if isinstance(e, (cst.Name, cst.Integer, cst.Float, cst.SimpleString)):
        return True
    if isinstance(e, cst.Attribute):
        return _plain(e.value)
    if isinstance(e, cst.Subscript):
        index = _index(e)
        return index is not None and _plain(e.value) and isinstance(index, (cst.Integer, cst.SimpleString))
    return False


class ModuleListIndexToStack(Recipe):
    name = "modulelist-index-to-stack"
    codes = ("GB0124",)
    safety = "unsafe"
    summary = "modules[t](x) -> torch.stack([m(x) for m in modules])[t]: every module runs, no .item() on t"
    rule = "GB0124"

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        sub = ctx.node
        if not isinstance(sub, cst.Subscript) or (index := _index(sub)) is None:
            return None
        call = ctx.file.parent(sub)
        if not isinstance(call, cst.Call) or call.func is not sub:
            return None
        if any(a.star for a in call.args) or not all(_plain(a.value) for a in call.args):
            return None  # each argument is evaluated once per module
        if not (_plain(sub.value) and _plain(index)) or isinstance(index, (cst.Integer, cst.SimpleString)):
            return None
        if isinstance(ctx.enclosing(cst.FunctionDef, cst.ClassDef, node=call), cst.ClassDef):
            return None  # a comprehension in a class body does not see the class's names
        fn = ctx.enclosing(cst.FunctionDef, node=call)
        if isinstance(index, cst.Name) and self._counter(fn or ctx.module, index.value):
            return None
        taken = {n.value for part in (sub.value, *call.args) for n in nodes(part, cst.Name)}
        self._var = next(v for v in ("m", "module", "mod", "module_") if v not in taken)
        return call

    def rewrite(self, node: cst.CSTNode) -> Replacement:
        assert isinstance(node, cst.Call) and isinstance(node.func, cst.Subscript)
        self.need_import("torch")
        sub = node.func
        each = node.with_changes(func=cst.Name(self._var), lpar=[], rpar=[])
        outputs = cst.ListComp(each, cst.CompFor(target=cst.Name(self._var), iter=sub.value))
        stack = cst.Call(cst.parse_expression("torch.stack"), [cst.Arg(outputs)])
        return cst.Subscript(stack, sub.slice, lpar=node.lpar, rpar=node.rpar)

    @staticmethod
    def _counter(scope: cst.CSTNode, name: str) -> bool:
        """``name`` is a loop counter: ``for name in range(...)`` / ``for name, _ in enumerate(...)``."""
        for loop in nodes(scope, cst.For):
            if not isinstance(loop.iter, cst.Call):
                continue
            func, target = loop.iter.func, loop.target
            if not (isinstance(func, cst.Name) and func.value in ("range", "enumerate")):
                continue
            if isinstance(target, cst.Tuple) and target.elements and func.value == "enumerate":
                target = target.elements[0].value
            if isinstance(target, cst.Name) and target.value == name:
                return True
        return False


RECIPES = (MaskedAssignToWhere, ModuleListIndexToStack)
