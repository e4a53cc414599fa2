"""GB0025 / GB4297: a break the author asked for, `torch._dynamo.graph_break()` or
`torch._dynamo.skip_frame()`. Remove the call statement.

    x = x + 1
    torch._dynamo.graph_break()   ->  (line removed; `pass` if the block would be empty)
    x = x * 2

Unsafe: the author wanted the break, for instance to keep a side effect out of the graph
or to run the whole frame eagerly; the verifier still checks that outputs and logs stay.
Only a bare expression statement that is exactly the call is removed, with no arguments
or a literal message (anything else could run code worth keeping). The function is
matched by what the name resolves to, so `import torch._dynamo as dynamo` and
`from torch._dynamo import graph_break` count too. `torch.compiler` has neither
function in 2.13.
"""

from __future__ import annotations

from typing import ClassVar

import libcst as cst

from gbfix.recipes.base import Recipe, Replacement, SiteContext


def _literal_message(expr: cst.BaseExpression) -> bool:
    """A message whose evaluation runs no user code: a string literal, or an f-string of
    plain names without format specs or conversions."""
    if isinstance(expr, cst.SimpleString):
        return True
    if isinstance(expr, cst.ConcatenatedString):
        return _literal_message(expr.left) and _literal_message(expr.right)
    if isinstance(expr, cst.FormattedString):
        return all(
            isinstance(p, cst.FormattedStringText)
            or (isinstance(p.expression, cst.Name) and p.format_spec is None and p.conversion is None)
            for p in expr.parts
        )
    return False


class _RemoveCall(Recipe):
    safety = "unsafe"
    functions: ClassVar[frozenset[str]]  # qualified names of the call to remove

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        self._new: Replacement | None = None
        call = ctx.enclosing(cst.Call)
        expr = ctx.file.parent(call) if call is not None else None
        if not (isinstance(expr, cst.Expr) and expr.value is call and self._matches(ctx, call)):
            return None
        line = ctx.file.parent(expr)
        block = ctx.file.parent(line)
        if isinstance(line, cst.SimpleStatementSuite):  # `if debug: torch._dynamo.graph_break()`
            self._new = line.with_changes(body=self._without(line.body, expr) or [cst.Pass()])
        elif isinstance(line, cst.SimpleStatementLine) and isinstance(block, cst.IndentedBlock):
            rest = self._without(line.body, expr)
            if rest:
                self._new = line.with_changes(body=rest)
            elif len(block.body) > 1:
                self._new = cst.RemovalSentinel.REMOVE
            else:  # the comment after the call described the call: it goes with it
                self._new = line.with_changes(body=[cst.Pass()], trailing_whitespace=cst.TrailingWhitespace())
        else:  # module level: never inside compiled code
            return None
        return line

    def rewrite(self, node: cst.CSTNode) -> Replacement | None:
        return self._new

    def _matches(self, ctx: SiteContext, call: cst.Call) -> bool:
        if any(a.star or (a.keyword is not None and a.keyword.value != "msg") for a in call.args):
            return False
        if len(call.args) > 1 or not all(_literal_message(a.value) for a in call.args):
            return False
        scope = ctx.file.scopes.get(call.func)
        names = {q.name for q in scope.get_qualified_names_for(call.func)} if scope is not None else set()
        return bool(names) and names <= self.functions

    @staticmethod
    def _without(body, expr: cst.Expr) -> list[cst.BaseSmallStatement]:
        """The line's other small statements; the last loses its trailing `;`."""
        rest = [s for s in body if s is not expr]
        if rest and rest[-1].semicolon is not cst.MaybeSentinel.DEFAULT:
            rest[-1] = rest[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
        return rest


class RemoveGraphBreak(_RemoveCall):
    name = "remove-graph-break"
    codes = ("GB0025",)
    summary = "remove the explicit torch._dynamo.graph_break() call"
    rule = "GB0025"
    functions = frozenset({"torch._dynamo.graph_break", "torch._dynamo.decorators.graph_break"})


class RemoveSkipFrame(_RemoveCall):
    name = "remove-skip-frame"
    codes = ("GB4297",)
    summary = "remove the explicit torch._dynamo.skip_frame() call, so the frame is compiled"
    rule = "GB4297"
    functions = frozenset({"torch._dynamo.skip_frame", "torch._dynamo.decorators.skip_frame"})


RECIPES = (RemoveGraphBreak, RemoveSkipFrame)
