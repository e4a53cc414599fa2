"""GB0059: ``print(...)`` inside compiled code, through a module-level helper.

``print-to-op`` builds the same format string and values as ``print-to-hop``
(``print_call``), and calls a helper with them instead of
``torch._higher_order_ops.print`` (in a package, the helper lives in the
package's generated ``_gbfix.py``; see ``gbfix.generated``)::

    print(f"block {self.idx}: {tuple(x.shape)}")  ->  gbfix_print("block {}: {}", self.idx, str(tuple(x.shape)))

The helper (``op_helpers.PRINT``) decides while Dynamo traces it. When every value is a string, a number, a
bool or None (known at trace time: an index, a static shape), it formats the text and
hands it to a library op that writes to a 0-element sink, as
``logger-to-op``'s op does: a plain op call that keeps the graph in inductor's FX graph
cache, where torch's print op (an effectful op, ``with_effects``) keeps it out, so a
restarted program recompiles it. A tensor, or a size that became symbolic, is only known
at run time: those values go to torch's print op, which formats them there. Prints of
either kind are in order among themselves; the checks on the program's own backend
catch a graph where inductor puts one kind before the other. A print with a
``t.item()`` field is left to ``print-to-hop-keep-tensor`` (its value is a tensor).
"""

from __future__ import annotations

import libcst as cst

from gbfix.recipes import op_helpers
from gbfix.recipes.base import Decline, SiteContext
from gbfix.recipes.logging_call import HelperRecipe
from gbfix.recipes.print_call import PrintToHop, PrintToHopKeepTensor


class PrintToOp(HelperRecipe):
    name = "print-to-op"
    codes = ("GB0059",)
    safety = "safe"
    rule = "GB0059"
    requires = frozenset({"hop_print", "register_fake"})
    summary = "print(...) -> a helper: text known while tracing via a library op (FX-graph-cacheable), tensors via torch's print op"
    helper = op_helpers.PRINT.name

    def match(self, ctx: SiteContext) -> cst.Call | None:
        try:
            if PrintToHopKeepTensor().anchor(ctx) is not None:
                return None  # a value is a tensor for sure: print-to-hop-keep-tensor, without the helper
        except Decline:
            pass  # not that recipe's; the plain print below may still go through the op
        hop = PrintToHop()
        call = hop.anchor(ctx)
        if not isinstance(call, cst.Call):
            return None
        self._hop = hop.replacement()
        return call

    def reroute(self, call: cst.Call) -> cst.Call:
        return self._hop.with_changes(func=cst.Name(self.helper))


RECIPES = (PrintToOp,)
