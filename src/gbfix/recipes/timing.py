"""GB0007 at a wall-clock read (``time.perf_counter()`` and friends) inside compiled code.

Timing code in a forward is a profiling aid: ``t0 = time.perf_counter()`` before
a step, ``self.stats["attn"] += time.perf_counter() - t0`` or a log line after
it. Dynamo cannot trace the clock (a skipped function, GB0007), so every read
cuts the graph. Nothing inside a graph can measure it either -- a compiled
graph runs as one unit -- so no rewrite keeps the behaviour. Both recipes
(unsafe) keep the timing for eager runs and give it up under compile.
``timing-under-compile`` (preferred) reads the clock in eager only, so the
timing code itself still runs (the stats still count calls)::

    t0 = time.perf_counter()          ->   t0 = (0.0 if torch.compiler.is_compiling() else time.perf_counter())

Under compile every read is 0.0 (0 for the ``_ns`` clocks), so the measured
times are 0. It declines where one divides by a time (a rate, ``n / dt``),
which would raise ZeroDivisionError. ``skip-timing`` drops the timing code
under compile instead::

    t0 = time.perf_counter()                     if not torch.compiler.is_compiling():
    y = self.attn(x)                        ->       t0 = time.perf_counter()
    self.stats["attn"] += time.perf_counter() - t0   y = self.attn(x)
                                                 if not torch.compiler.is_compiling():
                                                     self.stats["attn"] += time.perf_counter() - t0

Dynamo evaluates ``torch.compiler.is_compiling()`` (since torch 2.3) to the
constant True while tracing: it keeps the 0.0 branch, or drops the guarded
statements; run eagerly they run as before. Under ``skip-timing`` the stats
stay as they were and the log lines are not written, which the verifier sees
when they are printed.

For both, the timing code must be self-contained: starting from the statement of
the break, every statement that assigns or reads a timing variable (a local
assigned in one of them; ``t0``, ``dt``), and the statements whose clock reads
feed one, must each be a single simple statement -- an assignment, an
augmented assignment, or a call to ``print``, a logging method or a container's
``append``/``add``/``update``... -- and no other code may read those variables
(a ``return``, an ``if`` test, a nested function, a call's result used). The
GB0007 code is shared with ``warnings.warn`` (``warn_call``) and other skipped
functions: only calls of the ``time`` module's clocks are taken.

One shape keeps the behaviour exactly, and ``clock-into-branch`` (safe, tried
first) takes it: a read whose value is only used under one ``if COND:``, where
COND is a pure test of values that cannot change in between (flags set in
``__init__``, module constants, parameters never rebound)::

    t0 = time.perf_counter()                 if self.profile:
    y = self.mlp(x)                     ->       t0 = time.perf_counter()
    if self.profile:                         y = self.mlp(x)
        print(time.perf_counter() - t0)      if self.profile:
                                                 print(time.perf_counter() - t0)

The clock is read at the same point whenever its value is used; when COND is
false it was dead, and reading a clock has no effect. A variable timed again
for the next stage (``t0`` bound once per stage) is followed from each binding
to the next, when every binding is a statement of the read's block. Dynamo folds a Python
flag, so the graph has no break when it is off. When it is on (or for a test
that varies from call to call, ``if step % every == 0:``) the read still
breaks on those calls, and the verifier keeps the edit only if the site is gone
from the program's run.
"""

from __future__ import annotations

import libcst as cst
from libcst.metadata import Assignment, Scope

from gbfix.recipes.analysis import call_at, is_module_global, qualified_names
from gbfix.recipes.base import Decline, Recipe, Replacement, SiteContext
from gbfix.recipes.tree import contains, nodes, variables, walk

