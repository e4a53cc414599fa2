"""Reading LibCST trees: the nodes below a node, and the variable names in them."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import libcst as cst


def keyword_arg(name: str, value: cst.BaseExpression) -> cst.Arg:
    """`name=value`, spaced as a call's keyword argument is (no spaces around `=`)."""
    return cst.Arg(value, keyword=cst.Name(name), equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))

# Bodies that run in a scope of their own, at another time than the code around them.
_SCOPES = (cst.FunctionDef, cst.Lambda, cst.ClassDef)


def walk(node: cst.CSTNode, *, nested: bool = True) -> Iterator[cst.CSTNode]:
    """``node`` and every node below it, in source order (a node before its children).

    ``nested=False`` stays in ``node``'s own scope: a function, lambda or class
    below ``node`` is yielded but not entered (``node`` itself always is).
    """
    todo = [node]
    while todo:  # a stack, not recursion: no generator per level, no recursion limit
        n = todo.pop()
        yield n
        if nested or n is node or not isinstance(n, _SCOPES):
            todo.extend(reversed(n.children))


def nodes(node: cst.CSTNode, types: type | tuple[type, ...], *, nested: bool = True) -> list:
    """The nodes of ``walk(node, nested=nested)`` that are instances of ``types``."""
    return [n for n in walk(node, nested=nested) if isinstance(n, types)]


def contains(node: cst.CSTNode, types: type | tuple[type, ...], test: Callable[..., bool] | None = None) -> bool:
    """Whether ``node`` or a node below it is one of ``types`` (and passes ``test``);
    stops at the first."""
    return any(isinstance(n, types) and (test is None or test(n)) for n in walk(node))


def names_outside(scope: cst.CSTNode, part: cst.CSTNode) -> set[str]:
    """The variables ``scope`` reads or binds outside ``part`` (a block of it)."""
    inside = {id(n) for n in walk(part)}
    return {n.value for n in variables(scope) if id(n) not in inside}


def variables(node: cst.CSTNode) -> Iterator[cst.Name]:
    """Every occurrence of a variable in ``node`` or below, read or bound, in source
    order: each ``cst.Name`` but an attribute's (``a.name``) and a keyword argument's
    (``f(name=...)``)."""
    skip: set[int] = set()
    for n in walk(node):  # a parent comes before its children: skip is filled in time
        if isinstance(n, cst.Attribute):
            skip.add(id(n.attr))
        elif isinstance(n, cst.Arg) and n.keyword is not None:
            skip.add(id(n.keyword))
        elif isinstance(n, cst.Name) and id(n) not in skip:
            yield n


def variable_names(node: cst.CSTNode) -> set[str]:
    """The names of ``variables(node)``."""
    return {n.value for n in variables(node)}


def param_names(fn: cst.FunctionDef) -> set[str]:
    """The names ``fn``'s parameters bind, ``*args`` and ``**kwargs`` included."""
    p = fn.params
    every = [*p.posonly_params, *p.params, *p.kwonly_params]
    every += [s for s in (p.star_arg, p.star_kwarg) if isinstance(s, cst.Param)]
    return {q.name.value for q in every}
