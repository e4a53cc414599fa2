"""GB0123 / GB4347 (and the optimizer's GB0007, GB0025): a compiled training
step that starts by pulling a batch or ends with the backward pass.

``next(it)`` on an iterator passed in (GB4347; on a DataLoader's iterator
GB0008), ``loss.backward()`` (GB0123; ``torch.autograd.backward``: GB0007),
``optimizer.step()`` (GB0025 or GB0007), ``optimizer.zero_grad()`` and
``scheduler.step()`` (GB0008) each break the graph. ``split-compiled-step``
moves the compile boundary instead: the statements between the last batch
pull and the first backward/step become a module-level function that carries
the ``torch.compile`` decorator (or the arguments of the ``torch.compile(fn,
...)`` call), and the step keeps the rest, run eagerly as it was anyway. One
edit answers every break of the step (GB0008 is not claimed: no rules/ page;
its sites go with the same edit)::

    @torch.compile(backend="eager")               @torch.compile(backend="eager")
    def train_step(model, opt, it):               def _train_step_compiled(model, x, y):
        x, y = next(it)                               loss = F.mse_loss(model(x), y)
        loss = F.mse_loss(model(x), y)     ->         return loss
        loss.backward()
        opt.step()                                def train_step(model, opt, it):
        return loss                                   x, y = next(it)
                                                      loss = _train_step_compiled(model, x, y)
                                                      loss.backward()
                                                      opt.step()
                                                      return loss

Only top-level statements of the step are cut: the prefix ends at the last one
pulling a batch (``next(...)`` anywhere in it) or calling ``.zero_grad()``
before the first ``.backward()`` / ``.step()`` / ``torch.autograd.backward``
statement, where the suffix starts. The helper takes the step's locals that
the middle reads (the step's parameters first, in signature order) and
returns those the suffix reads (a tuple when several); without a suffix the
step returns what the helper returns, nested returns included. A method's
helper goes before its class and takes ``self``. The function may be compiled
by its only decorator, or by one ``torch.compile(fn, <literal keywords>)`` /
``torch.compile(self.method, ...)`` call in the file, which then hands out
the function itself (``fn = torch.compile(fn)`` at module level and
``self.fn = torch.compile(self.fn)`` in a method are dropped).

Declined: a break in the middle (nested in a middle block included); nothing
worth compiling between the cuts; a middle that still pulls, runs backward or
zeroes grads, or returns while a suffix follows; nested functions, lambdas or
classes, yield, await, walrus, ``global``/``nonlocal``/``del`` or frame
introspection in the step; a method's private ``__names`` in the middle; a
name the middle reads that is bound only conditionally before it or only
after it; one the suffix reads that the middle binds only conditionally; a
generator expression in the middle reading a name the suffix rebinds; other
decorators; a compile call with non-literal arguments, or on a function the
file also uses uncompiled (``fn = torch.compile(fn)`` under an ``if`` included).
"""

from __future__ import annotations

import libcst as cst
from libcst.metadata import ComprehensionScope, Scope

from gbfix.recipes.analysis import global_bindings, is_module_global, qualified_names
from gbfix.recipes.base import Recipe, SiteContext

# Private helpers of generator.py, shared on purpose: the same move of torch.compile.
from gbfix.recipes.generator import (
    _INTROSPECTION,
    _WORK,
    _classes_around,
    _is_compile,
    _reads,
    _reads_class_names,
)
from gbfix.recipes.layout import is_docstring
from gbfix.recipes.tree import contains, nodes, variables

# What the transformer's leave_FunctionDef / leave_ClassDef may return (libcst's typed transformer).
Statements = cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement] | cst.RemovalSentinel

# What a split cannot keep the meaning of: closures over the step's locals,
# suspension points, bindings the helper would make its own, frame tricks.
_UNSPLITTABLE = (
    cst.FunctionDef,
    cst.Lambda,
    cst.ClassDef,
    cst.Yield,
    cst.Await,
    cst.NamedExpr,
    cst.Global,
    cst.Nonlocal,
    cst.Del,
)
# Nodes on the way from a binding up to its top-level statement that run it
# whenever the statement runs (an ``IndentedBlock`` only as a ``with`` body).
_PLAIN = (
    cst.Name,
    cst.Tuple,
    cst.List,
    cst.Element,
    cst.StarredElement,
    cst.AssignTarget,
    cst.Assign,
    cst.AugAssign,
    cst.AnnAssign,
    cst.Import,
    cst.ImportFrom,
    cst.AsName,
    cst.WithItem,
    cst.With,
    cst.SimpleStatementLine,
)
_LITERALS = (cst.SimpleString, cst.ConcatenatedString, cst.Integer, cst.Float, cst.Imaginary)


