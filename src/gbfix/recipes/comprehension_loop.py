"""GB4347 at a comprehension: the same loop as a ``for`` statement.

On Python 3.11 and older a comprehension is a function of its own (``<dictcomp>``,
``<listcomp>``, ``<setcomp>``) called with the iterator of its first iterable.
When the function holding it runs eagerly because Dynamo gave up on it (a
graph break inside a ``try:`` block, as in transformers' ``capture_outputs``
wrapper around a forward that breaks), Dynamo still sees the comprehension's
frame and tries to compile it on its own: its argument is then a live
``dict_keyiterator`` / ``list_iterator``, which Dynamo cannot step (``Missing
tp_iternext``). Written as a ``for`` statement, the loop is part of the
function's own frame and never a frame of its own::

    keys = {f"output_{k}": kwargs.get(f"output_{k}", False) for k in flags}

    keys = {}
    for k in flags:
        keys.update({f"output_{k}": kwargs.get(f"output_{k}", False)})

Same iterations, same calls in the same order (a dict item's key is evaluated
before its value, so ``keys[K] = V`` is written only when ``K`` or ``V`` is a
name or a literal; else ``keys.update({K: V})``). What the comprehension kept
to itself must stay unseen: the loop's names must be new to the function (read
nowhere else in it, except in comprehensions that bind them), the assigned name
must not be read in the comprehension, global, nonlocal or read by a nested
function. Only an assignment to a plain name in a function body is rewritten.

Where the name must not see a partial result, the loop fills a new list under a
name of its own and the name is bound once the loop is done, as the comprehension
binds it: when the statement sits in a ``try`` or ``with`` block (an exception
raised halfway must leave the name as it was), when the comprehension reads the
name itself (``order = [order[i] for i in perm]``), or when a nested function
reads it::

    in_args = [in_args[i] for i in order]

    new_in_args = []
    for i in order:
        new_in_args.append(in_args[i])
    in_args = new_in_args
"""

from __future__ import annotations

import libcst as cst
from libcst.metadata import FunctionScope

from gbfix.recipes.base import Decline, Recipe, SiteContext
from gbfix.recipes.tree import nodes, variables

_COMPS = (cst.DictComp, cst.ListComp, cst.SetComp)
_INERT = (cst.Name, cst.SimpleString, cst.Integer, cst.Float)
# Calls that see a function's locals: the loop's names would show up there.
_INTROSPECTION = frozenset({"locals", "vars", "eval", "exec", "dir"})


class ComprehensionLoop(Recipe):
    name = "comprehension-loop"
    codes = ("GB4347",)
    safety = "safe"
    rule = "GB4347"
    summary = "a comprehension Dynamo compiles as a frame of its own -> the same loop as a for statement"

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        comp = ctx.enclosing(*_COMPS) or _only_comprehension(ctx.node)
        if comp is None:
            return None
        stmt = ctx.enclosing(cst.SimpleStatementLine, node=comp)
        assign = stmt.body[0] if stmt is not None and len(stmt.body) == 1 else None
        if not (isinstance(assign, cst.Assign) and assign.value is comp):
            raise Decline("the comprehension is not the whole value of an assignment")
        if len(assign.targets) != 1 or not isinstance(assign.targets[0].target, cst.Name):
            raise Decline("the comprehension is not assigned to one plain name")
        fn = ctx.enclosing(cst.FunctionDef, cst.ClassDef, node=stmt)
        if not isinstance(fn, cst.FunctionDef):
            raise Decline("the comprehension is not in a function body (a class body scopes its names differently)")
        if any(f.asynchronous is not None for f in _fors(comp)):
            raise Decline("an async comprehension")
        result = assign.targets[0].target.value
        guarded = any(isinstance(a, (cst.Try, cst.TryStar, cst.With)) for a in _until(ctx.ancestors(stmt), fn))
        staged = guarded or _sees_partial(fn, comp, result)
        self._staging = _staging_name(ctx, result) if staged else None
        if staged and self._staging is None:
            raise Decline(f"`{result}` must not see a partial result, and no free name is left to build it under")
        _check_names(ctx, fn, comp, result, staged=self._staging is not None)
        return stmt

    def rewrite(self, node: cst.CSTNode) -> cst.CSTNode | cst.FlattenSentinel:
        assert isinstance(node, cst.SimpleStatementLine) and isinstance(node.body[0], cst.Assign)
        result = node.body[0].targets[0].target
        target = cst.Name(self._staging) if self._staging else result
        comp = node.body[0].value
        empty = {cst.DictComp: "{}", cst.ListComp: "[]", cst.SetComp: "set()"}[type(comp)]
        if isinstance(comp, cst.DictComp):
            key, value = comp.key, comp.value
            if isinstance(key, _INERT) or isinstance(value, _INERT):
                body: cst.BaseStatement = _stmt(cst.Assign([cst.AssignTarget(cst.Subscript(target, [cst.SubscriptElement(cst.Index(key))]))], value))
            else:
                item = cst.Dict([cst.DictElement(key, value)])
                body = _stmt(cst.Expr(_call(target, "update", item)))
        else:
            body = _stmt(cst.Expr(_call(target, "append" if isinstance(comp, cst.ListComp) else "add", comp.elt)))
        for clause in reversed(_fors(comp)):
            for cond in reversed(clause.ifs):
                body = cst.If(cond.test, cst.IndentedBlock([body]))
            body = cst.For(clause.target, clause.iter, cst.IndentedBlock([body]))
        assign = node.body[0]
        first = node.with_changes(body=[assign.with_changes(targets=[cst.AssignTarget(target)], value=cst.parse_expression(empty))])
        if not self._staging:
            return cst.FlattenSentinel([first, body])
        bind = _stmt(cst.Assign([cst.AssignTarget(result)], target))
        return cst.FlattenSentinel([first.with_changes(trailing_whitespace=cst.TrailingWhitespace()), body, bind.with_changes(trailing_whitespace=node.trailing_whitespace)])


