"""GB0170 in the test of a `while`: the loop as torch.while_loop.

    while cond(a, b):                   def _gbfix_while_cond(a, b):
        <body assigning a, b>               return cond(a, b)
                                    ->  def _gbfix_while_body(a, b):
                                            <body assigning a, b>
                                            return a, b
                                        a, b = torch.while_loop(_gbfix_while_cond, _gbfix_while_body, (a, b))

Dynamo breaks on a tensor test every iteration; torch.while_loop keeps the
whole loop in one graph. The carried names are those the body assigns and
something reads across an iteration (the test, the body before its own
assignment, the code after or around the loop); the body's other names become
locals of the body function, and names it only reads are closures, read when
the loop runs as before. Both functions are defined right before the loop, in
the same scope, and keep the user's statements verbatim.

Checked here, statically: the loop is in a function, has no `else:`, and its
body only computes new values for plain names (no `break`/`continue`/`return`/
`yield`/`await`/`global`/`nonlocal`/`del`/`import`, nested def or class, `try`,
`with`, expression statement, augmented assignment, assignment to an attribute
or subscript, in-place or container-mutating call, random draw or host read);
the test changes nothing; every carried name is bound before the loop (else
the original may leave it unbound). A carried value that is the body's input
(or another carried value) is returned as a clone: while_loop rejects aliasing.

Left to the verifier: carried values that are not tensors, shapes or dtypes
that change across iterations, a test that is not a one-element boolean,
helpers that break inside the loop, backward through the loop. Each of those
makes the edited run fail or differ, and the edit is rejected.
"""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from gbfix.recipes.analysis import bound_before, is_builtin, local_effects_only, mutated, name_of, target_names
from gbfix.recipes.base import Decline, SiteContext
from gbfix.recipes.branch import BranchRecipe, fresh, may_alias, tensor_cond
from gbfix.recipes.tree import walk

# Statements whose meaning changes inside a function of their own (control flow
# leaving the loop, bindings in another scope, effects on names, resources).
_FORBIDDEN = {
    cst.Return: "returns", cst.Yield: "yields", cst.Await: "awaits", cst.Global: "declares a global",
    cst.Nonlocal: "declares a nonlocal", cst.Del: "deletes a name", cst.FunctionDef: "defines a function",
    cst.ClassDef: "defines a class", cst.Try: "has a `try`", cst.TryStar: "has a `try`", cst.With: "has a `with`",
    cst.Import: "imports", cst.ImportFrom: "imports", cst.NamedExpr: "binds with `:=`",
    cst.AugAssign: "updates in place with an augmented assignment", cst.Expr: "has an expression statement (a call for its effect)",
}


def _site_loop(ctx: SiteContext) -> cst.While | None:
    """The `while` whose test the break is in."""
    if isinstance(ctx.node, cst.While):
        return ctx.node
    prev: cst.CSTNode = ctx.node
    for anc in ctx.ancestors():
        if isinstance(anc, cst.While):
            return anc if prev is anc.test else None
        if isinstance(anc, (cst.BaseStatement, cst.BaseSmallStatement, cst.Lambda, cst.BaseSuite)):
            return None
        prev = anc
    return None


def _own_breaks(node: cst.CSTNode) -> bool:
    """A `break`/`continue` of the loop itself (not of a loop nested in its body)."""
    todo = list(node.children)
    while todo:
        n = todo.pop()
        if isinstance(n, (cst.Break, cst.Continue)):
            return True
        if isinstance(n, (cst.For, cst.While)):
            todo += [n.orelse] if n.orelse is not None else []  # an inner loop's body has its own breaks
        else:
            todo += n.children
    return False


def _check_body(ctx: SiteContext, body: cst.BaseSuite) -> None:
    """Decline a body that does more than compute new values of plain names."""
    if _own_breaks(body):
        raise Decline("the loop body has `break` or `continue`")
    for n in walk(body):
        for kind, why in _FORBIDDEN.items():
            if isinstance(n, kind):
                raise Decline(f"the loop body {why}")
        if isinstance(n, (cst.AssignTarget, cst.AnnAssign)) and not _plain(n.target):
            raise Decline("the loop body assigns an attribute or subscript (state a function cannot return)")
        if isinstance(n, cst.For) and not _plain(n.target):
            raise Decline("an inner loop of the body assigns an attribute or subscript")
        if isinstance(n, cst.Call) and name_of(n.func) == "super" and not n.args:
            raise Decline("the loop body calls `super()`, which reads the method's first argument")
    if not local_effects_only(body):
        raise Decline("the loop body calls an in-place op, mutates a container, draws random numbers or reads to the host")


def _plain(target: cst.BaseExpression) -> bool:
    """A name, or a tuple/list of plain targets."""
    if isinstance(target, (cst.Tuple, cst.List)):
        return all(isinstance(el, cst.Element) and _plain(el.value) for el in target.elements)
    return isinstance(target, cst.Name)


