"""GB0170 inside a loop: a data-dependent `continue` or early `return`.

Dynamo 2.13 reports the `continue` case as GB7000 (a break in a loop skips the
whole frame) wrapping the GB0170, and the `return` case as GB0170 plus GB0092
(reconstruction failure) at the same test. Both recipes run every iteration and select with torch.where, so they
are unsafe: they spend the compute the branch saved, and whatever the body
touches (module buffers, RNG draws inside the layers) is touched for the
iterations the original skipped.

    for layer in layers:                      for layer in layers:
        if cond: continue               ->        skip = cond
        x = layer(x)                              x = torch.where(skip, x, layer(x))

    for layer in layers:                      exited = None
        ...                                   for layer in layers:
        if cond: return v               ->        ...
    return v                                      stop = cond
                                                  if exited is None:
                                                      result, exited = v, stop
                                                  else:
                                                      result, exited = torch.where(exited, result, v), exited | stop
                                              return result

The test is kept as written and evaluated once where it was, so a Python
prefix (`self.training and torch.rand(()) < p`) still short-circuits and the
random draws stay the same; when such a prefix may make the test a Python
bool, torch.as_tensor turns it into the tensor torch.where needs.
"""

from __future__ import annotations

from typing import cast

import libcst as cst

from gbfix.recipes.analysis import (
    bound_before,
    called,
    local_effects_only,
    mutated,
    name_of,
    pure,
    scope_of,
    target_names,
    tensor_evidence,
)
from gbfix.recipes.base import SiteContext
from gbfix.recipes.branch import (
    BranchRecipe,
    SplitTest,
    and_operands,
    fit,
    fresh,
    make_call,
    single,
    site_branch,
    statement,
)
from gbfix.recipes.tree import contains, variable_names, variables, walk

# Python values a prefix of the test can be: only these keep `prefix and cond`
# a bool or a bool tensor (a falsy 0 or None would not make a torch.where condition).
_BOOL_BUILTINS = frozenset({"isinstance", "issubclass", "hasattr", "callable", "bool"})
# Iterables that end, and that nobody else reads from: the early-exit rewrite
# runs the loop to its end.
_FINITE_WRAPPERS = frozenset({"zip", "enumerate", "reversed"})
_CONTAINER_VIEWS = frozenset({"items", "values", "keys", "children", "modules", "named_children"})


def _bool_params(fn: cst.CSTNode | None) -> set[str]:
    """Parameters annotated `bool`."""
    if not isinstance(fn, cst.FunctionDef):
        return set()
    p = fn.params
    every = (*p.posonly_params, *p.params, *p.kwonly_params)
    return {q.name.value for q in every if q.annotation is not None and name_of(q.annotation.annotation) == "bool"}


def _bool_valued(expr: cst.BaseExpression, bools: set[str]) -> bool:
    """A Python operand of the test that is certainly True or False: a
    comparison, `not`, a bool builtin, a `bool` parameter, or `training`
    (nn.Module.train() only accepts a bool)."""
    if isinstance(expr, cst.Comparison) or name_of(expr) in ("True", "False", "training") or name_of(expr) in bools:
        return True
    if isinstance(expr, cst.UnaryOperation):
        return isinstance(expr.operator, cst.Not)
    if isinstance(expr, cst.BooleanOperation):
        return _bool_valued(expr.left, bools) and _bool_valued(expr.right, bools)
    if isinstance(expr, cst.Attribute):
        return expr.attr.value == "training"
    if isinstance(expr, cst.Call):
        return name_of(expr.func) in _BOOL_BUILTINS
    return False


def _condition(ctx: SiteContext, if_node: cst.If, test: SplitTest) -> cst.BaseExpression | None:
    """The `if` test as written, as an expression torch.where accepts, or None.

    Only a test Python can evaluate without taking the truth value of a tensor
    qualifies: a Python prefix joined by `and` to one tensor operand. `not t`
    or `t1 and t2` would need logical ops, which change what is evaluated.
    """
    if test.tensor is not test.cond or test.kind != "and" or not test.leading:
        return None  # `P or c`, `c and P`: Python would take the tensor's truth value first
    if test.prefix is None:
        return if_node.test
    bools = _bool_params(ctx.enclosing(cst.FunctionDef, node=if_node))
    if not all(_bool_valued(op, bools) for op in and_operands(test.prefix)):
        return None
    return make_call("torch.as_tensor", if_node.test)


