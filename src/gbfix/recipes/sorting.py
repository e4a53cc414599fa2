"""GB0207: ``sorted(...)`` whose key yields tensors (or SymInts) inside compiled code.

Dynamo only sorts constant keys. Python's sort of indices by a tensor's
elements is an argsort, which ``sorted-range-to-argsort`` (safe) writes out
where its result is only ever used to index::

    order = sorted(range(len(t)), key=lambda i: t[i], reverse=True)
    y = x[order]
    ->
    order = torch.argsort(t, stable=True, descending=True)
    y = x[order]

Equal keys keep their original order in both: Python's sort is stable, and
``reverse=True`` keeps equal elements in their original order too (it is not
an ascending sort reversed), which is what ``torch.argsort(stable=True,
descending=True)`` does (ties and ``-0.0`` checked on CPU). An index list of
ints and a 1-d int64 tensor select the same elements, an empty index included.
``range(n)`` over other than ``t``'s length sorts ``t[:n]``. The order differs
only for NaN keys, which Python's comparisons leave in an order that is not a
sort at all.

Declined: the result used as anything but an index (iterated, sliced,
returned, compared, passed on: a tensor is not a list of ints there, and
``.tolist()`` would break again with GB0033), keys other than ``t[i]`` /
``-t[i]`` / ``t.__getitem__``, ``list.sort`` (it reorders a list in place) and
any sort of objects or tensors by a tensor key: putting Python objects in a
data-dependent order needs concrete ints, and indexing a list with a traced
index breaks again (GB0124; with ``capture_scalar_outputs`` the run fails
on a data-dependent guard). SymInt keys (sorting by shapes that turned dynamic)
have no tensor to argsort.
"""

from __future__ import annotations

import libcst as cst

from gbfix.recipes.base import Recipe, Replacement, SiteContext
from gbfix.recipes.print_call import call_at, qualified_names
from gbfix.recipes.tree import variables, walk


def _kwargs(call: cst.Call) -> dict[str, cst.BaseExpression] | None:
    """Keyword arguments by name; None with ``*``/``**`` arguments."""
    if any(a.star for a in call.args):
        return None
    return {a.keyword.value: a.value for a in call.args if a.keyword is not None}


def _reference(expr: cst.BaseExpression) -> bool:
    """A name or ``a.b.c``: evaluating it once instead of per key has no effect."""
    while isinstance(expr, cst.Attribute):
        expr = expr.value
    return isinstance(expr, cst.Name)


def _keyed(key: cst.BaseExpression) -> tuple[cst.BaseExpression, bool] | None:
    """``(t, negated)`` for a key ``lambda i: t[i]``, ``lambda i: -t[i]`` or ``t.__getitem__``."""
    if isinstance(key, cst.Attribute) and key.attr.value == "__getitem__" and _reference(key.value):
        return key.value, False
    if not isinstance(key, cst.Lambda):
        return None
    p = key.params
    if len(p.params) != 1 or p.params[0].default is not None or p.posonly_params or p.kwonly_params:
        return None
    if p.star_arg is not cst.MaybeSentinel.DEFAULT or p.star_kwarg is not None:
        return None
    i, body, negated = p.params[0].name.value, key.body, False
    if isinstance(body, cst.UnaryOperation) and isinstance(body.operator, cst.Minus):
        body, negated = body.expression, True
    if not (isinstance(body, cst.Subscript) and len(body.slice) == 1 and isinstance(body.slice[0].slice, cst.Index)):
        return None
    index = body.slice[0].slice.value
    if not (isinstance(index, cst.Name) and index.value == i and _reference(body.value)):
        return None
    if any(n.value == i for n in variables(body.value)):
        return None
    return body.value, negated


def _length_of(n: cst.BaseExpression, t: cst.BaseExpression) -> bool:
    """``n`` is written as the length of ``t``: ``len(t)``, ``t.shape[0]``, ``t.size(0)``."""
    if isinstance(n, cst.Call):
        if isinstance(n.func, cst.Name) and n.func.value == "len" and len(n.args) == 1:
            return n.args[0].value.deep_equals(t)
        f = n.func
        if isinstance(f, cst.Attribute) and f.attr.value == "size" and len(n.args) == 1:
            arg = n.args[0].value
            return isinstance(arg, cst.Integer) and arg.value == "0" and f.value.deep_equals(t)
        return False
    if isinstance(n, cst.Subscript) and isinstance(n.value, cst.Attribute) and n.value.attr.value == "shape":
        el = n.slice[0].slice if len(n.slice) == 1 else None
        return (
            isinstance(el, cst.Index)
            and isinstance(el.value, cst.Integer)
            and el.value.value == "0"
            and n.value.value.deep_equals(t)
        )
    return False