def _until(ancestors, fn: cst.CSTNode):
    for anc in ancestors:
        if anc is fn:
            return
        yield anc


def _sees_partial(fn: cst.FunctionDef, comp: cst.BaseComp, result: str) -> bool:
    """The comprehension, or a function nested in ``fn``, reads the name the result goes to."""
    if any(n.value == result for n in variables(comp)):
        return True
    return any(inner is not fn and any(n.value == result for n in variables(inner)) for inner in nodes(fn, (cst.FunctionDef, cst.Lambda)))


def _staging_name(ctx: SiteContext, result: str) -> str | None:
    """A name for the list the loop fills, used nowhere in the file."""
    taken = {n.value for n in nodes(ctx.module, cst.Name)}
    name = f"new_{result.lstrip('_')}"
    return None if name in taken else name


def _only_comprehension(node: cst.CSTNode) -> cst.CSTNode | None:
    """The span Dynamo gives may be the statement's first line: its one comprehension."""
    found = nodes(node, _COMPS, nested=False)
    return found[0] if len(found) == 1 else None


def _fors(comp: cst.BaseComp) -> list[cst.CompFor]:
    out: list[cst.CompFor] = []
    clause: cst.CompFor | None = comp.for_in
    while clause is not None:
        out.append(clause)
        clause = clause.inner_for_in
    return out


def _stmt(small: cst.BaseSmallStatement) -> cst.SimpleStatementLine:
    return cst.SimpleStatementLine([small])


def _call(target: cst.Name, method: str, arg: cst.BaseExpression) -> cst.Call:
    return cst.Call(cst.Attribute(target, cst.Name(method)), [cst.Arg(arg)])


def _check_names(ctx: SiteContext, fn: cst.FunctionDef, comp: cst.BaseComp, result: str, staged: bool) -> None:
    """Decline unless the loop's names and the result's name behave as they did
    once the comprehension's own scope is gone (``staged``: the result is bound once, at the end)."""
    scopes = ctx.file.scopes
    own = scopes.get(comp)
    if not isinstance(own, FunctionScope):
        raise Decline("the comprehension is not in a function's own scope")
    bound = set()
    for clause in _fors(comp):
        for n in nodes(clause.target, cst.BaseExpression):
            if isinstance(n, (cst.Attribute, cst.Subscript, cst.StarredElement)):
                raise Decline("a loop target that is not plain names")
        bound |= {n.value for n in nodes(clause.target, cst.Name)}
    if result in bound:
        raise Decline(f"the loop binds `{result}`, the name its result goes to")
    if not staged and any(n.value == result for n in variables(comp)):
        raise Decline(f"the comprehension reads `{result}`, which the loop would bind before it ends")
    inside = {id(n) for n in nodes(comp, cst.Name)}
    for n in variables(fn):
        if n.value in _INTROSPECTION:
            raise Decline(f"the function calls {n.value}(), which would see the loop's names")
        if id(n) in inside:
            continue
        if n.value in bound and _reaches(scopes, n, own):
            raise Decline(f"`{n.value}` is used elsewhere in {fn.name.value}: the loop would rebind it")
    for inner in nodes(fn, (cst.FunctionDef, cst.Lambda)):
        if not staged and inner is not fn and any(n.value == result for n in variables(inner)):
            raise Decline(f"`{result}` is read by a nested function, which could see a partial result")
    for stmt in nodes(fn, (cst.Global, cst.Nonlocal)):
        if any(a.name.value in bound | {result} for a in stmt.names):
            raise Decline("a loop name or the result is declared global or nonlocal")


def _reaches(scopes, name: cst.Name, own: FunctionScope) -> bool:
    """Whether ``name`` resolves to the function's scope or beyond (not to a
    comprehension or function nested in it that binds it)."""
    scope = scopes.get(name)
    if scope is None:
        return True
    found = scope[name.value]  # empty: no assignment anywhere up the chain
    if not found:
        return True  # a global or builtin now: the loop's local would shadow it
    return any(a.scope is own or _encloses(a.scope, own) for a in found)


def _encloses(outer, inner) -> bool:
    """Whether scope ``outer`` is ``inner``'s parent, or its parent's, ... (the global scope is its own parent)."""
    while inner.parent is not inner:
        inner = inner.parent
        if inner is outer:
            return True
    return False


RECIPES = (ComprehensionLoop,)