def _assignment(stmt: cst.BaseStatement) -> cst.Assign | None:
    """``stmt`` when it is one `name = expr` / `a, b = expr` and nothing else."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return None
    small = stmt.body[0]
    if not isinstance(small, cst.Assign) or len(small.targets) != 1:
        return None
    target = small.targets[0].target
    elements = target.elements if isinstance(target, (cst.Tuple, cst.List)) else [cst.Element(target)]
    if not all(isinstance(el, cst.Element) and isinstance(el.value, cst.Name) for el in elements):
        return None  # attributes, subscripts, starred: state or a list torch.where cannot take
    return small if local_effects_only(small.value) else None


def _assigned(assign: cst.Assign) -> list[str]:
    return list(target_names(assign.targets[0].target))


def _is_tensor(ctx: SiteContext, name: str, scope: cst.CSTNode) -> bool:
    """The scope shows ``name`` is a tensor: a `Tensor` annotation on the
    parameter, or `name.method(...)` / `torch.f(name, ...)` (torch.where would
    quietly turn a Python number into a tensor)."""
    if isinstance(scope, cst.FunctionDef):
        p = scope.params
        for param in (*p.posonly_params, *p.params, *p.kwonly_params):
            if param.name.value == name and param.annotation is not None:
                if "Tensor" in ctx.code(param.annotation.annotation):
                    return True
    return tensor_evidence(name, scope)


def _loop_block(ctx: SiteContext, if_node: cst.If) -> tuple[cst.For, cst.IndentedBlock, int] | None:
    """The plain `for` whose body holds the `if` directly, its body and the `if`'s index."""
    block = ctx.file.parent(if_node)
    loop = ctx.file.parent(block) if isinstance(block, cst.IndentedBlock) else None
    if not isinstance(loop, cst.For) or loop.body is not block or loop.asynchronous is not None:
        return None
    return loop, cast(cst.IndentedBlock, block), list(block.body).index(if_node)


def _loop_if(
    ctx: SiteContext, body_type: type
) -> tuple[cst.If, cst.BaseSmallStatement, tuple[cst.For, cst.IndentedBlock, int], cst.BaseExpression] | None:
    """The site's `if` (no elif/else) straight in a plain `for` body: the `if`, its
    single body statement (of ``body_type``), the loop (see ``_loop_block``) and
    the condition torch.where selects with."""
    found = site_branch(ctx)
    if found is None or not isinstance(found[0], cst.If) or found[0].orelse is not None:
        return None
    if_node, test = found
    small = single(if_node.body)
    if not isinstance(small, body_type):
        return None
    loop = _loop_block(ctx, if_node)
    cond = _condition(ctx, if_node, test)
    # found[0] is an If and small of body_type, a small statement: both checked above
    return None if loop is None or cond is None else (cast(cst.If, if_node), cast(cst.BaseSmallStatement, small), loop, cond)


def _line(small: cst.BaseSmallStatement) -> cst.SimpleStatementLine:
    return cst.SimpleStatementLine(body=[small])


def _assign(name: str, value: cst.BaseExpression) -> cst.Assign:
    return cst.Assign(targets=[cst.AssignTarget(cst.Name(name))], value=value)


# ---------------------------------------------------------------- if cond: continue


class LoopSkipToWhere(BranchRecipe):
    """`if cond: continue` followed by assignments -> the assignments always run,
    and each name that outlives the iteration keeps its old value where cond holds."""

    name = "loop-skip-to-where"
    # The skipped iterations' body runs too: its compute, and any state it
    # updates (BatchNorm statistics, random draws inside the layer).
    safety = "unsafe"
    summary = "replace a data-dependent `continue` (LayerDrop) by torch.where over the rest of the loop body"

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        found = _loop_if(ctx, cst.Continue)
        if found is None:
            return None
        if_node, _, (_, block, i), cond = found
        rest = [_assignment(s) for s in block.body[i + 1 :]]
        if not rest or any(a is None for a in rest):
            return None
        scope = scope_of(ctx, if_node)
        lines = list(block.body[i + 1 :])
        kept = _kept(scope, lines, rest)
        if not kept:
            return None  # nothing outlives the iteration: the `if` only saves compute
        for name in kept:
            if not (bound_before(ctx, name, if_node) and _is_tensor(ctx, name, scope)) or mutated(scope, name):
                return None
        new = _select_after(ctx, scope, if_node, cond, lines, rest, kept)
        self._plan = block.with_changes(body=[*block.body[:i], *new])
        return block