class SplitCompiledStep(Recipe):
    name = "split-compiled-step"
    codes = ("GB0123", "GB4347", "GB0008", "GB0025", "GB0007")
    safety = "safe"
    # One compiled step becomes one compiled call of its middle: outputs are
    # not comparable call for call; what the program prints is.
    tolerates = frozenset({"compile-boundary"})
    summary = "compile the step's middle as its own function; the batch pull and backward/optimizer calls run eagerly around it"
    rule = "GB0123"

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        fn = ctx.enclosing(cst.FunctionDef)
        if fn is None or fn.asynchronous or not isinstance(fn.body, cst.IndentedBlock):
            return None
        body = list(fn.body.body)
        around = {id(n) for n in (ctx.node, *ctx.ancestors())}
        at = next((i for i, stmt in enumerate(body) if id(stmt) in around), None)
        classes = _classes_around(ctx, fn)
        if at is None or classes is None or contains(fn.body, _UNSPLITTABLE) or _introspects(ctx, fn):
            return None
        cuts = _cuts(ctx, body)
        if cuts is None or cuts[0] < at < cuts[1]:
            return None
        p, s = cuts
        middle = body[p + 1 : s]
        if classes and any(contains(m, cst.Name, _private) for m in middle):
            return None
        if s < len(body) and any(contains(m, cst.Return) for m in middle):
            return None
        flow = _flow(ctx, fn, body, p, s)
        compiled = _compiled_by(ctx, fn, classes)
        if flow is None or compiled is None:
            return None
        parts = [q for n in (*reversed(classes), fn) if (q := n.name.value.strip("_"))]
        helper = "_" + "_".join([*parts, "compiled"])
        if contains(ctx.module, cst.Name, lambda n: n.value == helper):
            return None
        self._fn, self._cuts, self._flow, self._helper = fn, cuts, flow, helper
        self._decorator, self._call, self._drop = compiled
        self._place = classes[-1] if classes else fn
        if self._call is None:
            return self._place
        return classes[-1] if classes else ctx.module

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef) -> Statements:
        if original_node is not self._fn:
            return updated_node
        p, s = self._cuts
        params, returned = self._flow
        body = list(updated_node.body.body)
        middle, suffix = body[p + 1 : s], body[s:]
        call = cst.Call(cst.Name(self._helper), [cst.Arg(cst.Name(n)) for n in params])
        if not suffix:
            small: cst.BaseSmallStatement = cst.Return(call)
        elif returned:
            small = cst.Assign([cst.AssignTarget(_names(returned))], call)
        else:
            small = cst.Expr(call)
        # Blank lines above the middle stay in the step; its comments go with it.
        lines = list(middle[0].leading_lines)
        blank = next((i for i, line in enumerate(lines) if line.comment is not None), len(lines))
        note = cst.EmptyLine(
            comment=cst.Comment(
                f"# Added by gbfix: the part of {self._fn.name.value} that compiles;"
                " what breaks the graph stays there, eager."
            )
        )
        inner = [middle[0].with_changes(leading_lines=[note, *lines[blank:]]), *middle[1:]]
        if suffix and returned:
            inner.append(cst.SimpleStatementLine([cst.Return(_names(returned))]))
        self._helper_def = cst.FunctionDef(
            name=cst.Name(self._helper),
            params=cst.Parameters(params=[cst.Param(cst.Name(n)) for n in params]),
            body=cst.IndentedBlock(inner),
            decorators=[self._decorator],
        )
        step = cst.SimpleStatementLine([small], leading_lines=lines[:blank])
        new = updated_node.with_changes(body=updated_node.body.with_changes(body=[*body[: p + 1], step, *suffix]))
        if self._call is None:
            new = new.with_changes(decorators=[])
        return self._placed(new) if original_node is self._place else new

    def leave_ClassDef(self, original_node: cst.ClassDef, updated_node: cst.ClassDef) -> Statements:
        return self._placed(updated_node) if original_node is self._place else updated_node

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        # torch.compile(fn, ...) hands out fn: its middle is compiled now.
        return updated_node.args[0].value if original_node is self._call else updated_node

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.SimpleStatementLine | cst.RemovalSentinel:
        return cst.RemovalSentinel.REMOVE if original_node is self._drop else updated_node

    def _placed(self, new: cst.BaseCompoundStatement) -> cst.FlattenSentinel:
        """The helper right before ``new``: it takes the blank lines above, ``new`` keeps its comments."""
        lines = list(new.leading_lines)
        blank = next((i for i, line in enumerate(lines) if line.comment is not None), len(lines))
        helper = self._helper_def.with_changes(leading_lines=lines[:blank])
        new = new.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine(), *lines[blank:]])
        return cst.FlattenSentinel([helper, new])


