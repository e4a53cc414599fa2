"""RC001: a Python number on a module that changes between calls (``self.calls += 1``).

Dynamo specialises an int attribute of an ``nn.Module`` to its value, so a counter
recompiles the frame on every call until the recompile limit, then runs it eagerly.
Two fixes, the verifier picks the first that keeps behaviour:

- a counter that the class only sets in ``__init__`` and steps with ``+=``/``-=`` becomes a
  tensor buffer, stepped in place in the graph:
  ``self.register_buffer("calls", torch.tensor(0), persistent=False)``. A read outside the
  class sees a tensor (``print(model.calls)`` prints ``tensor(12)``): the verifier rejects it.
- else ``torch._dynamo.config.allow_unspec_int_on_nn_module = True`` in the entry script:
  ints on modules are then treated like other ints (dynamic after one recompile).
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from gbfix.rccodes import cause
from gbfix.recipes.base import Decline, Recipe, SiteContext
from gbfix.recipes.compiled_call import recompile_guards
from gbfix.recipes.config_route import _ConfigRoute, binds_torch


def _attribute(ctx: SiteContext) -> str:
    guards = recompile_guards(ctx)
    source = cause(guards[0]).source if guards else ""
    if not source.startswith("self.") or not source[5:].isidentifier():
        raise Decline("not a number on `self`")
    return source[5:]


class CounterBuffer(Recipe):
    name = "counter-as-buffer"
    codes = ("RC001",)
    safety = "unsafe"  # code outside the class may read the counter and get a tensor for an int
    summary = "keep the counter in a tensor buffer, stepped in place: no guard on its value"
    rule = "RC001"

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        attr = _attribute(ctx)
        cls = ctx.enclosing(cst.ClassDef)
        if cls is None:
            raise Decline("the counter is not stepped in a class")
        on_self = m.Attribute(value=m.Name("self"), attr=m.Name(attr))
        sets = m.findall(cls, m.Assign(targets=[m.AssignTarget(target=on_self)]))
        steps = m.findall(cls, m.AugAssign(target=on_self, operator=m.AddAssign() | m.SubtractAssign(), value=m.Integer()))
        uses = m.findall(cls, on_self)
        if len(sets) != 1 or not isinstance(sets[0].value, cst.Integer) or len(uses) != len(sets) + len(steps):
            raise Decline(f"`self.{attr}` is used other than set to an int once and stepped with += / -=")
        init = ctx.file.ancestors(sets[0])
        if not any(isinstance(a, cst.FunctionDef) and a.name.value == "__init__" for a in init):
            raise Decline(f"`self.{attr}` is not set in __init__")
        stmt = next(a for a in init if isinstance(a, cst.SimpleStatementLine))
        if len(stmt.body) != 1:
            raise Decline("the assignment shares its line")
        self.attr, self.start = attr, sets[0].value.value
        return stmt

    def rewrite(self, node: cst.CSTNode) -> cst.CSTNode:
        if not binds_torch(self.ctx.module):
            self.need_import("torch")
        call = f'self.register_buffer("{self.attr}", torch.tensor({self.start}), persistent=False)\n'
        return cst.parse_statement(call).with_changes(leading_lines=node.leading_lines)


class UnspecIntOnModule(_ConfigRoute):
    name = "allow-unspec-int-on-nn-module"
    codes = ("RC001",)
    option = "allow_unspec_int_on_nn_module"
    requires = frozenset({"config.allow_unspec_int_on_nn_module"})
    why = "ints on nn.Modules are not specialised to their value (no recompile per new value)"
    summary = "set torch._dynamo.config.allow_unspec_int_on_nn_module = True at import: an int on a module is dynamic"
    rule = "RC001"

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        _attribute(ctx)
        return super().anchor(ctx)


RECIPES = [CounterBuffer, UnspecIntOnModule]