def _kept(scope: cst.CSTNode, lines: list[cst.BaseStatement], rest: list[cst.Assign]) -> list[str]:
    """Names the rest assigns that are read outside it, or read in it before
    being assigned: their value must survive a skipped iteration. The others
    are temporaries of the skipped computation."""
    inside = {id(n) for line in lines for n in walk(line)}
    out: list[str] = []
    for k, assign in enumerate(rest):
        for name in _assigned(assign):
            if name in out or any(name in _assigned(a) for a in rest[:k]):
                continue
            read_early = any(name in variable_names(a.value) for a in rest[: k + 1])
            if read_early or any(id(n) not in inside for n in variables(scope) if n.value == name):
                out.append(name)
    return out


def _in_place(name: str, rest: list[cst.Assign]) -> bool:
    """Whether `name = e` is the only assignment to ``name`` and nothing after reads it:
    then `name = torch.where(skip, name, e)` selects right there."""
    spots = [k for k, a in enumerate(rest) if name in _assigned(a)]
    k = spots[0]
    if len(spots) != 1 or name_of(rest[k].targets[0].target) != name:
        return False
    return not any(name in variable_names(a.value) for a in rest[k + 1 :])


def _select_after(ctx, scope, if_node, cond, lines, rest, kept) -> list[cst.BaseStatement]:
    """`skip = cond`, then the rest, with each kept name selected by torch.where:
    in its assignment where possible, else from the value saved before the rest."""
    taken: set[str] = set()
    skip = fresh(scope, "skip", taken)
    column = ctx.file.span(if_node)[0][1]

    def where(old: str, new: cst.BaseExpression) -> cst.Call:
        return make_call("torch.where", cst.Name(skip), cst.Name(old), new)

    saved = {n: fresh(scope, f"{n}_before", taken) for n in kept if not _in_place(n, rest)}
    out: list[cst.BaseStatement] = [statement(_assign(skip, cond), if_node)]
    out += [_line(_assign(s, cst.Name(n))) for n, s in saved.items()]
    for line, assign in zip(lines, rest):
        name = name_of(assign.targets[0].target)
        if name in kept and name not in saved:
            line = line.with_changes(body=[fit(assign.with_changes(value=where(name, assign.value)), column)])
        out.append(line)
    out += [_line(fit(_assign(n, where(s, cst.Name(n))), column)) for n, s in saved.items()]
    return out


# ---------------------------------------------------------------- if cond: return v


def _finite(expr: cst.BaseExpression) -> bool:
    """An iterable that certainly ends and is not consumed elsewhere: `range`,
    containers on `self` (ModuleList, ...) and slices of them, and
    zip/enumerate/reversed of those."""
    if isinstance(expr, (cst.Attribute, cst.Subscript)):
        root: cst.BaseExpression = expr
        while isinstance(root, (cst.Attribute, cst.Subscript)):
            root = root.value
        return name_of(root) == "self"
    if isinstance(expr, cst.Call) and not any(a.star or a.keyword for a in expr.args):
        recv, fn = called(expr)
        if recv is None and fn == "range":
            return True
        if recv is None and fn in _FINITE_WRAPPERS:
            return bool(expr.args) and all(_finite(a.value) for a in expr.args)
        return recv is not None and fn in _CONTAINER_VIEWS and not expr.args and _finite(recv)
    return False


def _value(expr: cst.BaseExpression) -> bool:
    """A returned expression that can be a tensor, free of side effects."""
    if isinstance(expr, (cst.BaseNumber, cst.BaseString, cst.Tuple, cst.List, cst.Dict, cst.Set, cst.Lambda)):
        return False
    return name_of(expr) not in ("None", "True", "False") and pure(expr)