def _binding_names(stmt: cst.CSTNode) -> list[str]:
    """The names ``stmt`` (or a statement inside it) binds, in order."""
    out: list[str] = []
    for n in walk(stmt, nested=False):
        if isinstance(n, cst.AssignTarget) or (isinstance(n, cst.AnnAssign) and n.value is not None):
            out += target_names(n.target)
        elif isinstance(n, cst.For):
            out += target_names(n.target)
    return list(dict.fromkeys(out))


def _certain_bindings(stmt: cst.BaseStatement) -> set[str]:
    """The names a top-level statement of the body always binds: its plain
    assignments (a binding inside an `if` or a loop may not happen)."""
    if not isinstance(stmt, cst.SimpleStatementLine):
        return set()
    return {name for small in stmt.body if isinstance(small, (cst.Assign, cst.AnnAssign)) for name in _binding_names(small)}


def _reads(ctx: SiteContext, node: cst.CSTNode) -> set[str]:
    """The names ``node`` reads (its scope's accesses, nested functions' included)."""
    out = set()
    for n in walk(node):
        scope = ctx.file.scopes.get(n) if isinstance(n, cst.Name) else None
        if scope is not None and any(a.node is n for a in scope.accesses[n.value]):
            out.add(n.value)
    return out


def _statements(body: cst.BaseSuite) -> list[cst.BaseStatement]:
    if isinstance(body, cst.IndentedBlock):
        return list(body.body)
    return [cst.SimpleStatementLine(body=list(body.body))]


def _read_early(ctx: SiteContext, statements: Sequence[cst.BaseStatement], assigned: list[str]) -> set[str]:
    """Assigned names the body reads where this iteration may not have assigned them yet."""
    bound: set[str] = set()
    out: set[str] = set()
    for stmt in statements:
        out |= (_reads(ctx, stmt) & set(assigned)) - bound
        bound |= _certain_bindings(stmt)
    return out


def _read_outside(ctx: SiteContext, fn: cst.FunctionDef, loop: cst.While, name: str) -> bool:
    """``name`` is read in the function outside the loop (after it, or before it
    in an enclosing loop, or by a nested function): the loop's value may reach it."""
    inside = {id(n) for n in walk(loop)}
    scope = ctx.file.scopes.get(loop)
    if scope is None:
        return True
    for assignment in scope.assignments[name]:
        if any(id(ref.node) not in inside for ref in assignment.references):
            return True
    return any(id(a.node) not in inside for a in scope.accesses[name])


def _returned(statements: Sequence[cst.BaseStatement], name: str) -> cst.BaseExpression:
    """``name`` as the body returns it: a clone where its value may be the body's
    input or another carried value (while_loop rejects an output that aliases)."""
    last: cst.BaseExpression | None = None
    for stmt in reversed(statements):
        if name in _binding_names(stmt):
            last = _value_of(stmt, name)
            break
    if last is not None and not may_alias(last):
        return cst.Name(name)
    return cst.Call(func=cst.Attribute(value=cst.Name(name), attr=cst.Name("clone")))


def _value_of(stmt: cst.BaseStatement, name: str) -> cst.BaseExpression | None:
    """The expression a plain top-level `name = value` (or `a, name = x, value`) binds, else None."""
    if not isinstance(stmt, cst.SimpleStatementLine):
        return None  # bound inside an `if`/loop: may keep the input
    value: cst.BaseExpression | None = None
    for small in stmt.body:
        if isinstance(small, (cst.Assign, cst.AnnAssign)) and name in _binding_names(small):
            value = None
            targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else [small.target]
            for target in targets:
                if name_of(target) == name:
                    value = small.value
                elif isinstance(target, (cst.Tuple, cst.List)) and isinstance(small.value, (cst.Tuple, cst.List)):
                    pairs = zip(target.elements, small.value.elements)
                    value = next((v.value for t, v in pairs if name_of(t.value) == name), None)
    return value


def _test(ctx: SiteContext, loop: cst.While) -> cst.BaseExpression:
    """The test as a tensor condition (`not t` -> torch.logical_not(t)); `bool(t)` is `t`."""
    test = loop.test
    if isinstance(test, cst.Call) and name_of(test.func) == "bool" and len(test.args) == 1 and is_builtin(ctx, test.func):
        arg = test.args[0]
        if arg.keyword is None and not arg.star:
            test = arg.value
    if not local_effects_only(test) or any(isinstance(n, cst.Call) and name_of(n.func) == "super" for n in walk(test)):
        raise Decline("the loop test has effects")
    cond = tensor_cond(test, True)
    if cond is None:
        raise Decline("the loop test is not a tensor condition (a Python part would need to stay a Python test)")
    return cond


