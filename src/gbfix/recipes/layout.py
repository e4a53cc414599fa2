"""Where module-level code goes in a file: after the leading imports."""

from __future__ import annotations

import libcst as cst


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
    after its imports, two blank lines around each."""
    defined = {s.name.value for s in module.body if isinstance(s, (cst.FunctionDef, cst.ClassDef))}
    new = [stmt for name, code in helpers.items() if name not in defined for stmt in _statements(code)]
    if not new:
        return module
    body = list(module.body)
    at = after_imports(module)
    if at < len(body):
        body[at] = blank_lines_before(body[at], 2)
    return module.with_changes(body=[*body[:at], *new, *body[at:]])


def _statements(code: str) -> list[cst.BaseStatement]:
    stmts = list(cst.parse_module(code).body)
    stmts[0] = blank_lines_before(stmts[0], 2)
    return stmts
