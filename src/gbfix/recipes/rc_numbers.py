"""RC002: a Python float argument that changes every call (a learning rate, a temperature).

Dynamo specialises a float argument to its value, so a new value compiles again. Passed
as a 0-d tensor it is an input of the graph like any other:

    w = sgd_step(w, grad, torch.tensor(lr, dtype=torch.float64))

float64 keeps the value exact, as the Python float was, and a float tensor it meets keeps
its dtype; an integer tensor does not (`torch.arange(3) * lr` is float32, times the tensor
float64), so the recipe is unsafe: a path the program does not run may differ. A use that needs a
Python float (``math.exp(lr)``, ``if lr > 0``) breaks or fails: the verifier rejects it.
"""

from __future__ import annotations

import libcst as cst

from gbfix.rccodes import cause
from gbfix.recipes import compiled_call
from gbfix.recipes.base import Decline, Recipe, SiteContext
from gbfix.recipes.config_route import binds_torch
from gbfix.recipes.tree import keyword_arg


class TensorArgument(Recipe):
    name = "float-argument-as-tensor"
    codes = ("RC002",)
    safety = "unsafe"  # an integer tensor times a float64 0-d tensor is float64, times the float float32
    summary = "pass the changing float argument as a 0-d float64 tensor: no guard on its value"
    rule = "RC002"

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        guards = compiled_call.recompile_guards(ctx)
        if not guards:
            return None
        why = cause(guards[0])
        if not isinstance(why.value, float):
            raise Decline("not a float: an int argument is made dynamic by automatic dynamic shapes")
        parsed, node = compiled_call.call(ctx)
        arg = compiled_call.argument(node, compiled_call.params(ctx), why.source)
        self.into = None if parsed is ctx.file else parsed
        return arg.value

    def rewrite(self, node: cst.CSTNode) -> cst.CSTNode:
        if not binds_torch((self.into or self.ctx.file).module):
            self.need_import("torch")
        dtype = keyword_arg("dtype", cst.parse_expression("torch.float64"))
        return cst.Call(cst.parse_expression("torch.tensor"), [cst.Arg(node), dtype])


RECIPES = [TensorArgument]
