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
``-t[i]`` / ``t.__getitem__``, and sorts of anything but ``range``. Putting
Python objects in a data-dependent order needs concrete ints, and indexing a
list with a traced index breaks again (GB0124; with ``capture_scalar_outputs``
the run fails on a data-dependent guard). SymInt keys (sorting by shapes that
turned dynamic) have no tensor to argsort.

``sort-by-key`` (safe) sorts tensors themselves, when the sorted list is only
read (its length, its elements only read, slices of it, the first argument of
``torch.stack``/``torch.cat``)::

    top = torch.stack(sorted(xs, key=f, reverse=True)[:k])
    ->
    top = torch.stack((gbfix_sorted_by_key(xs, key=f, reverse=True) if gbfix_pickable(xs) else sorted(xs, key=f, reverse=True))[:k])

and ``xs.sort(key=f)`` of a list the function made (a display, a
comprehension, ``list(...)``) whose other uses only read it, as
``if gbfix_pickable(xs): xs[:] = gbfix_sorted_by_key(xs, key=f) else:
xs.sort(key=f)``. ``gbfix_pickable`` is pick-by-key's (below): the sorted
tensors are copies, rows of ``torch.stack(xs)`` put in the order of a stable
argsort of the stacked keys, which is Python's order, ties and ``reverse``
included, as above; keys that are Python numbers are sorted by Python. NaN
keys again are the one difference. Lists of objects (beam hypotheses) run the
builtin, which still breaks on that line.