def _as_index(ctx: SiteContext, node: cst.CSTNode) -> bool:
    """``node`` is a whole index element: ``x[node]``, ``x[node, :]``."""
    index = ctx.file.parent(node)
    return isinstance(index, cst.Index) and isinstance(ctx.file.parent(index), cst.SubscriptElement)


def _only_indexes(ctx: SiteContext, call: cst.Call) -> bool:
    """The sorted list is only used to index: directly, or through a local name
    bound once, every other use of which is an index or ``len(name)``."""
    if _as_index(ctx, call):
        return True
    assign = ctx.file.parent(call)
    if not (isinstance(assign, cst.Assign) and len(assign.targets) == 1 and isinstance(assign.targets[0].target, cst.Name)):
        return False
    target = assign.targets[0].target
    fn = ctx.enclosing(cst.FunctionDef, node=assign)
    if fn is None:
        return False  # a module global: other code may read it
    for n in variables(fn):
        if n.value != target.value or n is target:
            continue
        if not (_as_index(ctx, n) or _is_len_of(ctx, n)):
            return False  # another binding, a read as a list, a parameter of the same name
    return True


def _is_len_of(ctx: SiteContext, node: cst.CSTNode) -> bool:
    arg = ctx.file.parent(node)
    call = ctx.file.parent(arg) if isinstance(arg, cst.Arg) else None
    return isinstance(call, cst.Call) and len(call.args) == 1 and qualified_names(ctx, call.func) == {"builtins.len"}


class SortedRangeToArgsort(Recipe):
    name = "sorted-range-to-argsort"
    codes = ("GB0207",)
    safety = "safe"
    summary = "sorted(range(n), key=lambda i: t[i]) used as an index -> torch.argsort(t[:n], stable=True): the same order"
    rule = "GB0207"

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        call = call_at(ctx)
        if call is None or qualified_names(ctx, call.func) != {"builtins.sorted"}:
            return None
        kwargs = _kwargs(call)
        positional = [a for a in call.args if a.keyword is None]
        if kwargs is None or len(positional) != 1 or set(kwargs) - {"key", "reverse"} or "key" not in kwargs:
            return None
        rng = positional[0].value
        if not (isinstance(rng, cst.Call) and qualified_names(ctx, rng.func) == {"builtins.range"}):
            return None
        if len(rng.args) != 1 or rng.args[0].keyword is not None or rng.args[0].star:
            return None
        keyed = _keyed(kwargs["key"])
        reverse = kwargs.get("reverse")
        if keyed is None or (reverse is not None and not _reference(reverse)):
            return None
        if any(isinstance(n, (cst.NamedExpr, cst.Yield, cst.Await)) for n in walk(rng)):
            return None
        return call if _only_indexes(ctx, call) else None

    def rewrite(self, node: cst.CSTNode) -> Replacement:
        assert isinstance(node, cst.Call)
        kwargs = _kwargs(node)
        assert kwargs is not None
        keyed = _keyed(kwargs["key"])
        assert keyed is not None
        t, negated = keyed
        t = t.with_changes(lpar=[], rpar=[])
        n = next(a.value for a in node.args if a.keyword is None).args[0].value
        keys: cst.BaseExpression = t
        if not _length_of(n, t):
            keys = cst.Subscript(t, [cst.SubscriptElement(cst.Slice(lower=None, upper=n))])
        if negated:
            keys = cst.UnaryOperation(cst.Minus(), keys)
        args = [cst.Arg(keys), cst.Arg(cst.Name("True"), keyword=cst.Name("stable"), equal=_EQ)]
        reverse = kwargs.get("reverse")
        if reverse is not None and not (isinstance(reverse, cst.Name) and reverse.value == "False"):
            args.append(cst.Arg(reverse, keyword=cst.Name("descending"), equal=_EQ))
        self.need_import("torch")
        func = cst.Attribute(cst.Name("torch"), cst.Name("argsort"))
        return cst.Call(func, args, lpar=node.lpar, rpar=node.rpar)


_EQ = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))

RECIPES = (SortedRangeToArgsort,)
