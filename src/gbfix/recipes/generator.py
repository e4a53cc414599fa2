"""GB0003: ``torch.compile`` on a generator function.

Dynamo cannot compile a generator's frame: it skips it whole ("attempt to trace
generator"), so a ``@torch.compile`` generator runs entirely eagerly. The work
worth compiling is usually the value it yields; ``compile-generator-body``
moves the decorator, arguments and all, onto a new module-level function
that computes that value, placed right before the generator::

    @torch.compile(backend="eager")              @torch.compile(backend="eager")
    def stream(model, audio, chunk):             def _stream_step(model, piece):
        for start in range(0, ..., chunk):   ->      return model(piece) * 2
            piece = audio[..., start:...]
            yield model(piece) * 2               def stream(model, audio, chunk):
                                                     for start in range(0, ..., chunk):
                                                         piece = audio[..., start:...]
                                                         yield _stream_step(model, piece)

The helper's parameters are the generator's locals that the value reads, in
order of first appearance; globals, builtins and module names stay free. A
name is a local wherever the function binds it, also below the yield: a
loop-carried ``prev`` assigned after the ``yield`` is still passed, with the
value it has when the ``yield`` runs. Nothing inside an expression can rebind a
local except a walrus or a closure, both declined, so the helper sees the
values the expression would have seen. A method's helper goes before its
class (``self`` becomes an argument).

Declined: ``torch.compile`` applied by assignment or next to other decorators
(they would wrap something else), async generators, ``yield from``, no yield
or several with a value worth compiling (anything but names, attributes and
literals), a value with ``await``, a walrus, a nested yield, a lambda or a
generator expression (lazy: it would read the locals later), a generator
holding any nested function or class (a closure could rebind a local in the
middle of the expression), frame introspection (``locals()``, ``super()``...),
a method's private ``__names`` (mangled in a class), a decorator reading the
class's names, and a helper name already used in the module.
"""

from __future__ import annotations

import libcst as cst
from libcst.metadata import ComprehensionScope, Scope

from gbfix.recipes.analysis import qualified_names
from gbfix.recipes.base import Recipe, Replacement, SiteContext
from gbfix.recipes.tree import contains, nodes

# Nodes that make a yielded value worth a compiled function of its own.
_WORK = (
    cst.Call,
    cst.BinaryOperation,
    cst.UnaryOperation,
    cst.Comparison,
    cst.BooleanOperation,
    cst.Subscript,
    cst.ListComp,
    cst.SetComp,
    cst.DictComp,
)
# Nodes that cannot move into another function with the same meaning.
_UNMOVABLE = (cst.Await, cst.NamedExpr, cst.Yield, cst.Lambda, cst.GeneratorExp)
# Builtins that look at the calling frame.
_INTROSPECTION = frozenset(f"builtins.{n}" for n in ("locals", "vars", "eval", "exec", "dir", "super"))


class CompileGeneratorBody(Recipe):
    name = "compile-generator-body"
    codes = ("GB0003",)
    safety = "safe"
    # One compiled generator call becomes one compiled call per yielded value:
    # there is nothing to compare call for call; what the program prints is.
    tolerates = frozenset({"compile-boundary"})
    summary = "compile the generator's yielded expression as a function of its own instead of the generator"
    rule = "GB0003"

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        fn = _function_at(ctx)
        if fn is None or fn.asynchronous or len(fn.decorators) != 1:
            return None
        decorator = fn.decorators[0]
        if not _is_compile(ctx, decorator.decorator):
            return None
        classes = _classes_around(ctx, fn)
        if classes is None or contains(fn.body, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            return None
        target = _the_yield(fn)
        if target is None or not _movable(ctx, target.value, bool(classes)):
            return None
        if classes and _reads_class_names(ctx, decorator, classes[0]):
            return None
        # No leading "__": the call to it may sit in a class body, where such names are mangled.
        parts = [p for n in (*reversed(classes), fn) if (p := n.name.value.strip("_"))]
        helper = "_" + "_".join([*parts, "step"])
        if contains(ctx.module, cst.Name, lambda n: n.value == helper):
            return None
        self._fn, self._yield, self._helper = fn, target, helper
        self._params = _locals_read(ctx, target)
        return classes[-1] if classes else fn

    def rewrite(self, node: cst.CSTNode) -> Replacement | None:
        new = node.visit(self)
        value = self._yield.value
        if "\n" in self.ctx.code(value) and not value.lpar:
            value = value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        helper = cst.FunctionDef(
            name=cst.Name(self._helper),
            params=cst.Parameters(params=[cst.Param(cst.Name(p)) for p in self._params]),
            body=cst.IndentedBlock(
                [
                    cst.SimpleStatementLine(
                        [cst.Return(value)],
                        leading_lines=[
                            cst.EmptyLine(
                                comment=cst.Comment(
                                    f"# Added by gbfix: what {self._fn.name.value} yields, compiled here"
                                    " (Dynamo skips a generator whole)."
                                )
                            )
                        ],
                    )
                ]
            ),
            decorators=[self._fn.decorators[0].with_changes(leading_lines=[])],
        )
        # Blank lines above the statement go above the helper; its comments stay with it.
        lines = list(new.leading_lines)
        blank = next((i for i, line in enumerate(lines) if line.comment is not None), len(lines))
        helper = helper.with_changes(leading_lines=lines[:blank])
        new = new.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine(), *lines[blank:]])
        return cst.FlattenSentinel([helper, new])

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef) -> cst.FunctionDef:
        if original_node is self._fn:
            return updated_node.with_changes(decorators=[])
        return updated_node

    def leave_Yield(self, original_node: cst.Yield, updated_node: cst.Yield) -> cst.Yield:
        if original_node is self._yield:
            args = [cst.Arg(cst.Name(p)) for p in self._params]
            return updated_node.with_changes(value=cst.Call(cst.Name(self._helper), args))
        return updated_node


