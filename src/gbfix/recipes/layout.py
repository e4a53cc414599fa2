"""Where module-level code goes in a file: after the leading imports."""

from __future__ import annotations

import sys

import libcst as cst

HELPER_PREFIXES = ("_gbfix_", "gbfix_")  # what the names of the helpers gbfix adds start with
_CODE = cst.Module(body=[])  # renders a node alone


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


def with_stdlib_imports(module: cst.Module, names: list[str]) -> cst.Module | None:
    """``module`` with `import <name>` for each standard-library module of ``names``, among
    its standard-library imports at the head of the file, in the order of their module
    names; else before its first other import, a blank line between (isort's sections).
    None where the head has no import (AddImportsVisitor places it then)."""
    for name in names:
        body = list(module.body)
        head: list[int] = []
        for i, stmt in enumerate(body):
            if i == 0 and is_docstring(stmt):
                continue
            if not (isinstance(stmt, cst.SimpleStatementLine) and all(isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body)):
                break
            head.append(i)
        if not head:
            return None
        line = cst.SimpleStatementLine([cst.Import([cst.ImportAlias(cst.Name(name))])])
        std = [i for i in head if _stdlib_line(body[i])]
        after = [i for i in std if _module_of(body[i]) > name]
        if std and not after:
            at, gap = std[-1] + 1, False
        elif std:
            at, gap = after[0], False
        else:
            at, gap = next((i for i in head if not _future_line(body[i])), head[-1] + 1), True
        if at in head:  # the new line goes first in its group: it takes the group's leading lines
            line = line.with_changes(leading_lines=body[at].leading_lines)
            body[at] = body[at].with_changes(leading_lines=[cst.EmptyLine()] if gap else [])
        module = module.with_changes(body=[*body[:at], line, *body[at:]])
    return module


def _module_of(stmt: cst.BaseStatement) -> str:
    """The module an import line names first (`a.b` of `import a.b` and of `from a.b import c`)."""
    assert isinstance(stmt, cst.SimpleStatementLine)
    s = stmt.body[0]
    if isinstance(s, cst.Import):
        return _CODE.code_for_node(s.names[0].name)
    assert isinstance(s, cst.ImportFrom)
    return _CODE.code_for_node(s.module) if s.module is not None else ""


def _future_line(stmt: cst.BaseStatement) -> bool:
    return isinstance(stmt, cst.SimpleStatementLine) and any(isinstance(s, cst.ImportFrom) and s.module is not None and _CODE.code_for_node(s.module) == "__future__" for s in stmt.body)


def _stdlib_line(stmt: cst.BaseStatement) -> bool:
    """Every import of the line is of a standard-library module (`__future__` aside)."""
    if not isinstance(stmt, cst.SimpleStatementLine):
        return False
    for s in stmt.body:
        if isinstance(s, cst.Import):
            tops = [_CODE.code_for_node(a.name).split(".")[0] for a in s.names]
        elif isinstance(s, cst.ImportFrom) and not s.relative and s.module is not None:
            tops = [_CODE.code_for_node(s.module).split(".")[0]]
        else:
            return False
        if any(t == "__future__" or t not in sys.stdlib_module_names for t in tops):
            return False
    return True


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