def _returned(stmt: cst.BaseStatement) -> cst.BaseExpression | None:
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Return):
        return stmt.body[0].value
    return None


class EarlyExitToWhere(BranchRecipe):
    """`for ...: ...; if cond: return v` + `return e` -> every iteration runs and
    torch.where keeps the value of the first iteration where cond held."""

    name = "early-exit-to-where"
    # Every iteration runs: the compute the exit saved, and any state the extra
    # iterations' layers update (BatchNorm statistics, dropout draws in training).
    safety = "unsafe"
    summary = "replace a data-dependent early `return` from a loop by running every iteration and torch.where"

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        found = _loop_if(ctx, cst.Return)
        if found is None:
            return None
        if_node, ret, (for_node, block, i), cond = found
        outer = ctx.file.parent(for_node)
        fn = ctx.enclosing(cst.FunctionDef, node=for_node)
        if ret.value is None or i != len(block.body) - 1 or for_node.orelse is not None:
            return None
        if not isinstance(outer, cst.IndentedBlock) or fn is None:
            return None
        j = list(outer.body).index(for_node)
        final = _returned(outer.body[j + 1]) if j + 1 < len(outer.body) else None
        v = ret.value
        if final is None or not (_value(v) and _value(final)) or not _finite(for_node.iter):
            return None
        # The iterations after the exit now run too: their statements may only bind locals.
        if not all(_assignment(s) is not None for s in block.body[:i]) or not local_effects_only(if_node.test):
            return None
        if contains(fn, cst.Yield):
            return None
        self._plan = self._rewrite(ctx, fn, outer, j, block, if_node, cond, v, final)
        return outer

    @staticmethod
    def _rewrite(ctx, fn, outer, j, block, if_node, cond, v, final) -> cst.IndentedBlock:
        taken: set[str] = set()
        stop, exited, result = (fresh(fn, base, taken) for base in ("stop", "exited", "result"))
        pair = cst.Tuple([cst.Element(cst.Name(result)), cst.Element(cst.Name(exited))], lpar=[], rpar=[])

        def update(value: cst.BaseExpression, flag: cst.BaseExpression) -> cst.SimpleStatementLine:
            value_flag = cst.Tuple([cst.Element(value), cst.Element(flag)], lpar=[], rpar=[])
            return _line(cst.Assign(targets=[cst.AssignTarget(pair)], value=value_flag))

        first = cst.Comparison(cst.Name(exited), [cst.ComparisonTarget(cst.Is(), cst.Name("None"))])
        where = make_call("torch.where", cst.Name(exited), cst.Name(result), v)
        either = cst.BinaryOperation(cst.Name(exited), cst.BitOr(), cst.Name(stop))
        select = cst.If(
            test=first,
            body=cst.IndentedBlock([update(v, cst.Name(stop))]),
            orelse=cst.Else(cst.IndentedBlock([update(where, either)])),
        )
        loop_body = [*block.body[:-1], statement(_assign(stop, cond), if_node), select]
        for_node = outer.body[j]
        init = _line(_assign(exited, cst.Name("None"))).with_changes(leading_lines=for_node.leading_lines)
        new_for = for_node.with_changes(body=block.with_changes(body=loop_body), leading_lines=[])
        # After the loop: the remembered value, or what the original returns when
        # no iteration exited. When that is `v` again, the remembered value is it,
        # unless the loop may not run at all and `v` was bound before it.
        value: cst.BaseExpression
        if ctx.code(final) == ctx.code(v) and not all(bound_before(ctx, n, for_node) for n in variable_names(v)):
            value = cst.Name(result)
        else:
            value = cst.IfExp(
                test=first, body=final, orelse=make_call("torch.where", cst.Name(exited), cst.Name(result), final)
            )
        ret_line = outer.body[j + 1]
        ret_line = ret_line.with_changes(body=[ret_line.body[0].with_changes(value=value)])
        return outer.with_changes(body=[*outer.body[:j], init, new_for, ret_line, *outer.body[j + 2 :]])


RECIPES = (LoopSkipToWhere, EarlyExitToWhere)