_CLOCKS = frozenset(
    f"time.{name}{suffix}"
    for name in ("perf_counter", "time", "monotonic", "process_time", "thread_time")
    for suffix in ("", "_ns")
)
# Calls a timing statement may make for its effect: reporting and collecting.
_REPORTING = frozenset(
    "debug info warning warn error critical log append extend add update insert setdefault".split()
)
# Operators whose right operand must not be a time that is 0 under compile.
_DIVISIONS = (cst.Divide, cst.FloorDivide, cst.Modulo)
_DIVISIONS_ASSIGN = (cst.DivideAssign, cst.FloorDivideAssign, cst.ModuloAssign)


class _Timing(Recipe):
    """What both recipes check: the clock read at the site and the timing
    statements tied to it, which must be self-contained (see the module doc)."""

    codes = ("GB0007",)
    safety = "unsafe"
    rule = "GB0007"

    def _timing(self, ctx: SiteContext) -> tuple[cst.Call, list[cst.SimpleStatementLine]] | None:
        call = call_at(ctx)
        if call is None or not self._is_clock(ctx, call):
            return None
        self._ctx = ctx
        fn = ctx.enclosing(cst.FunctionDef, node=call)
        stmt = ctx.enclosing(cst.SimpleStatementLine, node=call)
        if fn is None or stmt is None or self._function(stmt) is not fn:
            return None
        self._fn = fn
        try:
            return call, self._group(stmt)
        except Decline as why:
            raise Decline(f"the timing code is not self-contained: {why}") from None

    # ---- finding the timing statements ----

    @staticmethod
    def _is_clock(ctx: SiteContext, call: cst.Call) -> bool:
        names = qualified_names(ctx, call.func)
        return bool(names) and names <= _CLOCKS

    def _function(self, node: cst.CSTNode) -> cst.CSTNode | None:
        """The function or lambda whose body ``node`` runs in."""
        return next((a for a in self._ctx.ancestors(node) if isinstance(a, (cst.FunctionDef, cst.Lambda))), None)

    def _statement(self, node: cst.CSTNode) -> cst.SimpleStatementLine:
        """The statement of this function holding ``node``; it must be a simple one."""
        stmt = self._ctx.enclosing(cst.SimpleStatementLine, node=node)
        inside = stmt is not None and all(self._function(n) is self._fn for n in (node, stmt))
        if stmt is None or not inside:
            raise Decline("in a compound statement or a nested scope")
        return stmt

    def _group(self, start: cst.SimpleStatementLine) -> list[cst.SimpleStatementLine]:
        """The statement of the break plus everything tied to it through timing variables."""
        group: dict[int, cst.SimpleStatementLine] = {id(start): start}
        done: set[str] = set()
        todo = [start]
        while todo:
            stmt = todo.pop()
            self._check(stmt)
            for name in self._timing_names(stmt) - done:
                done.add(name)
                for node in self._uses(stmt, name):
                    other = self._statement(node)
                    if id(other) not in group:
                        group[id(other)] = other
                        todo.append(other)
        self._timing_vars = done
        return list(group.values())

    def _timing_names(self, stmt: cst.SimpleStatementLine) -> set[str]:
        """Locals the statement assigns, and locals it reads that some clock read assigns."""
        scope = self._scope(stmt)
        names: set[str] = set()
        for node in variables(stmt):
            for a in scope[node.value] if scope is not None else ():
                if not isinstance(a, Assignment) or a.scope is not scope or isinstance(a.node, cst.Param):
                    continue
                if a.node is node:
                    names.add(node.value)
                    continue
                source = self._ctx.enclosing(cst.SimpleStatementLine, node=a.node)
                if source is not None and self._has_clock(source):
                    names.add(node.value)
        return names

    def _uses(self, stmt: cst.SimpleStatementLine, name: str) -> list[cst.CSTNode]:
        """Every node binding or reading the local ``name``, nested scopes included."""
        scope = self._scope(stmt)
        out: list[cst.CSTNode] = []
        for a in scope.assignments[name]:
            if not isinstance(a, Assignment):
                raise Decline("bound by an import, a global declaration, ...")
            out.append(a.node)
            out.extend(ref.node for ref in a.references)
        return out

    def _scope(self, stmt: cst.CSTNode) -> Scope | None:
        return self._ctx.file.scopes.get(stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) else stmt)

    def _has_clock(self, node: cst.CSTNode) -> bool:
        return contains(node, cst.Call, lambda n: self._is_clock(self._ctx, n))

    def _check(self, stmt: cst.SimpleStatementLine) -> None:
        """A statement that may go under the guard: one assignment or reporting call."""
        if len(stmt.body) != 1:
            raise Decline("several statements on the line")
        small = stmt.body[0]
        if isinstance(small, cst.Assign):
            if any(isinstance(t.target, (cst.Tuple, cst.List, cst.StarredElement)) for t in small.targets):
                raise Decline("unpacking")
        elif isinstance(small, cst.AnnAssign):
            if small.value is None:
                raise Decline("annotation only")
        elif isinstance(small, cst.Expr):
            if not self._reporting(small.value):
                raise Decline("a call that may do more than report")
        elif not isinstance(small, cst.AugAssign):
            raise Decline("return, raise, del, ...")
        if contains(stmt, (cst.NamedExpr, cst.Yield, cst.Await, cst.Lambda)):
            raise Decline("walrus, yield, await or lambda")

    def _reporting(self, expr: cst.BaseExpression) -> bool:
        if not isinstance(expr, cst.Call):
            return False
        func = expr.func
        if isinstance(func, cst.Name):
            return func.value == "print" and qualified_names(self._ctx, func) == {"builtins.print"}
        return isinstance(func, cst.Attribute) and func.attr.value in _REPORTING

    @staticmethod
    def _common_block(ctx: SiteContext, group: list[cst.SimpleStatementLine]) -> cst.IndentedBlock | None:
        """The innermost block holding every statement of the group."""
        first, *rest = group
        for block in ctx.ancestors(first):
            if isinstance(block, cst.IndentedBlock) and all(any(a is block for a in ctx.ancestors(s)) for s in rest):
                return block
        return None


