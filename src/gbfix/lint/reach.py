"""What compiled regions reach: every user function their code calls, followed across the
project's files (functions, constructors, instances' forwards, functions passed as
arguments), less those Dynamo leaves out of the trace. The result names functions by file
and line, so it can be kept in the cache and a file's part of it checked later."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass

from gbfix.lint.patterns import traced_nodes
from gbfix.lint.project import COMPILE, OPAQUE_SUFFIXES, ClassInfo, Func, Project, Scope
from gbfix.lint.roots import Region, compiled, label


@dataclass(frozen=True)
class Compiled:
    """A compiled region, and the compile call (or, when assumed, the def) that makes it one."""

    label: str  # "Net.forward"
    path: str
    line: int


@dataclass(frozen=True)
class Reached:
    """A function the compiled code runs."""

    path: str
    line: int  # of its def
    name: str
    region: str  # the label of the compiled region it is reached from
    root: bool  # it is that region


@dataclass(frozen=True)
class Reach:
    regions: tuple[Compiled, ...]
    reached: tuple[Reached, ...]
    files: tuple[str, ...]  # every file read to find them: the result holds while they are unchanged


def reach(found: Iterable[Region], project: Project) -> Reach:
    """The functions the compiled regions ``found`` reach, first region first."""
    regions: list[Compiled] = []
    reached: list[Reached] = []
    visited: set[int] = set()
    queue: list[tuple[Func, str, bool]] = []
    for func, path, line in found:
        regions.append(Compiled(label(func), str(path), line))
        queue.append((func, label(func), True))
    queue.reverse()  # popped from the end: the first region is followed first
    while queue:
        func, region, root = queue.pop()
        if id(func.node) in visited or _opaque(func, project):
            continue
        visited.add(id(func.node))
        reached.append(Reached(str(func.module.path), func.node.lineno, func.node.name, region, root))
        scope = project.scope_of(func)
        for node, _stmt in traced_nodes(func.node):
            if isinstance(node, ast.Call):
                try:
                    queue.extend((callee, region, False) for callee in _callees(node, scope, project))
                except RecursionError:  # an expression nested too deep to follow: skip it
                    continue
    return Reach(tuple(regions), tuple(reached), tuple(sorted(str(p) for p in project.loaded)))


def _callees(call: ast.Call, scope: Scope, project: Project) -> list[Func]:
    """The user functions a call runs: the callee, a constructor's __init__, an instance's
    forward, and functions passed as arguments (checkpoint(layer, x), torch.cond(p, f, g, ...))."""
    out: list = []
    for s in project.resolve(call.func, scope):
        if isinstance(s, Func):
            out.append(s)
        elif isinstance(s, ClassInfo):  # a constructor runs __init__
            out.extend(project.method(s, "__init__"))
    if not out:  # an instance: its forward (or __call__) runs
        for c in project.classes_of(call.func, scope):
            out.extend(project.call_targets(c))
    q = project.qual(call.func, scope)
    if q is None or not (q in COMPILE or q.rpartition(".")[2] in OPAQUE_SUFFIXES):
        for a in call.args:
            if isinstance(a, (ast.Name, ast.Attribute)):
                out.extend(compiled(a, scope, project))
    # gbfix's own helpers (`_gbfix_warn`...) route what Dynamo cannot trace to ops, and
    # their fallback paths are the ones a verified run showed are not taken.
    return [f for f in out if isinstance(f, Func) and not getattr(f.node, "name", "").startswith("_gbfix_")]


def _opaque(func: Func, project: Project) -> bool:
    """Decorated to stay out of the trace (torch.compiler.disable, leaf_function, custom_op...)."""
    scope = func.parent or func.module.scope
    for d in func.node.decorator_list:
        q = project.qual(d.func if isinstance(d, ast.Call) else d, scope)
        if q is not None and q.startswith("torch.") and q.rpartition(".")[2] in OPAQUE_SUFFIXES:
            return True
    return False