def _function_at(ctx: SiteContext) -> cst.FunctionDef | None:
    """The function whose code object the break names.

    Dynamo gives no column, and the line is the code's first: the first
    decorator's. LibCST's span of a FunctionDef starts at ``def``, so the node
    at that line is the decorator's, or the module when no other node holds it.
    """

    def first_line(f: cst.FunctionDef) -> int:
        return ctx.file.span(f.decorators[0] if f.decorators else f)[0][0]

    around = ctx.enclosing(cst.FunctionDef) or ctx.node
    found = [f for f in nodes(around, cst.FunctionDef) if first_line(f) == ctx.site.line]
    return found[0] if len(found) == 1 else None


def _is_compile(ctx: SiteContext, decorator: cst.BaseExpression) -> bool:
    func = decorator.func if isinstance(decorator, cst.Call) else decorator
    return qualified_names(ctx, func) == {"torch.compile"}


def _movable(ctx: SiteContext, value: cst.BaseExpression, in_class: bool) -> bool:
    """The value means the same in a module-level function taking the locals it reads."""
    if contains(value, _UNMOVABLE) or any(qualified_names(ctx, n) & _INTROSPECTION for n in _reads(ctx, value)):
        return False

    def special(n: cst.Name) -> bool:
        # __class__ is a method's cell; a private __name is mangled in a class body
        private = in_class and n.value.startswith("__") and not n.value.endswith("__")
        return n.value == "__class__" or private

    return not contains(value, cst.Name, special)


def _classes_around(ctx: SiteContext, fn: cst.FunctionDef) -> list[cst.ClassDef] | None:
    """The classes holding ``fn``, innermost first, when it sits at module level or
    directly in class bodies; None when a function, ``if`` or ``try`` encloses it."""
    classes: list[cst.ClassDef] = []
    for node in ctx.ancestors(fn):
        if isinstance(node, cst.Module):
            return classes
        if isinstance(node, cst.ClassDef):
            classes.append(node)
        elif not isinstance(node, cst.IndentedBlock):
            return None
    return None


def _the_yield(fn: cst.FunctionDef) -> cst.Yield | None:
    """The one yield whose value is worth compiling; None without one, with
    several, or with ``yield from``."""
    yields: list[cst.Yield] = nodes(fn.body, cst.Yield)
    if not yields or any(isinstance(y.value, cst.From) for y in yields):
        return None
    working = [y for y in yields if y.value is not None and contains(y.value, _WORK)]
    return working[0] if len(working) == 1 else None


def _locals_read(ctx: SiteContext, target: cst.Yield) -> list[str]:
    """The generator's locals that the yielded value reads, in order of first
    appearance. A local is any name the function binds, wherever it binds it:
    libcst's accesses only see bindings above the read, a loop may bind below."""
    fn_scope = ctx.file.scopes[target]

    def local(n: cst.Name) -> bool:
        scope = ctx.file.scopes[n]
        while isinstance(scope, ComprehensionScope) and not scope.assignments[n.value]:
            scope = scope.parent
        return scope is fn_scope and bool(fn_scope.assignments[n.value])

    return list(dict.fromkeys(n.value for n in _reads(ctx, target.value) if local(n)))


def _reads_class_names(ctx: SiteContext, decorator: cst.Decorator, cls: cst.ClassDef) -> bool:
    """The decorator reads a name the class body binds: before the class it means another thing."""
    scope: Scope | None = ctx.file.scopes.get(cls.body.body[0])
    return scope is not None and any(scope.assignments[n.value] for n in _reads(ctx, decorator))


def _reads(ctx: SiteContext, node: cst.CSTNode) -> list[cst.Name]:
    """The names read below ``node``: not attributes, keywords or binding targets."""

    def read(n: cst.Name) -> bool:
        scope = ctx.file.scopes.get(n)  # None for attributes and keywords
        return scope is not None and any(a.node is n for a in scope.accesses[n])  # accesses[n]: all of the name's

    return [n for n in nodes(node, cst.Name) if read(n)]


RECIPES = (CompileGeneratorBody,)