class SkipTiming(_Timing):
    name = "skip-timing"
    summary = "guard wall-clock timing with `if not torch.compiler.is_compiling():`: it runs in eager only"

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        found = self._timing(ctx)
        if found is None:
            return None
        group = found[1]
        self._group_ids = {id(s) for s in group}
        return self._common_block(ctx, group)

    def rewrite(self, node: cst.CSTNode) -> Replacement | None:
        self.need_import("torch")
        return node.visit(self)

    def leave_IndentedBlock(
        self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock
    ) -> cst.IndentedBlock:
        body: list[cst.BaseStatement] = []
        run: list[cst.BaseStatement] = []  # consecutive timing statements, guarded together

        def flush() -> None:
            if run:
                first = run[0]
                body.append(
                    cst.If(
                        test=cst.parse_expression("not torch.compiler.is_compiling()"),
                        body=cst.IndentedBlock([first.with_changes(leading_lines=[]), *run[1:]]),
                        leading_lines=first.leading_lines,
                    )
                )
                run.clear()

        for before, after in zip(original_node.body, updated_node.body):
            if id(before) in self._group_ids:
                run.append(after)
            else:
                flush()
                body.append(after)
        flush()
        return updated_node.with_changes(body=body)


class ClockUnderCompile(_Timing):
    name = "timing-under-compile"
    summary = "read the clock in eager only: `(0.0 if torch.compiler.is_compiling() else time.perf_counter())`"

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        found = self._timing(ctx)
        if found is None:
            return None
        call, group = found
        if any(self._divides_by_time(s) for s in group):
            return None  # 0.0 would divide by zero under compile: skip-timing takes it
        in_ns = {q.endswith("_ns") for q in qualified_names(ctx, call.func)}
        self._zero = "0" if in_ns == {True} else "0.0"
        return call

    def rewrite(self, node: cst.CSTNode) -> Replacement | None:
        self.need_import("torch")
        guarded = cst.parse_expression(f"({self._zero} if torch.compiler.is_compiling() else _)")
        return guarded.with_changes(orelse=node.with_changes(lpar=[], rpar=[]))

    def _divides_by_time(self, stmt: cst.SimpleStatementLine) -> bool:
        """A division or modulo whose right operand holds a clock read or a timing variable."""

        def timed(expr: cst.CSTNode) -> bool:
            return self._has_clock(expr) or any(n.value in self._timing_vars for n in variables(expr))

        def divides(n: cst.CSTNode) -> bool:
            if isinstance(n, cst.BinaryOperation) and isinstance(n.operator, _DIVISIONS):
                return timed(n.right)
            if isinstance(n, cst.AugAssign) and isinstance(n.operator, _DIVISIONS_ASSIGN):
                return timed(n.value)
            return False

        return any(divides(n) for n in walk(stmt))