def _cuts(ctx: SiteContext, body: list[cst.BaseStatement]) -> tuple[int, int] | None:
    """(p, s): ``body[:p + 1]`` is the prefix, ``body[s:]`` the suffix; None
    without either, or when the middle between them holds nothing worth
    compiling or still pulls a batch, runs backward or zeroes grads."""
    kinds = [_kind(ctx, stmt) for stmt in body]
    s = next((i for i, k in enumerate(kinds) if k == "after"), len(body))
    p = max((i for i in range(s) if kinds[i] in ("next", "zero")), default=-1)
    if p < 0 and s == len(body):
        return None
    if is_docstring(body[0]):
        p = max(p, 0)  # the docstring stays the step's
    middle = body[p + 1 : s]
    if not any(contains(m, _WORK) for m in middle):
        return None
    if any(contains(m, cst.Call, lambda c: _is_next(ctx, c) or _attr(c) in ("backward", "zero_grad")) for m in middle):
        return None  # it would still break inside the helper
    return p, s


def _kind(ctx: SiteContext, stmt: cst.BaseStatement) -> str | None:
    """"next": pulls a batch; "zero": ``x.zero_grad()``; "after": a backward
    pass or an optimizer / scheduler / scaler step; None: anything else."""
    if not isinstance(stmt, cst.SimpleStatementLine):
        return None
    if contains(stmt, cst.Call, lambda c: _is_next(ctx, c)):
        return "next"
    if len(stmt.body) != 1 or not isinstance(stmt.body[0], cst.Expr) or not isinstance(stmt.body[0].value, cst.Call):
        return None
    call = stmt.body[0].value
    if _attr(call) == "zero_grad":
        return "zero"
    if _attr(call) in ("backward", "step") or qualified_names(ctx, call.func) == {"torch.autograd.backward"}:
        return "after"
    return None


def _is_next(ctx: SiteContext, call: cst.Call) -> bool:
    return qualified_names(ctx, call.func) == {"builtins.next"}


def _attr(call: cst.Call) -> str | None:
    """``m`` for a method call ``x.m(...)``."""
    return call.func.attr.value if isinstance(call.func, cst.Attribute) else None


def _private(n: cst.Name) -> bool:
    """A ``__name`` is mangled in a class body, not in the module-level helper."""
    return n.value.startswith("__") and not n.value.endswith("__")


def _introspects(ctx: SiteContext, fn: cst.FunctionDef) -> bool:
    """``locals()``, ``super()``, ``__class__``...: the helper's frame is another one."""
    return any(n.value == "__class__" or qualified_names(ctx, n) & _INTROSPECTION for n in _reads(ctx, fn.body))