GB0193: ``max(xs, key=f)`` / ``min(xs, key=f)``: Dynamo's builtin max and min
take no ``key`` (an invalid call to the builtin's handler). ``pick-by-key``
(safe) picks in tensor ops when Python's answer is a tensor that may be copied::

    best = max(xs, key=f)
    ->
    best = (gbfix_pick_by_key(max, xs, key=f) if gbfix_pickable(xs) else max(xs, key=f))

``gbfix_pickable`` (a helper added once per package or file, as is the other) holds for
a list or tuple of contiguous tensors of one shape, dtype and device that
autograd does not record (grad mode off, or none requires grad); Dynamo decides
it while tracing (types, shapes and grad mode are guarded). Everything else
(objects holding tensors such as beam hypotheses, mixed shapes, a graph that
needs gradients, where a stacked pick would give the unpicked tensors zero
gradients instead of none) runs the builtin, unchanged, and still breaks on
that line, where the verifier sees it. ``gbfix_pick_by_key`` calls the key
once per element in order, as the builtin does; Python-number keys go through
the builtin's own loop (``keys[i] > keys[best]``), tensor keys through
``argmax``/``argmin``, which also keep the first best key, with NaN keys masked
so that one wins only when it comes first, as Python's comparisons (all False
with NaN) have it (ties, NaN, +-inf and -0.0 checked against the builtins on
float32, float16, int64 and Python keys). The picked tensor is a copy: the
result must only be read (by operators, by tensor methods and torch functions
that write nothing in place, following views), never returned, stored,
mutated or passed to user code, where its identity would show. The iterable
must be a name (it is read twice).
"""

from __future__ import annotations

from typing import cast

import libcst as cst
from libcst.metadata import FunctionScope

from gbfix.generated import piece
from gbfix.recipes.analysis import (
    call_at,
    keyword_args,
    local_uses,
    only_read,
    qualified_names,
    taken,
)
from gbfix.recipes.base import Decline, Recipe, Replacement, SiteContext
from gbfix.recipes.tree import variables, walk


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
        kwargs = keyword_args(call)
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
        kwargs = keyword_args(node)
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

_PICKABLE = piece("gbfix_pickable", '''\
def gbfix_pickable(xs):
    # Added by gbfix: whether gbfix_pick_by_key may stand in for the builtin max or
    # min over xs: a list or tuple of contiguous tensors of one shape, dtype and
    # device that autograd does not record (what it returns is a copy).
    if not isinstance(xs, (list, tuple)) or not xs or not all(isinstance(x, torch.Tensor) for x in xs):
        return False
    if torch.is_grad_enabled() and any(x.requires_grad for x in xs):
        return False
    first = xs[0]
    return all(
        x.shape == first.shape and x.dtype == first.dtype and x.device == first.device and x.is_contiguous()
        for x in xs
    )
''')
_PICK = piece("gbfix_pick_by_key", '''\
def gbfix_pick_by_key(pick, xs, key):
    # Added by gbfix: the builtin pick (max or min) of xs by key, in tensor ops that
    # torch.compile keeps in its graph. As with the builtin, key is called once per
    # element in order, the first best key wins, and a NaN key only when it comes
    # first (every comparison with NaN is False).
    keys = [key(x) for x in xs]
    if not all(isinstance(k, torch.Tensor) and k.numel() == 1 for k in keys):
        best = 0  # the builtin's own loop, for keys that are Python numbers
        for i in range(1, len(keys)):
            if (keys[i] > keys[best]) if pick is max else (keys[i] < keys[best]):
                best = i
        return xs[best]
    keys = torch.stack([k.reshape(()) for k in keys])
    nan = keys.isnan() if keys.is_floating_point() else None
    if nan is not None:
        keys = torch.where(nan, float("-inf") if pick is max else float("inf"), keys)
    best = keys.argmax() if pick is max else keys.argmin()
    if nan is not None:
        best = torch.where(nan[0], 0, best)
    return torch.stack(xs)[best.reshape(1)][0]
''')

_SORTED = piece("gbfix_sorted_by_key", '''\
def gbfix_sorted_by_key(xs, key, reverse=False):
    # Added by gbfix: sorted(xs, key=key, reverse=reverse) in tensor ops that
    # torch.compile keeps in its graph, for xs that passed gbfix_pickable: copies of
    # the tensors, in Python's order. Python's sort is stable, reversed too (equal
    # keys keep their order), as a stable argsort is; the key is called once per
    # element in order. Keys that are Python numbers are sorted as Python does.
    keys = [key(x) for x in xs]
    if not all(isinstance(k, torch.Tensor) and k.numel() == 1 for k in keys):
        return [xs[i] for i in sorted(range(len(xs)), key=keys.__getitem__, reverse=reverse)]
    order = torch.argsort(torch.stack([k.reshape(()) for k in keys]), stable=True, descending=reverse)
    return list(torch.stack(xs)[order].unbind(0))
''')
# torch functions that copy the tensors of a list argument into a new one.
_COPYING = frozenset("stack cat concat concatenate vstack hstack dstack row_stack column_stack".split())


def _list_read(ctx: SiteContext, node: cst.BaseExpression) -> bool:
    """The list ``node`` evaluates to is only read: its length, its elements (each only
    read, see ``only_read``: indexed, or iterated by a loop whose name nothing else
    binds), slices of it (recursively), the first argument of a torch function that copies
    its tensors (``torch.stack``, ``torch.cat``), or through a local bound once whose
    every use is such a read."""
    up = ctx.file.parent(node)
    if isinstance(up, cst.Arg) and up.value is node and up.keyword is None and not up.star:
        call = ctx.file.parent(up)
        names = qualified_names(ctx, call.func)
        if names == {"builtins.len"}:
            return True
        name = next(iter(names)) if len(names) == 1 else ""
        kwargs = keyword_args(call)
        return (
            name.startswith("torch.") and name.rpartition(".")[2] in _COPYING
            and call.args[0] is up and kwargs is not None and "out" not in kwargs
        )
    if isinstance(up, cst.Subscript) and up.value is node and len(up.slice) == 1:
        if isinstance(ctx.file.parent(up), (cst.AssignTarget, cst.AugAssign, cst.Del)):
            return False
        index = up.slice[0].slice
        return only_read(ctx, up) if isinstance(index, cst.Index) else _list_read(ctx, up)
    if isinstance(up, cst.Assign) and up.value is node:
        refs = local_uses(ctx, up)
        return refs is not None and bool(refs) and all(_list_read(ctx, r) for r in refs)
    if isinstance(up, (cst.For, cst.CompFor)) and up.iter is node and isinstance(up.target, cst.Name):
        scope = ctx.file.scopes.get(up.target)  # iterated: each element through the loop's own name
        found = list(scope.assignments[up.target.value]) if scope is not None else []
        refs = [r.node for r in found[0].references] if len(found) == 1 else None
        return refs is not None and all(isinstance(r, cst.Name) and only_read(ctx, r) for r in refs)
    return False


class PickByKey(Recipe):
    name = "pick-by-key"
    codes = ("GB0193",)
    safety = "safe"
    summary = "max/min(xs, key=f) over same-shape tensors -> a helper picking in tensor ops (first best key, NaN as Python)"
    rule = "GB0193"

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        call = call_at(ctx)
        if call is None or qualified_names(ctx, call.func) not in ({"builtins.max"}, {"builtins.min"}):
            return None
        kwargs = keyword_args(call)
        positional = [a for a in call.args if a.keyword is None]
        if kwargs is None or len(positional) != 1 or set(kwargs) != {"key"}:
            return None  # several positional arguments compare those; `default=` has no tensor form
        if not _reference(positional[0].value):
            raise Decline("the iterable is not a name: it would be evaluated twice")
        if any(taken(ctx, helper.name) for helper in (_PICKABLE, _PICK)):
            raise Decline("the module binds a helper's name to something else")
        if not only_read(ctx, call):
            raise Decline("the picked tensor is not only read: a copy of it would show")
        return call

    def rewrite(self, node: cst.CSTNode) -> Replacement:
        assert isinstance(node, cst.Call)
        for helper in (_PICKABLE, _PICK):
            self.need_helper(helper.name, helper.code)
        bare = node.with_changes(lpar=[], rpar=[])
        xs = next(a.value for a in node.args if a.keyword is None)
        pick = cst.Arg(bare.func, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        return _if_pickable(xs, bare.with_changes(func=cst.Name(_PICK.name), args=[pick, *bare.args]), bare)


class SortByKey(Recipe):
    name = "sort-by-key"
    codes = ("GB0207",)
    safety = "safe"
    summary = "sorted(xs, key=f) / xs.sort(key=f) over same-shape tensors, only read -> a stable argsort of the stacked keys"
    rule = "GB0207"

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        call = call_at(ctx)
        if call is None:
            return None
        kwargs = keyword_args(call)
        positional = [a for a in call.args if a.keyword is None]
        if kwargs is None or "key" not in kwargs or set(kwargs) - {"key", "reverse"}:
            return None
        if qualified_names(ctx, call.func) == {"builtins.sorted"} and len(positional) == 1:
            xs = positional[0].value
            if isinstance(xs, cst.Call) and qualified_names(ctx, xs.func) == {"builtins.range"}:
                return None  # indices: sorted-range-to-argsort's
            if not _reference(xs):
                raise Decline("the iterable is not a name: it would be evaluated twice")
            if not _list_read(ctx, call):
                raise Decline("the sorted list is not only read: copies of its tensors would show")
            self._in_place: cst.Name | None = None
            node: cst.CSTNode = call
        elif isinstance(call.func, cst.Attribute) and call.func.attr.value == "sort" and not positional:
            node = self._list_sort(ctx, call)
        else:
            return None
        if any(taken(ctx, helper.name) for helper in (_PICKABLE, _SORTED)):
            raise Decline("the module binds a helper's name to something else")
        return node

    def _list_sort(self, ctx: SiteContext, call: cst.Call) -> cst.CSTNode:
        """``xs.sort(key=f)``, a statement of its own, of a list the function made and whose
        other uses only read it: nobody else sees its elements replaced by copies."""
        xs, expr = call.func.value, ctx.file.parent(call)
        stmt = ctx.file.parent(expr)
        if not (isinstance(xs, cst.Name) and isinstance(expr, cst.Expr) and len(stmt.body) == 1):
            raise Decline("not `name.sort(...)` as a statement of its own")
        scope = ctx.file.scopes.get(xs)
        bound = scope.assignments[xs.value] if isinstance(scope, FunctionScope) else ()
        if len(bound) != 1:
            raise Decline(f"`{xs.value}` is not a local bound once")
        (assignment,) = bound
        made = ctx.file.parent(ctx.file.parent(assignment.node))
        value = made.value if isinstance(made, cst.Assign) else None
        fresh = isinstance(value, (cst.List, cst.ListComp)) or (
            isinstance(value, cst.Call) and qualified_names(ctx, value.func) == {"builtins.list"}
        )
        if not fresh:
            raise Decline(f"`{xs.value}` may be a list others hold: they would see copies")
        others = [r.node for r in assignment.references if r.node is not xs]
        if not all(isinstance(r, cst.Name) and _list_read(ctx, r) for r in others):
            raise Decline(f"`{xs.value}` is not only read: copies of its tensors would show")
        self._in_place = xs
        return cast(cst.CSTNode, stmt)  # the parent of an Expr: its statement line

    def rewrite(self, node: cst.CSTNode) -> Replacement:
        for helper in (_PICKABLE, _SORTED):
            self.need_helper(helper.name, helper.code)
        if self._in_place is None:  # sorted(xs, ...)
            assert isinstance(node, cst.Call)
            bare = node.with_changes(lpar=[], rpar=[])
            xs = next(a.value for a in node.args if a.keyword is None)
            return _if_pickable(xs, bare.with_changes(func=cst.Name(_SORTED.name)), bare)
        assert isinstance(node, cst.SimpleStatementLine)  # xs.sort(...): the builtin stays in the else
        xs, args = self._in_place, node.body[0].value.args
        comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        everything = cst.Subscript(xs, [cst.SubscriptElement(cst.Slice(lower=None, upper=None))])
        sort = cst.Call(cst.Name(_SORTED.name), [cst.Arg(xs, comma=comma), *args])
        return cst.If(
            test=cst.Call(cst.Name(_PICKABLE.name), [cst.Arg(xs)]),
            body=cst.IndentedBlock([cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(everything)], sort)])]),
            orelse=cst.Else(cst.IndentedBlock([node.with_changes(leading_lines=[])])),
            leading_lines=node.leading_lines,
        )


def _if_pickable(xs: cst.BaseExpression, fast: cst.BaseExpression, builtin: cst.BaseExpression) -> cst.IfExp:
    """``(fast if gbfix_pickable(xs) else builtin)``: the builtin, unchanged, for anything else."""
    space = cst.SimpleWhitespace(" ")
    return cst.IfExp(
        test=cst.Call(cst.Name(_PICKABLE.name), [cst.Arg(xs)]), body=fast, orelse=builtin,
        lpar=[cst.LeftParen()], rpar=[cst.RightParen()],
        whitespace_before_if=space, whitespace_after_if=space, whitespace_before_else=space, whitespace_after_else=space,
    )


RECIPES = (SortedRangeToArgsort, SortByKey, PickByKey)
