"""The shared tree helpers: what the recipes rely on (order, scopes, which names are variables)."""

from __future__ import annotations

import libcst as cst

from gbfix.recipes.tree import contains, nodes, param_names, variable_names, variables, walk

CODE = """\
def f(a, *args, k=1, **kw):
    x = a.b + g(k=a)
    def inner(y):
        return y + x
    return lambda z: z + x
"""


def _fn() -> cst.FunctionDef:
    fn = cst.parse_module(CODE).body[0]
    assert isinstance(fn, cst.FunctionDef)
    return fn


def test_walk_starts_at_the_node_and_keeps_source_order():
    expr = cst.parse_expression("a + b * c")
    assert next(walk(expr)) is expr
    assert [n.value for n in nodes(expr, cst.Name)] == ["a", "b", "c"]


def test_own_scope_yields_nested_definitions_but_not_their_insides():
    body = _fn().body
    assert [n.value for n in nodes(body, cst.Name, nested=False) if n.value in ("y", "z")] == []
    assert len(nodes(body, (cst.FunctionDef, cst.Lambda), nested=False)) == 2
    assert {n.value for n in nodes(body, cst.Name)} >= {"y", "z"}
    # the node itself is entered even when it is a function
    assert contains(_fn(), cst.Return) and nodes(_fn(), cst.Return, nested=False)


def test_variables_leave_out_attribute_and_keyword_names():
    stmt = _fn().body.body[0]
    assert [n.value for n in variables(stmt)] == ["x", "a", "g", "a"]
    assert variable_names(stmt) == {"x", "a", "g"}


def test_contains_applies_the_test_to_nodes_of_the_type():
    stmt = _fn().body.body[0]
    assert contains(stmt, cst.Name, lambda n: n.value == "g")
    assert not contains(stmt, cst.Name, lambda n: n.value == "y")
    assert not contains(stmt, cst.Yield)


def test_param_names_include_star_parameters():
    assert param_names(_fn()) == {"a", "args", "k", "kw"}