def _flow(
    ctx: SiteContext, fn: cst.FunctionDef, body: list[cst.BaseStatement], p: int, s: int
) -> tuple[list[str], list[str]] | None:
    """The step's locals the middle reads from before it (the helper's
    parameters) and those the suffix reads from it (its return value), in
    order of first read; None when a name's value cannot be handed over."""
    scope = ctx.file.scopes[body[0]]
    top = {id(stmt): i for i, stmt in enumerate(body)}

    def where(node: cst.CSTNode) -> tuple[int, bool]:
        """The top-level statement binding at ``node`` (-1: a parameter), and
        whether it binds whenever that statement runs."""
        plain = True
        for n in (node, *ctx.ancestors(node)):
            with_body = isinstance(n, cst.IndentedBlock) and isinstance(ctx.file.parent(n), cst.With)
            bare = isinstance(n, cst.AnnAssign) and n.value is None  # `x: int` binds nothing
            plain = plain and (isinstance(n, _PLAIN) or with_body) and not bare
            if id(n) in top:  # the statement itself too: a `for` target may stay unbound
                return top[id(n)], plain
        return -1, True

    def bindings(name: str) -> list[tuple[int, bool]]:
        return [where(a.node) for a in scope.assignments[name]]

    params: list[str] = []
    for name in _local_reads(ctx, scope, body[p + 1 : s]):
        found = bindings(name)
        before = [plain for i, plain in found if i <= p]
        if before and not any(before):
            return None  # bound only conditionally before the middle
        if not before and not any(p < i < s for i, _ in found):
            return None  # bound only after the middle: a global in the helper
        if before:
            params.append(name)
    # The step's own parameters first, as its signature lists them; then the prefix's names.
    signature = [q.name.value for q in _params(fn)]
    params.sort(key=lambda n: signature.index(n) if n in signature else len(signature))
    returned = [n for n in _local_reads(ctx, scope, body[s:]) if any(p < i < s for i, _ in bindings(n))]
    if any(n not in params and not any(p < i < s and plain for i, plain in bindings(n)) for n in returned):
        return None  # the middle may leave it unbound: the helper's return would raise
    rebound = {a.name for a in scope.assignments if where(a.node)[0] >= s}
    lazy = [g for m in body[p + 1 : s] for g in nodes(m, cst.GeneratorExp)]
    if set(_local_reads(ctx, scope, lazy)) & rebound:
        return None  # consumed in the suffix, it would read the helper's value where the step's changed
    return params, returned


def _params(fn: cst.FunctionDef) -> list[cst.Param]:
    p = fn.params
    star = [s for s in (p.star_arg,) if isinstance(s, cst.Param)]
    return [*p.posonly_params, *p.params, *star, *p.kwonly_params, *([p.star_kwarg] if p.star_kwarg else [])]


def _local_reads(ctx: SiteContext, fn_scope: Scope, stmts: list[cst.CSTNode]) -> list[str]:
    """The function's locals read in ``stmts``, in order of first read."""

    def local(n: cst.Name) -> bool:
        scope = ctx.file.scopes[n]
        while isinstance(scope, ComprehensionScope) and not scope.assignments[n.value]:
            scope = scope.parent
        return scope is fn_scope and bool(fn_scope.assignments[n.value])

    return list(dict.fromkeys(n.value for stmt in stmts for n in _reads(ctx, stmt) if local(n)))


def _names(names: list[str]) -> cst.BaseExpression:
    if len(names) == 1:
        return cst.Name(names[0])
    return cst.Tuple([cst.Element(cst.Name(n)) for n in names], lpar=[], rpar=[])


def _compiled_by(
    ctx: SiteContext, fn: cst.FunctionDef, classes: list[cst.ClassDef]
) -> tuple[cst.Decorator, cst.Call | None, cst.SimpleStatementLine | None] | None:
    """How ``fn`` gets compiled: (the helper's decorator, the ``torch.compile``
    call to replace by its argument or None for a decorator, an ``fn = torch.compile(fn)``
    statement to drop); None when not in a way this recipe can move."""
    if fn.decorators:
        decorator = fn.decorators[0]
        if len(fn.decorators) != 1 or not _is_compile(ctx, decorator.decorator):
            return None
        if classes and _reads_class_names(ctx, decorator, classes[0]):
            return None
        return decorator.with_changes(leading_lines=[]), None, None
    name = fn.name.value
    calls = [c for c in nodes(ctx.module, cst.Call) if c.args and _is_compile(ctx, c)]
    others = [n for n in variables(ctx.module) if n.value == name and n is not fn.name]
    refs = [a for a in nodes(ctx.module, cst.Attribute) if a.attr.value == name] if classes else others
    found = [c for c in calls if any(c.args[0].value is r for r in refs)]
    if len(found) != 1 or (classes and others):
        return None
    call = found[0]
    arg = call.args[0].value
    drop = _self_assignment(ctx, call, fn, classes)
    target = drop.body[0].targets[0].target if drop else None
    rest = [r for r in refs if r is not arg and r is not target]
    if rest and drop is None:
        return None  # the plain function is called elsewhere: that call was meant eager
    if classes:
        method = ctx.enclosing(cst.FunctionDef, node=call)
        if not _on_own_self(ctx, method, arg, classes[0]):
            return None
        if any(ctx.enclosing(cst.FunctionDef, node=r) is method for r in rest):
            return None  # a use next to `self.fn = torch.compile(self.fn)` may come before it
    else:
        if global_bindings(ctx, name) != [fn, *([target] if target else [])] or not is_module_global(ctx, arg):
            return None
        if any(_runs_before(ctx, r, drop) for r in rest):
            return None
    first, extra = call.args[0], call.args[1:]
    if first.keyword is not None or first.star or any(a.keyword is None or not _literal(a.value) for a in extra):
        return None
    root = call.func
    while isinstance(root, cst.Attribute):
        root = root.value
    if not (isinstance(root, cst.Name) and is_module_global(ctx, root)):
        return None  # `torch` / `compile` imported locally: unbound where the helper is
    if not extra:
        return cst.Decorator(call.func), call, drop
    args = [a.with_changes(comma=cst.MaybeSentinel.DEFAULT, whitespace_after_arg=cst.SimpleWhitespace("")) for a in extra]
    return cst.Decorator(call.with_changes(args=args, whitespace_before_args=cst.SimpleWhitespace(""))), call, drop


