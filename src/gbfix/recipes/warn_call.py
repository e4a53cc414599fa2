"""GB0007 at ``warnings.warn(...)`` inside compiled code.

GB0007 ("call to a skipped function") is generic; these recipes only take
``warnings.warn`` calls. ``reorderable_logging_functions`` would not do:
Dynamo refuses to reorder a call with a category argument (GB0296), drops
keyword arguments of the calls it reorders, and drops the call altogether when
it sits in an inlined function. The rewrite instead goes through a helper that
the compiled graph keeps, like ``logging_call`` (in a package, from the
package's generated ``_gbfix.py``). Two helpers, the first preferred:

- ``warn-to-op``: ``gbfix_warn(message, category)`` hands the warning to a
  library op that writes to a 0-element tensor (``op_helpers``), kept in order
  by inductor (``fullgraph=True`` and training included)::

      warnings.warn("msg", FutureWarning, stacklevel=2)  ->  gbfix_warn("msg", FutureWarning, stacklevel=2)
      warnings.warn(f"`{name}` is deprecated")           ->  gbfix_warn(f"`{name}` is deprecated")

  The message may be an expression: the helper runs while Dynamo traces, and
  hands the text known then (a literal, an f-string of a helper's arguments)
  to the op. A message that may hold a tensor is declined
  (``not_text_or_number``: Dynamo formats an f-string with a tensor field
  lazily, no text for the op); a parameter of the function counts as text
  when an uncompiled run showed it so (``observe``). Any other value reaching
  the helper is warned by the helper itself, which breaks again there.

  Inside the op the Python stack is torch's, so the op does not call
  ``warnings.warn``: it calls ``warnings.warn_explicit`` with the caller's file
  and line, its module's name (what filters match) and its
  ``__warningregistry__``, as ``warnings.warn(..., stacklevel=1)`` at that line
  does. The file and line are read while Dynamo traces the helper (from
  Dynamo's own stack of the frames it traces), never written into the source:
  lines added above the call later move the warning with it. A stacklevel is
  kept (``gbfix_warn(msg, FutureWarning, stacklevel=2)``): the warning names the
  frame that many levels up, read from the same stack, or, for a caller outside
  the compiled function, found at run time on the Python stack above the
  compiled function's frame: the place ``warnings.warn`` names uncompiled, where
  the original, compiled, named a frame of torch's (``eval_frame.py``).
  Uncompiled, the helper calls ``warnings.warn(message, category, stacklevel +
  1)``: the same place.
- ``warn-to-leaf``: a ``torch._dynamo.decorators.leaf_function`` that calls
  ``warnings.warn`` with the same message (any expression), category and
  stacklevel; it does not lower in inductor on torch 2.13, so the engine only
  offers it when every compile uses the eager backend. A leaf function takes no
  class: the module builds its helper for the category once, at import, from a
  lambda returning it (``leaf_helpers``)::

      _gbfix_warn_FutureWarning = gbfix_warn_leaf(lambda: FutureWarning)  # once per module and category
      warnings.warn(f"m {n}", FutureWarning, stacklevel=2)  ->  _gbfix_warn_FutureWarning(f"m {n}", 2)

  With stacklevel 1 the warning is attributed to that line of the same module
  (same filters, same once-per-location registry); so the category must be a
  builtin or a module-global name, which the lambda finds as the call did.

The category goes to ``gbfix_warn`` as the call wrote it (a name or a dotted
name). ``source=``, ``skip_file_prefixes=``, a non-literal stacklevel and a
message built as a Warning instance are declined.
"""

from __future__ import annotations

import libcst as cst

from gbfix.recipes import leaf_helpers, op_helpers
from gbfix.recipes.analysis import (
    builtin_at,
    call_at,
    is_builtin,
    is_module_global,
    qualified_names,
)
from gbfix.recipes.base import Decline, SiteContext
from gbfix.recipes.logging_call import (
    HelperRecipe,
    LeafRecipe,
    arglist,
    not_text_or_number,
    observed_owner,
)
from gbfix.recipes.print_call import format_fields, has_fstring

_PARAMS = ("message", "category", "stacklevel")
class WarnRecipe(HelperRecipe):
    """A ``warnings.warn`` call with a message, a category and a literal stacklevel at most."""

    codes = ("GB0007",)
    safety = "safe"
    rule = "GB0007"

    def match(self, ctx: SiteContext) -> cst.Call | None:
        call = call_at(ctx)
        if call is None or qualified_names(ctx, call.func) != {"warnings.warn"}:
            return None
        bound = _bind(call)
        if bound is None or "message" not in bound:
            return None
        message = bound["message"].value
        if isinstance(message, cst.Call) and _callee(message).endswith("Warning"):
            return None  # a Warning instance: its class is the category
        category = bound.get("category")
        if category is not None and not _is_chain(category.value):
            return None
        stacklevel = bound.get("stacklevel")
        if stacklevel is not None and not isinstance(stacklevel.value, cst.Integer):
            return None
        self._bound = bound
        return call


