"""GB4198: ``copy.deepcopy(t)`` of a tensor inside compiled code.

Dynamo refuses to trace ``Tensor.__deepcopy__`` (the break's innermost frame is
in ``copy.py``; the site is the user's call). For a plain tensor that method is
``with torch.no_grad(): clone; requires_grad_() if the source required grad``,
which ``deepcopy-to-clone`` (safe) writes out::

    snapshot = copy.deepcopy(x)  ->  snapshot = x.detach().clone().requires_grad_(x.requires_grad)

A new leaf with the same values, dtype, device and ``requires_grad``; no
gradient flows back to ``x`` (``x.clone()`` alone would send one). Dynamo traces
it while ``x`` does not require grad; when it does, the new leaf is an
intermediate that requires grad, which Dynamo refuses (GB8985), and the verifier
rejects the edit. What ``deepcopy`` does and the rewrite does not: copy ``.grad``
(set by backward only on tensors that require grad: not in an accepted edit) and
attributes set on the tensor object, copy the *whole* storage keeping the
view's offset and strides (``clone`` gives a compact copy: equal values, but a
non-contiguous view may come back contiguous), and raise on a non-leaf that
requires grad.

Declined: anything that may not be a plain tensor -- the break's stack going
further into ``copy.py`` (a container being copied), arguments other than a
local name or a ``self.<buffer>``, names bound from an attribute (possibly a
``Parameter``: its copy is a Parameter again) or from a container display, and a
``memo`` argument.
"""

from __future__ import annotations

import os
from pathlib import Path

import libcst as cst
from libcst.metadata import Assignment

from gbfix.recipes.base import Recipe, Replacement, SiteContext
from gbfix.recipes.print_call import call_at, qualified_names

_CONTAINERS = (cst.List, cst.Tuple, cst.Dict, cst.Set, cst.ListComp, cst.DictComp, cst.SetComp, cst.GeneratorExp)


def _is_self(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Name) and node.value == "self"


def _names_parameter(ctx: SiteContext, value: cst.BaseExpression) -> bool:
    return isinstance(value, cst.Call) and ctx.code(value.func).endswith("Parameter")


class DeepcopyToClone(Recipe):
    name = "deepcopy-to-clone"
    codes = ("GB4198",)
    safety = "safe"
    summary = "copy.deepcopy(t) -> t.detach().clone().requires_grad_(t.requires_grad): the same new leaf tensor"
    rule = "GB4198"

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        call = call_at(ctx)
        if call is None or qualified_names(ctx, call.func) != {"copy.deepcopy"}:
            return None
        if len(call.args) != 1 or call.args[0].keyword is not None or call.args[0].star:
            return None
        if not self._copies_the_argument(ctx):
            return None
        arg = call.args[0].value
        if isinstance(arg, cst.Name):
            ok = self._plain_local(ctx, arg)
        else:
            ok = self._self_buffer(ctx, arg)
        return call if ok else None

    def rewrite(self, node: cst.CSTNode) -> Replacement:
        assert isinstance(node, cst.Call)
        t = node.args[0].value.with_changes(lpar=[], rpar=[])

        def method(value: cst.BaseExpression, name: str, *args: cst.BaseExpression) -> cst.Call:
            return cst.Call(cst.Attribute(value, cst.Name(name)), [cst.Arg(a) for a in args])

        flag = cst.Attribute(t, cst.Name("requires_grad"))
        out = method(method(method(t, "detach"), "clone"), "requires_grad_", flag)
        return out.with_changes(lpar=node.lpar, rpar=node.rpar)

    @staticmethod
    def _copies_the_argument(ctx: SiteContext) -> bool:
        """The frames below the user's call: only ``copy.deepcopy`` itself, which then
        called the tensor's ``__deepcopy__``. Deeper (``_deepcopy_list``, ...) means a
        container holding tensors was copied."""
        stack = ctx.site.brk.stack
        here = str(ctx.site.path)
        mine = [i for i, f in enumerate(stack) if os.path.realpath(f.file) == here]
        below = stack[mine[-1] + 1 :] if mine else stack
        if not below:  # no frames below given: judge by the source alone
            return True
        return len(below) == 1 and Path(below[0].file).name == "copy.py" and below[0].name == "deepcopy"

    @staticmethod
    def _plain_local(ctx: SiteContext, name: cst.Name) -> bool:
        """A parameter or local whose every binding is a computed value (not an
        attribute, which may be a Parameter, nor a container)."""
        scope = ctx.file.scopes.get(name)
        if scope is None or scope is scope.globals:
            return False
        bound = list(scope[name.value])
        if not bound:
            return False
        for a in bound:
            if not isinstance(a, Assignment) or a.scope is not scope:
                return False
            if isinstance(a.node, cst.Param):
                continue
            target = ctx.file.parent(a.node)
            assign = ctx.file.parent(target) if isinstance(target, cst.AssignTarget) else target
            value = getattr(assign, "value", None)
            if not isinstance(assign, (cst.Assign, cst.AnnAssign, cst.AugAssign)) or value is None:
                return False  # loop targets, unpacking, with ... as, imports
            if isinstance(assign, cst.Assign) and (len(assign.targets) != 1 or assign.targets[0].target is not a.node):
                return False
            if isinstance(value, (cst.Attribute, *_CONTAINERS)):
                return False
            if _names_parameter(ctx, value):
                return False
        return True

    @staticmethod
    def _self_buffer(ctx: SiteContext, attr: cst.BaseExpression) -> bool:
        """``self.<name>`` registered in the class with ``register_buffer``, and only ever
        reassigned computed tensors (a call or arithmetic that is not a Parameter)."""
        if not (isinstance(attr, cst.Attribute) and _is_self(attr.value)):
            return False
        cls = ctx.enclosing(cst.ClassDef, node=attr)
        if cls is None:
            return False
        want, buffer, parameter = attr.attr.value, [False], [False]

        class _Walk(cst.CSTVisitor):
            def visit_Call(self, node: cst.Call) -> None:
                f = node.func
                if isinstance(f, cst.Attribute) and f.attr.value == "register_buffer" and node.args:
                    first = node.args[0].value
                    if isinstance(first, cst.SimpleString) and first.evaluated_value == want:
                        buffer[0] = True

            def visit_Assign(self, node: cst.Assign) -> None:
                for t in node.targets:
                    target = t.target
                    if isinstance(target, cst.Attribute) and target.attr.value == want and _is_self(target.value):
                        # a tensor assigned to a buffer's name stays a buffer; a Parameter replaces it
                        value = node.value
                        if not isinstance(value, (cst.BinaryOperation, cst.Call)) or _names_parameter(ctx, value):
                            parameter[0] = True

        cls.visit(_Walk())
        return buffer[0] and not parameter[0]


RECIPES = (DeepcopyToClone,)