class ClockIntoBranch(Recipe):
    name = "clock-into-branch"
    codes = ("GB0007",)
    safety = "safe"
    summary = "read the clock under the `if` that uses it (`if self.profile:`): the same reads whenever one is used"
    rule = "GB0007"

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        call = call_at(ctx)
        if call is None or not _Timing._is_clock(ctx, call):
            return None
        stmt = ctx.enclosing(cst.SimpleStatementLine, node=call)
        fn = ctx.enclosing(cst.FunctionDef, cst.Lambda, node=call)
        if stmt is None or not isinstance(fn, cst.FunctionDef) or not self._binds_clock(ctx, stmt):
            return None
        target = stmt.body[0].targets[0].target
        tests = [self._guard(ctx, stmt, use) for use in self._reached(ctx, stmt, target)]
        if not tests or any(t is None for t in tests) or any(not t.deep_equals(tests[0]) for t in tests):
            raise Decline(f"`{target.value}` is used outside one `if` test that follows the read")
        self._test = tests[0]
        if not self._static(ctx, fn, self._test):
            raise Decline("the `if` test may change between the read and the `if`")
        return stmt

    def rewrite(self, node: cst.CSTNode) -> Replacement:
        assert isinstance(node, cst.SimpleStatementLine)
        body = cst.IndentedBlock([node.with_changes(leading_lines=[])])
        return cst.If(test=self._test, body=body, leading_lines=node.leading_lines)

    @staticmethod
    def _binds_clock(ctx: SiteContext, stmt: cst.SimpleStatementLine) -> bool:
        """``name = <clock read>``: binding the value is the statement's only effect."""
        if len(stmt.body) != 1 or not isinstance(stmt.body[0], cst.Assign):
            return False
        assign = stmt.body[0]
        if len(assign.targets) != 1 or not isinstance(assign.targets[0].target, cst.Name):
            return False
        value = assign.value
        return isinstance(value, cst.Call) and not value.args and _Timing._is_clock(ctx, value)

    @staticmethod
    def _reached(ctx: SiteContext, read: cst.SimpleStatementLine, target: cst.Name) -> list[cst.CSTNode]:
        """The uses of ``target`` that read the value this statement binds. With several
        bindings (``t0`` timed again for the next stage) each must be a statement of the
        read's own block, and each use lies below one of them in that block: it reads the
        nearest binding above it."""
        scope = ctx.file.scopes.get(target)
        bound = list(scope.assignments[target.value]) if scope is not None else []
        if not all(isinstance(a, Assignment) for a in bound):
            raise Decline(f"`{target.value}` is bound by an import or a global declaration")
        uses = list({id(r.node): r.node for a in bound for r in a.references}.values())
        if len(bound) == 1:
            return uses
        block = ctx.file.parent(read)
        body = list(getattr(block, "body", ()))

        def position(node: cst.CSTNode) -> int | None:
            """The index in the block of the statement holding ``node``."""
            for n in (node, *ctx.ancestors(node)):
                if ctx.file.parent(n) is block:
                    return body.index(n)
            return None

        binds = []
        for a in bound:
            line = ctx.enclosing(cst.SimpleStatementLine, node=a.node)
            if line is None or ctx.file.parent(line) is not block or not isinstance(line.body[0], cst.Assign):
                raise Decline(f"`{target.value}` is bound more than once, not all by statements of one block")
            binds.append(body.index(line))
        mine, reached = body.index(read), []
        for use in uses:
            at = position(use)
            before = [b for b in binds if at is not None and b < at]
            if not before:
                raise Decline(f"a use of `{target.value}` may read a value bound outside the block")
            if max(before) == mine:
                reached.append(use)
        return reached

    @staticmethod
    def _guard(ctx: SiteContext, read: cst.SimpleStatementLine, use: cst.CSTNode) -> cst.BaseExpression | None:
        """The test of the ``if`` holding ``use`` in its body, when that ``if`` is a later
        statement of the read's own block (not an ``elif``)."""
        block = ctx.file.parent(read)
        for node in ctx.ancestors(use):
            up = ctx.file.parent(node)
            if up is block:
                if not isinstance(node, cst.If) or not isinstance(block, (cst.IndentedBlock, cst.Module)):
                    return None
                body = list(block.body)
                if body.index(node) <= body.index(read):
                    return None
                inside = any(a is node.body for a in ctx.ancestors(use))
                return node.test if inside else None
        return None

    @staticmethod
    def _static(ctx: SiteContext, fn: cst.FunctionDef, test: cst.BaseExpression) -> bool:
        """``test`` evaluates to the same value at the read as at the ``if``, with no effect:
        operators on literals, parameters the function never rebinds, module globals
        bound once, and ``self.<flag>`` set only in ``__init__``."""
        for node in walk(test):
            if isinstance(node, (cst.Call, cst.Subscript, cst.Lambda, cst.NamedExpr, cst.Await, cst.Yield)):
                return False
            if isinstance(node, cst.Attribute):
                if not (isinstance(node.value, cst.Name) and node.value.value == "self"):
                    return False
                if not ClockIntoBranch._init_flag(ctx, fn, node.attr.value):
                    return False
        for name in variables(test):
            if name.value in ("True", "False", "None"):
                continue
            scope = ctx.file.scopes.get(name)
            bound = list(scope[name.value]) if scope is not None else []
            if not bound:
                return False
            params = all(isinstance(a, Assignment) and isinstance(a.node, cst.Param) for a in bound)
            if params and all(a.scope is ctx.file.scopes.get(fn.body) for a in bound):
                continue
            if len(bound) == 1 and is_module_global(ctx, name) and not ClockIntoBranch._declared_global(ctx, name.value):
                continue
            return False
        return True

    @staticmethod
    def _init_flag(ctx: SiteContext, fn: cst.FunctionDef, attr: str) -> bool:
        """The method's class assigns ``self.<attr>`` in ``__init__`` and nowhere else, and
        defines no method or property of that name."""
        cls = ctx.enclosing(cst.ClassDef, node=fn)
        if cls is None or not fn.params.params or fn.params.params[0].name.value != "self":
            return False
        in_init = False
        for method in cls.body.body:
            if isinstance(method, cst.FunctionDef) and method.name.value == attr:
                return False
        for node in walk(cls):
            target: cst.BaseExpression | None = None
            if isinstance(node, cst.AssignTarget):
                target = node.target
            elif isinstance(node, (cst.AugAssign, cst.AnnAssign)):
                target = node.target
            elif isinstance(node, cst.Del):
                target = node.target
            for t in [target] if target is not None else []:
                for a in nodes(t, cst.Attribute):
                    if isinstance(a.value, cst.Name) and a.value.value == "self" and a.attr.value == attr:
                        init = ctx.enclosing(cst.FunctionDef, node=a)
                        if init is None or init.name.value != "__init__" or isinstance(node, cst.Del):
                            return False
                        in_init = True
        return in_init

    @staticmethod
    def _declared_global(ctx: SiteContext, name: str) -> bool:
        return any(any(n.name.value == name for n in g.names) for g in nodes(ctx.module, cst.Global))


RECIPES = (ClockIntoBranch, ClockUnderCompile, SkipTiming)
