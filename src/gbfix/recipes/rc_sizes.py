"""RC003: a tensor's size changed between calls more than automatic dynamic shapes settles.

A changed size recompiles the frame once with that dimension dynamic (automatic dynamic
shapes); when the frame recompiles on sizes again, marking the dimension dynamic before
the first call compiles it once, for every size:

    torch._dynamo.mark_dynamic(x, 0)
    y = model(x)

Only a name is marked (an expression would be evaluated twice), in the statement before
the call. A dimension of size 0 or 1 at the first call cannot be marked: Dynamo raises,
and the verifier rejects the edit.
"""

from __future__ import annotations

import re

import libcst as cst

from gbfix.rccodes import cause
from gbfix.recipes import compiled_call
from gbfix.recipes.base import Decline, Recipe, SiteContext
from gbfix.recipes.config_route import binds_torch

_SIZE = re.compile(r"^(?P<name>\w+)\.size\(\)\[(?P<dim>\d+)\]$")


class MarkDynamic(Recipe):
    name = "mark-dynamic"
    codes = ("RC003",)
    requires = frozenset({"mark_dynamic"})
    summary = "mark the dimension dynamic before the call (torch._dynamo.mark_dynamic): one compile for every size"
    rule = "RC003"

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        guards = compiled_call.recompile_guards(ctx)
        if not guards:
            return None
        sized = [g for g in guards if cause(g).code == "RC003"]
        if len(sized) < 2:
            raise Decline("automatic dynamic shapes settled it with one recompile")
        m = _SIZE.match(cause(guards[0]).source)
        if m is None:
            raise Decline("the guard is not on one dimension of an argument")
        parsed, node = compiled_call.call(ctx)
        arg = compiled_call.argument(node, compiled_call.params(ctx), m["name"])
        if not isinstance(arg.value, cst.Name):
            raise Decline("the argument is an expression: only a name can be marked before the call")
        stmt = next((a for a in parsed.ancestors(node) if isinstance(a, cst.SimpleStatementLine)), None)
        if stmt is None or not isinstance(parsed.parent(stmt), (cst.IndentedBlock, cst.Module)):
            raise Decline("the call is not in a plain statement")
        self.into = None if parsed is ctx.file else parsed
        self.target, self.dim = arg.value.value, int(m["dim"])
        return stmt

    def rewrite(self, node: cst.CSTNode) -> cst.FlattenSentinel:
        if not binds_torch((self.into or self.ctx.file).module):
            self.need_import("torch")
        mark = cst.parse_statement(f"torch._dynamo.mark_dynamic({self.target}, {self.dim})\n")
        return cst.FlattenSentinel(
            [mark.with_changes(leading_lines=node.leading_lines), node.with_changes(leading_lines=[])]
        )


RECIPES = [MarkDynamic]