class WarnToOp(WarnRecipe):
    name = "warn-to-op"
    requires = frozenset({"register_fake"})
    summary = "warnings.warn(...) -> a library op that warns at run time, kept in order by inductor"
    helper = op_helpers.WARN.name

    def observe(self, ctx: SiteContext) -> cst.FunctionDef | None:
        """The function holding the call, when the message is built from its parameters
        (a ``deprecate(name, version, message)`` helper): an uncompiled run shows them as text."""
        call = super().match(ctx)
        fn = ctx.enclosing(cst.FunctionDef)
        if call is None or fn is None:
            return None
        try:
            values = message_values(ctx, call, self._bound["message"].value)
        except Decline:
            return None  # declined whatever the run shows
        return next(filter(None, (observed_owner(ctx, v) for v in values)), None)

    def match(self, ctx: SiteContext) -> cst.Call | None:
        call = super().match(ctx)
        if call is None:
            return None
        # Dynamo formats an f-string with a tensor field lazily: not text the op could take
        for value in message_values(ctx, call, self._bound["message"].value):
            why = not_text_or_number(ctx, value)
            if why:
                raise Decline(f"{ctx.code(value)} {why}")
        stacklevel = self._bound.get("stacklevel")
        if stacklevel is not None and int(stacklevel.value.value, 0) < 1:
            return None  # warnings.warn names its own frame
        return call

    def reroute(self, call: cst.Call) -> cst.Call:
        """The call with the helper's name: it takes warnings.warn's message, category and stacklevel."""
        return call.with_changes(func=cst.Name(self.helper))


class WarnToLeaf(LeafRecipe, WarnRecipe):
    name = "warn-to-leaf"
    requires = frozenset({"leaf_function"})
    summary = "warnings.warn(...) -> a module-level leaf_function helper that warns at run time, inside the graph"
    helper = leaf_helpers.WARN_LEAF.name
    kind = "warn"

    def match(self, ctx: SiteContext) -> cst.Call | None:
        call = super().match(ctx)
        if call is None:
            return None
        category = self._bound.get("category")
        if category is None:
            return call if builtin_at(ctx, call, "UserWarning") else None
        return call if _by_name(ctx, category.value) else None

    def bound(self, ctx: SiteContext) -> str:
        category = self._bound.get("category")
        return "UserWarning" if category is None else category.value.value

    def reroute(self, call: cst.Call) -> cst.Call:
        """The module's helper for the category, with the message and the stacklevel."""
        bound = self._bound
        args = [bound["message"], *([bound["stacklevel"]] if "stacklevel" in bound else [])]
        return call.with_changes(func=cst.Name(self._binding[0]), args=arglist(call, args))


def message_values(ctx: SiteContext, call: cst.Call, message: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The values the message is built from: an f-string's fields, else the message itself."""
    if not has_fstring(message):
        return [message]
    found = format_fields(ctx, call, message)
    if found is None:
        raise Decline("an f-string field the op cannot take")
    return found[1]


def _bind(call: cst.Call) -> dict[str, cst.Arg] | None:
    """warnings.warn's parameters as passed, or None for anything else (source=, *args)."""
    bound: dict[str, cst.Arg] = {}
    for i, arg in enumerate(call.args):
        if arg.star:
            return None
        key = arg.keyword.value if arg.keyword is not None else (_PARAMS[i] if i < len(_PARAMS) else None)
        if key not in _PARAMS or key in bound:
            return None
        bound[key] = arg
    return bound


def _is_chain(node: cst.BaseExpression) -> bool:
    """A name or a dotted name."""
    while isinstance(node, cst.Attribute):
        node = node.value
    return isinstance(node, cst.Name)


def _by_name(ctx: SiteContext, category: cst.BaseExpression) -> bool:
    """The helper can find the category from its name: a builtin or a module global."""
    return isinstance(category, cst.Name) and (is_builtin(ctx, category) or is_module_global(ctx, category))


def _callee(call: cst.Call) -> str:
    func = call.func
    if isinstance(func, cst.Attribute):
        return func.attr.value
    return func.value if isinstance(func, cst.Name) else ""


RECIPES = (WarnToOp, WarnToLeaf)
