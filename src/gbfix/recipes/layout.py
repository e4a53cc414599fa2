"""Where module-level code goes in a file: after the leading imports."""

from __future__ import annotations

import libcst as cst

HELPER_PREFIXES = ("_gbfix_", "gbfix_")  # what the names of the helpers gbfix adds start with


def after_imports(module: cst.Module) -> int:
    """Index after the last top-level import (after a docstring if there is none).

    Code placed here may use ``torch`` when the module runs, and imports that
    AddImportsVisitor adds go with the leading imports, above this point.
    """
    at = 0
    for i, stmt in enumerate(module.body):
        if isinstance(stmt, cst.SimpleStatementLine) and any(
            isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body
        ):
            at = i + 1
    if at == 0 and module.body and is_docstring(module.body[0]):
        at = 1
    return at


def is_docstring(stmt: cst.BaseStatement) -> bool:
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and isinstance(stmt.body[0], cst.Expr)
        and isinstance(stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def blank_lines_before(stmt: cst.BaseStatement, n: int) -> cst.BaseStatement:
    blank = 0
    for line in stmt.leading_lines:
        if line.comment is not None:
            break
        blank += 1
    if blank >= n:
        return stmt
    return stmt.with_changes(leading_lines=[*[cst.EmptyLine()] * (n - blank), *stmt.leading_lines])


def add_helpers(module: cst.Module, helpers: dict[str, str]) -> cst.Module:
    """The module with each helper (name -> code) it does not define yet placed
    after its imports and the helpers it has already, two blank lines around each
    (a helper may use one added before it)."""
    body: list[cst.BaseStatement] = list(module.body)
    defined = {name for stmt in body for name in _defines(stmt)}
    new = [stmt for name, code in helpers.items() if name not in defined for stmt in _statements(code)]
    if not new:
        return module
    at = after_imports(module)
    # past the helpers there already (a new one may use them) and the Dynamo settings a
    # config route put between the imports and them
    while at < len(body) and (_is_helper(body[at]) or _is_dynamo_setting(body[at])):
        at += 1
    if at < len(body):
        body[at] = blank_lines_before(body[at], 2)
    return module.with_changes(body=[*body[:at], *new, *body[at:]])


def _defines(stmt: cst.BaseStatement) -> list[str]:
    """The names a module-level function, class or plain assignment defines."""
    if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
        return [stmt.name.value]
    if not isinstance(stmt, cst.SimpleStatementLine):
        return []
    return [
        t.target.value
        for small in stmt.body
        if isinstance(small, cst.Assign)
        for t in small.targets
        if isinstance(t.target, cst.Name)
    ]


def _is_dynamo_setting(stmt: cst.BaseStatement) -> bool:
    """`torch._dynamo.config.<option> = ...` at module level."""
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign)):
        return False
    targets = stmt.body[0].targets
    return len(targets) == 1 and cst.Module([]).code_for_node(targets[0].target).startswith("torch._dynamo.config.")


def _is_helper(stmt: cst.BaseStatement) -> bool:
    """A statement of a helper gbfix added: it defines ``_gbfix_*`` names, or is a
    registration call on them (``_gbfix_lib.define(...)``; not a call of a public
    helper, ``gbfix_leaf_logger(...)``, which uses the helpers and goes after them)."""
    names = _defines(stmt)
    if names:
        return all(n.startswith(HELPER_PREFIXES) for n in names)
    return isinstance(stmt, cst.SimpleStatementLine) and all(
        isinstance(small, cst.Expr) and isinstance(small.value, cst.Call) and _root_name(small.value.func).startswith("_gbfix_")
        for small in stmt.body
    )


def _root_name(node: cst.BaseExpression) -> str:
    while isinstance(node, (cst.Attribute, cst.Call)):
        node = node.value if isinstance(node, cst.Attribute) else node.func
    return node.value if isinstance(node, cst.Name) else ""


def _statements(code: str) -> list[cst.BaseStatement]:
    parsed = cst.parse_module(code)
    stmts: list[cst.BaseStatement] = list(parsed.body)
    # A comment that opens the code is the module's header to LibCST: it goes with the first statement.
    stmts[0] = blank_lines_before(stmts[0].with_changes(leading_lines=[*parsed.header, *stmts[0].leading_lines]), 2)
    return stmts