def _on_own_self(ctx: SiteContext, method: cst.FunctionDef | None, ref: cst.BaseExpression, cls: cst.ClassDef) -> bool:
    """``torch.compile(self.fn)`` in a plain method of the class defining ``fn``, on that method's ``self``."""
    if method is None or method.decorators or ctx.file.parent(ctx.file.parent(method)) is not cls:
        return False
    given = [*method.params.posonly_params, *method.params.params]
    receiver = ref.value if isinstance(ref, cst.Attribute) else None
    return bool(given) and isinstance(receiver, cst.Name) and given[0].name.value == receiver.value


def _self_assignment(
    ctx: SiteContext, call: cst.Call, fn: cst.FunctionDef, classes: list[cst.ClassDef]
) -> cst.SimpleStatementLine | None:
    """``fn = torch.compile(fn, ...)`` at module level after the def, or
    ``self.fn = torch.compile(self.fn, ...)`` in a method with more to it:
    the statement to drop once ``fn`` compiles its own middle."""
    assign = ctx.file.parent(call)
    line = ctx.file.parent(assign) if assign is not None else None
    if not (isinstance(assign, cst.Assign) and isinstance(line, cst.SimpleStatementLine)):
        return None
    if len(assign.targets) != 1 or len(line.body) != 1:
        return None
    target, block = assign.targets[0].target, ctx.file.parent(line)
    if classes:
        same = isinstance(target, cst.Attribute) and target.deep_equals(call.args[0].value)
        method = ctx.enclosing(cst.FunctionDef, node=call)
        in_method = isinstance(block, cst.IndentedBlock) and ctx.file.parent(block) is method
        return line if same and in_method and len(block.body) > 1 else None
    same = isinstance(target, cst.Name) and target.value == fn.name.value
    return line if same and block is ctx.module and ctx.file.span(line)[0] > ctx.file.span(fn)[0] else None


def _runs_before(ctx: SiteContext, ref: cst.Name, drop: cst.SimpleStatementLine | None) -> bool:
    """A module-level use of the name above ``fn = torch.compile(fn)``: it meant the plain function."""
    inside = ctx.enclosing(cst.FunctionDef, cst.Lambda, node=ref) is not None
    return drop is not None and not inside and ctx.file.span(ref)[0] < ctx.file.span(drop)[0]


def _literal(node: cst.BaseExpression) -> bool:
    """A value that means the same wherever it is evaluated."""
    if isinstance(node, _LITERALS):
        return True
    if isinstance(node, cst.Name):
        return node.value in ("True", "False", "None")
    if isinstance(node, cst.UnaryOperation):
        return isinstance(node.operator, cst.Minus) and isinstance(node.expression, (cst.Integer, cst.Float))
    if isinstance(node, (cst.Tuple, cst.List, cst.Set)):
        return all(isinstance(e, cst.Element) and _literal(e.value) for e in node.elements)
    if isinstance(node, cst.Dict):
        return all(isinstance(e, cst.DictElement) and _literal(e.key) and _literal(e.value) for e in node.elements)
    return False


RECIPES = (SplitCompiledStep,)
