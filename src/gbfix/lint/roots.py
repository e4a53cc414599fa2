"""Compiled regions: the functions a project's ``torch.compile`` calls compile, found statically.

A compiled region is a function decorated with ``torch.compile`` (or ``torch._dynamo.optimize``),
a function or method passed to ``torch.compile(...)``, or the ``forward`` (or a user
``__call__``) of a class whose instance is compiled (``torch.compile(Net(...))``,
``model = Net(); torch.compile(model)``, ``model.compile()``). Without any compile call in
the project, ``assumed`` takes each ``nn.Module`` forward as one.
"""

from __future__ import annotations

import ast
import bisect
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from gbfix.lint.project import COMPILE, ClassInfo, Func, Module, Project, Scope

Region = tuple[Func, Path, int]  # the compiled function, and the file and line that compile it


def regions(modules: Iterable[Module], project: Project) -> Iterator[Region]:
    """Every function the compile calls in ``modules`` compile."""
    seen: set[int] = set()
    for m in modules:
        for site, fn, owner in _sites(m, project):
            scope = owner.scope()
            if fn is not None:  # @torch.compile / @torch.compile(...) / @optimize(...)
                target = site.func if isinstance(site, ast.Call) else site
                if project.qual(target, scope) in COMPILE:
                    yield from _new(seen, [owner.func_of(fn)], m, site)
                continue
            assert isinstance(site, ast.Call)
            arg = _compiled_arg(site, scope, project)
            if arg is not None:
                yield from _new(seen, compiled(arg, scope, project), m, site)
            elif isinstance(site.func, ast.Attribute) and site.func.attr == "compile" and project.qual(site.func, scope) is None:
                # model.compile(): nn.Module.compile, in place
                for c in project.classes_of(site.func.value, scope):
                    yield from _new(seen, project.call_targets(c), m, site)


def has_compile_sites(m: Module, project: Project) -> bool:
    """A call or decorator in ``m`` that may be a compile call (before names are resolved)."""
    return next(_sites(m, project), None) is not None


def assumed(modules: Iterable[Module], project: Project) -> Iterator[Region]:
    """The ``forward`` of each ``nn.Module`` class of ``modules``, for a project that compiles nothing."""
    for m in modules:
        for d in list(m.defs.values()):
            if isinstance(d, ClassInfo) and "forward" in d.methods and project.is_nn_module(d):
                fn = d.methods["forward"]
                yield Func(fn, m, d, None), m.path, fn.lineno


def compiled(target: ast.expr, scope: Scope, project: Project) -> list:
    """What compiling ``target`` compiles: a function or method, or an instance's forward."""
    out: list = [s for s in project.resolve(target, scope) if isinstance(s, Func)]
    for c in project.classes_of(target, scope):
        out.extend(project.call_targets(c))
    return out


def functions(m: Module, project: Project) -> dict[tuple[int, str], Func]:
    """Every function of ``m`` (methods and nested ones too), by its def's line and name."""
    out = {}
    todo: list[tuple[ast.AST, _Owner]] = [(m.tree, _Owner(m, project))]
    while todo:
        root, owner = todo.pop()
        for node in ast.iter_child_nodes(root):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out[node.lineno, node.name] = owner.func_of(node)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                todo.append((node, _Owner(m, project, node, owner)))
            elif not isinstance(node, ast.expr):  # expressions hold no defs
                todo.append((node, owner))
    return out


def label(f: Func) -> str:
    return f"{f.cls.name}.{f.node.name}" if f.cls is not None else f.node.name


def _sites(m: Module, project: Project) -> Iterator[tuple[ast.expr, ast.FunctionDef | ast.AsyncFunctionDef | None, _Owner]]:
    """(decorator, its def, owner) and (call, None, owner) for what may compile: named
    ``compile`` / ``optimize`` as an attribute or an imported name."""
    for node, owner in _hot_nodes(m, project):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for d in node.decorator_list:
                if _named(d.func if isinstance(d, ast.Call) else d, ("compile", "optimize"), m):
                    yield d, node, owner
        elif isinstance(node, ast.Call) and (
            _named(node.func, ("compile",), m) or (isinstance(node.func, ast.Call) and _named(node.func.func, ("optimize",), m))
        ):
            yield node, None, owner


def _named(e: ast.expr, names: tuple[str, ...], m: Module) -> bool:
    """A cheap filter before resolving: ``e`` is ``<something>.compile`` or an imported name."""
    if isinstance(e, ast.Attribute):
        return e.attr in names and not (isinstance(e.value, ast.Name) and e.value.id in ("re", "regex"))
    return isinstance(e, ast.Name) and isinstance(m.defs.get(e.id), tuple)


def _new(seen: set[int], funcs, m: Module, where: ast.AST) -> Iterator[Region]:
    for f in funcs:
        if isinstance(f, Func) and id(f.node) not in seen:
            seen.add(id(f.node))
            yield f, m.path, where.lineno  # type: ignore[attr-defined]


def _compiled_arg(call: ast.Call, scope: Scope, project: Project) -> ast.expr | None:
    f = call.func
    if isinstance(f, ast.Call) and project.qual(f.func, scope) == "torch._dynamo.optimize":  # optimize(...)(fn)
        return call.args[0] if call.args else None
    if project.qual(f, scope) != "torch.compile":
        return None
    if call.args:
        return call.args[0]
    return next((k.value for k in call.keywords if k.arg == "model"), None)


@dataclass(eq=False)
class _Owner:
    """The body a node sits in: the module's, a function's or a class's. Scopes are built
    on demand: most nodes never need one."""

    module: Module
    project: Project
    node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | None = None  # None: the module body
    parent: _Owner | None = None

    def scope(self) -> Scope:
        """The scope names in this body are looked up in (a class body's is the enclosing one)."""
        if self.node is None:
            return self.module.scope
        if isinstance(self.node, ast.ClassDef):
            return self.parent.scope()  # type: ignore[union-attr]
        return self.project.scope_of(self.parent.func_of(self.node))  # type: ignore[union-attr]

    def func_of(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> Func:
        """The Func of a def in this body: a method in a class body, a closure in a function."""
        cls = self.project.class_info(self.node, self.module) if isinstance(self.node, ast.ClassDef) else None
        return Func(node, self.module, cls, self.function_scope())

    def function_scope(self) -> Scope | None:
        """The nearest enclosing function's scope (class bodies do not count)."""
        if self.node is None:
            return None
        if isinstance(self.node, ast.ClassDef):
            return self.parent.function_scope()  # type: ignore[union-attr]
        return self.scope()


def _hot_nodes(m: Module, project: Project):
    """(node, owner) for the nodes of a module on lines that say "compile" or "optimize";
    subtrees without such a line are not walked (big files mostly have none)."""
    hot = [i for i, line in enumerate(m.lines, 1) if "compile" in line or "optimize" in line]
    if not hot:
        return
    todo: list[tuple[ast.AST, _Owner]] = [(m.tree, _Owner(m, project))]
    while todo:
        root, owner = todo.pop()
        stack = list(ast.iter_child_nodes(root))
        while stack:
            node = stack.pop()
            start = getattr(node, "lineno", None)
            if getattr(node, "decorator_list", None):  # a def starts at its first decorator
                start = node.decorator_list[0].lineno  # type: ignore[attr-defined]
            if start is not None:
                i = bisect.bisect_left(hot, start)
                if i == len(hot) or hot[i] > node.end_lineno:  # type: ignore[attr-defined]
                    continue
            yield node, owner
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                todo.append((node, _Owner(m, project, node, owner)))
            else:
                stack.extend(ast.iter_child_nodes(node))
