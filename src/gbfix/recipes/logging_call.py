"""GB0291: a ``logging.Logger`` method called inside compiled code.

Dynamo cannot trace Logger methods and cannot reorder them
(``reorderable_logging_functions`` only takes plain functions;
``ignore_logging_functions`` drops the record). What keeps the record is a
leaf function (``torch._dynamo.decorators.leaf_function``): an opaque node of
the graph that runs its Python body eagerly at run time. The rewrite sends the
call through a module-level helper::

    logger.warning("x %s", t)   ->   _gbfix_log("logger", "warning", "x %s", t)

The helper calls ``getattr(globals()["logger"], "warning")("x %s", t)``: same
logger, level, message and arguments. The logger travels by the name of its
module global because Dynamo cannot pass a Logger (or a bound method) into a
leaf function. So the receiver must be a module global: ``self.logger.info(...)``
is declined, as are keyword arguments (``exc_info=``, ``extra=``, ...), star
arguments, ``logger.exception`` and calls whose result is used.

What differs: the record's funcName/lineno name the helper, and a tensor that
requires grad is detached at the leaf boundary (its text loses ``grad_fn``).
On torch 2.13 inductor cannot compile a graph holding a leaf function; the
eager and aot_eager backends can.
"""

from __future__ import annotations

from typing import ClassVar

import libcst as cst

from gbfix.recipes.base import Recipe, SiteContext
from gbfix.recipes.print_call import call_at, global_bindings, is_module_global, str_literal

# Logger methods that emit a record and return None. `warning_once` / `info_once`
# are the lru_cached methods transformers adds to Logger; `exception` is left
# out: it logs the exception being handled, which differs inside the helper.
_METHODS = frozenset(
    {"debug", "info", "warning", "warn", "error", "critical", "fatal", "log", "warning_once", "info_once"}
)


class LeafHelperRecipe(Recipe):
    """Base for rewrites that route one call through a module-level leaf function.

    The helper is added once per file. While it is missing, the edit replaces
    the whole module (the helper goes after the imports and the call is
    rewritten), so two such sites in one file cannot both add it: the second
    edit overlaps the first and is retried next round, when the helper is
    there and only the call is replaced.
    """

    requires = frozenset({"leaf_function"})
    helper: ClassVar[str]  # the helper's name
    helper_code: ClassVar[str]  # its definition, with its register_fake
    helper_imports: ClassVar[tuple[str, ...]] = ("torch",)

    def match(self, ctx: SiteContext) -> cst.Call | None:
        """The call to reroute, or None."""
        raise NotImplementedError

    def reroute(self, call: cst.Call) -> cst.Call:
        """The call to the helper that replaces ``call``."""
        raise NotImplementedError

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        call = self.match(ctx)
        if call is None or not isinstance(ctx.file.parent(call), cst.Expr):
            return None  # the helper returns None: only a call whose result is unused
        present = _defines(ctx.module, self.helper)
        if present is None:
            return None
        self._call = call
        return call if present else ctx.module

    def rewrite(self, node: cst.CSTNode) -> cst.CSTNode:
        for module in self.helper_imports:
            self.need_import(module)
        new_call = self.reroute(self._call)
        if node is self._call:
            return new_call
        return _with_helper(node, self._call, new_call, self.helper_code)


def _defines(module: cst.Module, name: str) -> bool | None:
    """True if the module defines the helper, False if the name is free, None if taken."""
    bound = global_bindings(module, name)
    if not bound:
        return False
    ours = [s for s in module.body if isinstance(s, cst.FunctionDef) and s.name.value == name]
    return True if all(any(n is s for s in ours) for n in bound) else None


def _with_helper(module: cst.Module, call: cst.Call, new_call: cst.Call, code: str) -> cst.Module:
    class _Swap(cst.CSTTransformer):
        def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
            return new_call if original is call else updated

    body = list(module.visit(_Swap()).body)
    at = _after_imports(module)
    helper = list(cst.parse_module(code).body)
    helper[0] = helper[0].with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()])
    if at < len(body):
        body[at] = _blank_lines_before(body[at], 2)
    return module.with_changes(body=[*body[:at], *helper, *body[at:]])


def _after_imports(module: cst.Module) -> int:
    """Index after the last top-level import (after a docstring if there is none).

    The helper's decorator needs ``torch`` when the module runs, and imports that
    AddImportsVisitor adds go with the leading imports, above this point.
    """
    at = 0
    for i, stmt in enumerate(module.body):
        if isinstance(stmt, cst.SimpleStatementLine) and any(
            isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body
        ):
            at = i + 1
    if at == 0 and module.body and _is_docstring(module.body[0]):
        at = 1
    return at


def _is_docstring(stmt: cst.BaseStatement) -> bool:
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and isinstance(stmt.body[0], cst.Expr)
        and isinstance(stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def _blank_lines_before(stmt: cst.BaseStatement, n: int) -> cst.BaseStatement:
    blank = 0
    for line in stmt.leading_lines:
        if line.comment is not None:
            break
        blank += 1
    if blank >= n:
        return stmt
    return stmt.with_changes(leading_lines=[*[cst.EmptyLine()] * (n - blank), *stmt.leading_lines])


class LoggerToLeaf(LeafHelperRecipe):
    name = "logger-to-leaf"
    codes = ("GB0291",)
    safety = "safe"
    summary = "logger.<level>(...) -> a module-level leaf_function helper that logs at run time, inside the graph"
    rule = "GB0291"
    helper = "_gbfix_log"
    helper_code = '''\
@torch._dynamo.decorators.leaf_function
def _gbfix_log(owner, method, *args):
    # Added by gbfix: runs eagerly inside the compiled graph, so the record is
    # emitted at run time. The logger travels by the name of its global.
    getattr(globals()[owner], method)(*args)


@_gbfix_log.register_fake
def _gbfix_log_fake(owner, method, *args):
    return None
'''

    def match(self, ctx: SiteContext) -> cst.Call | None:
        call = call_at(ctx)
        if call is None or not isinstance(call.func, cst.Attribute):
            return None
        owner, method = call.func.value, call.func.attr.value
        if not isinstance(owner, cst.Name) or method not in _METHODS or not is_module_global(ctx, owner):
            return None
        if not call.args or any(a.keyword is not None or a.star for a in call.args):
            return None
        return call

    def reroute(self, call: cst.Call) -> cst.Call:
        assert isinstance(call.func, cst.Attribute) and isinstance(call.func.value, cst.Name)
        owner, method = call.func.value.value, call.func.attr.value
        head = [cst.Arg(cst.SimpleString(str_literal(owner))), cst.Arg(cst.SimpleString(str_literal(method)))]
        return call.with_changes(func=cst.Name(self.helper), args=[*head, *call.args])


RECIPES = (LoggerToLeaf,)
