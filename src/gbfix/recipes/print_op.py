"""GB0059: ``print(...)`` inside compiled code, through a module-level helper.

``print-to-op`` builds the same format string and values as ``print-to-hop``
(``print_call``), and calls a helper of the module with them instead of
``torch._higher_order_ops.print``::

    print(f"block {self.idx}: {tuple(x.shape)}")  ->  _gbfix_print("block {}: {}", self.idx, str(tuple(x.shape)))

The helper decides while Dynamo traces it. When every value is a string, a number, a
bool or None (known at trace time: an index, a static shape), it formats the text and
hands it to a library op of the module that writes to the module's 0-element sink, as
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

from gbfix.recipes.base import Decline, SiteContext
from gbfix.recipes.logging_call import OP_LIBRARY, HelperRecipe
from gbfix.recipes.print_call import PrintToHop, PrintToHopKeepTensor


class PrintToOp(HelperRecipe):
    name = "print-to-op"
    codes = ("GB0059",)
    safety = "safe"
    rule = "GB0059"
    requires = frozenset({"hop_print", "register_fake"})
    shared = (OP_LIBRARY,)
    summary = "print(...) -> a helper: text known while tracing via a library op (FX-graph-cacheable), tensors via torch's print op"
    helper = "_gbfix_print"
    helper_code = '''\
def _gbfix_print_impl(text, sink):
    # Added by gbfix: the body of the op below, run at run time inside compiled graphs.
    print(text)


_gbfix_lib.define(f"print_{_gbfix_tag}(str text, Tensor(a!) sink) -> ()")
_gbfix_lib.impl(f"print_{_gbfix_tag}", torch.compiler.disable(_gbfix_print_impl), "CompositeExplicitAutograd")
torch.library.register_fake(f"gbfix::print_{_gbfix_tag}", lambda *args: None, lib=_gbfix_lib)
_gbfix_print_op = getattr(torch.ops.gbfix, f"print_{_gbfix_tag}")


def _gbfix_print(fmt, *values):
    # Text known while Dynamo traces (strings, numbers) is printed by this module's op;
    # a tensor, or a size that became symbolic, is formatted at run time by torch's print op.
    if all([isinstance(v, (str, int, float, type(None))) for v in values]):
        _gbfix_print_op(fmt.format(*values), _gbfix_sink)
    else:
        torch._higher_order_ops.print(fmt, *values)
'''

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