def _def(name: str, params: list[str], body: cst.BaseSuite, leading: Sequence[cst.EmptyLine]) -> cst.FunctionDef:
    return cst.FunctionDef(
        name=cst.Name(name),
        params=cst.Parameters(params=[cst.Param(cst.Name(p)) for p in params]),
        body=body,
        leading_lines=list(leading),
    )


def _tuple(items: Sequence[cst.BaseExpression], parens: bool) -> cst.Tuple:
    elements = [cst.Element(v) for v in items]
    if parens or len(elements) == 1:
        return cst.Tuple(elements)
    return cst.Tuple(elements, lpar=[], rpar=[])


class WhileToWhileLoop(BranchRecipe):
    """`while <tensor test>: <body>` -> torch.while_loop over the names the loop carries."""

    name = "while-to-while-loop"
    requires = frozenset({"while_loop"})
    summary = "replace a `while` loop on a tensor test by torch.while_loop over the names it carries"

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        loop = _site_loop(ctx)
        if loop is None:
            return None
        fn = ctx.enclosing(cst.FunctionDef, cst.ClassDef, cst.Lambda, node=ctx.file.parent(loop))
        if not isinstance(fn, cst.FunctionDef):
            raise Decline("the loop is not inside a function")
        if loop.orelse is not None:
            raise Decline("the loop has an `else:` clause")
        cond = _test(ctx, loop)
        _check_body(ctx, loop.body)
        statements = _statements(loop.body)
        assigned = [name for stmt in statements for name in _binding_names(stmt)]
        assigned = list(dict.fromkeys(assigned))
        early = _read_early(ctx, statements, assigned)
        in_test = _reads(ctx, loop.test)
        carried = [n for n in assigned if n in in_test or n in early or _read_outside(ctx, fn, loop, n)]
        if not carried:
            raise Decline("the loop carries no value from one iteration to the next")
        declared = {name_of(a.name) for n in walk(fn) if isinstance(n, (cst.Global, cst.Nonlocal)) for a in n.names}
        if declared & set(assigned):
            raise Decline("the loop assigns a name the function declares global or nonlocal")
        for name in carried:
            if not bound_before(ctx, name, loop):
                raise Decline(f"`{name}` may be unbound before the loop (the original leaves it so when the loop does not run)")
            if mutated(fn, name):
                raise Decline(f"the function changes `{name}` in place (the loop's results are new tensors)")
        block = ctx.file.parent(loop)
        first = isinstance(block, cst.IndentedBlock) and block.body[0] is loop
        self._plan = self._write(fn, loop, cond, statements, carried, first)
        return loop

    @staticmethod
    def _write(
        fn: cst.FunctionDef,
        loop: cst.While,
        cond: cst.BaseExpression,
        statements: list[cst.BaseStatement],
        carried: list[str],
        first: bool,
    ) -> cst.FlattenSentinel:
        taken: set[str] = set()
        cond_name, body_name = fresh(fn, "_gbfix_while_cond", taken), fresh(fn, "_gbfix_while_body", taken)
        header = loop.body.header if isinstance(loop.body, cst.IndentedBlock) else loop.body.trailing_whitespace
        ret = cst.SimpleStatementLine(body=[cst.Return(cond.with_changes(lpar=[], rpar=[]) if _bare_ok(cond) else cond)])
        # Blank lines around the nested defs, as around any def (a comment above the loop stays above them).
        leading = loop.leading_lines or ([cst.EmptyLine(indent=False)] if not first else [])
        cond_def = _def(cond_name, carried, cst.IndentedBlock(body=[ret], header=header), leading)
        values = [_returned(statements, n) for n in carried]
        out = cst.SimpleStatementLine(body=[cst.Return(_tuple(values, parens=False))])
        block = loop.body if isinstance(loop.body, cst.IndentedBlock) else cst.IndentedBlock(body=[])
        body_def = _def(body_name, carried, block.with_changes(body=[*statements, out], header=cst.TrailingWhitespace()), [cst.EmptyLine(indent=False)])
        names = [cst.Name(n) for n in carried]
        args = [cst.Name(cond_name), cst.Name(body_name), _tuple(names, parens=True)]
        call = cst.Call(func=cst.parse_expression("torch.while_loop"), args=[cst.Arg(a) for a in args])
        target = _tuple(names, parens=len(names) == 1)
        assign = cst.SimpleStatementLine(
            body=[cst.Assign(targets=[cst.AssignTarget(target)], value=call)], leading_lines=[cst.EmptyLine(indent=False)]
        )
        return cst.FlattenSentinel([cond_def, body_def, assign])


def _bare_ok(expr: cst.BaseExpression) -> bool:
    """Outer parentheses that `return` does not need (and that hold no line break)."""
    lpar = getattr(expr, "lpar", None)
    return bool(lpar) and "\n" not in cst.Module([]).code_for_node(expr)


RECIPES = (WhileToWhileLoop,)
