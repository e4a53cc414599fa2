"""GB0007 at ``warnings.warn(...)`` inside compiled code.

GB0007 ("call to a skipped function") is generic; these recipes only take
``warnings.warn`` calls. ``reorderable_logging_functions`` would not do:
Dynamo refuses to reorder a call with a category argument (GB0296), drops
keyword arguments of the calls it reorders, and drops the call altogether when
it sits in an inlined function. The rewrite instead goes through a
module-level helper that the compiled graph keeps, like ``logging_call``. Two
helpers, the first preferred:

- ``warn-to-op``: a library op that writes to a 0-element tensor of the
  module, like ``logger-to-op``'s, kept in order by inductor (``fullgraph=True``
  and training included)::

      warnings.warn("msg", FutureWarning, stacklevel=2)  ->  _gbfix_warn("msg", "FutureWarning", 57)
      warnings.warn(f"`{name}` is deprecated")           ->  _gbfix_warn(f"`{name}` is deprecated", "UserWarning", 9)

  The message may be an expression: the helper runs while Dynamo traces, and
  hands the text known then (a literal, an f-string of a helper's arguments)
  to the op. A message that may hold a tensor is declined
  (``not_text_or_number``: Dynamo formats an f-string with a tensor field
  lazily, no text for the op); a parameter of the function counts as text
  when an uncompiled run showed it so (``observe``). Any other value reaching
  the helper is warned by the helper itself, which breaks again there.

  Inside the op the Python stack is torch's, so the op does not call
  ``warnings.warn``: it calls ``warnings.warn_explicit`` with this module's
  file, the line of the call (57, written into the call when it is rewritten),
  the module's name (what filters match) and its ``__warningregistry__``, as
  ``warnings.warn(..., stacklevel=1)`` at that line does. So a stacklevel is
  dropped: the warning points at the call's line, not at a caller (under
  compile a stacklevel above 1 does not reach the user's caller anyway: it
  lands in ``torch/nn/modules/module.py`` or ``torch/_dynamo/eval_frame.py``).
  Message and category stay the same. The default filters decide on some
  categories by module (``DeprecationWarning`` shows for ``__main__`` only),
  so a stacklevel above 1 is only taken with a builtin category that no
  default filter names (``UserWarning``, ``FutureWarning``, ...). In a helper
  whose ``stacklevel=2`` blames its caller (``deprecate(name, version, msg)``),
  the warning points at the helper's line instead: same text and category,
  another file and line on stderr, and one registry entry for all callers. The line
  number is not updated when lines above the call are added or removed later.
- ``warn-to-leaf``: a ``torch._dynamo.decorators.leaf_function`` that calls
  ``warnings.warn`` with the same message (any expression), category and
  stacklevel; it does not lower in inductor on torch 2.13, so the engine only
  offers it when every compile uses the eager backend::

      warnings.warn(f"m {n}", FutureWarning, stacklevel=2)  ->  _gbfix_warn_leaf(f"m {n}", "FutureWarning", 2)

  The warning is attributed to the helper's line in the same module (same
  filters, same once-per-location registry).

The category travels by name (neither helper can take a class), so it must be
a builtin or a module-global name; a dotted category (``mod.MyWarning``),
``source=``, ``skip_file_prefixes=``, a non-literal stacklevel and a message
built as a Warning instance are declined.
"""

from __future__ import annotations

import libcst as cst

from gbfix.recipes.analysis import (
    builtin_at,
    call_at,
    is_builtin,
    is_module_global,
    qualified_names,
)
from gbfix.recipes.base import Decline, SiteContext
from gbfix.recipes.logging_call import (
    NUMBERED_HELPER,
    OP_LIBRARY,
    HelperRecipe,
    arglist,
    not_text_or_number,
    parameter,
    renumber,
)
from gbfix.recipes.print_call import format_fields, has_fstring, str_literal

_PARAMS = ("message", "category", "stacklevel")
# Builtin categories that no default filter names (DeprecationWarning is shown
# for `__main__` only; PendingDeprecationWarning, ImportWarning and
# ResourceWarning are ignored): the module a warning points at does not matter.
_SHOWN_EVERYWHERE = frozenset(
    {"Warning", "UserWarning", "FutureWarning", "RuntimeWarning"}
    | {"SyntaxWarning", "UnicodeWarning", "BytesWarning", "EncodingWarning"}
)


class WarnRecipe(HelperRecipe):
    """A ``warnings.warn`` call whose category the helper can find by name."""

    codes = ("GB0007",)
    safety = "safe"
    rule = "GB0007"
    helper_imports = ("torch", "warnings", "builtins")

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
        if category is None:
            if not builtin_at(ctx, call, "UserWarning"):
                return None
        elif not _by_name(ctx, category.value):
            return None
        stacklevel = bound.get("stacklevel")
        if stacklevel is not None and not isinstance(stacklevel.value, cst.Integer):
            return None
        self._bound = bound
        return call

    def message_and_category(self, call: cst.Call) -> list[cst.Arg]:
        bound = self._bound
        category = bound.get("category")
        name = cst.SimpleString(str_literal(category.value.value if category is not None else "UserWarning"))
        return [bound["message"], cst.Arg(name) if category is None else category.with_changes(value=name)]


class WarnToOp(WarnRecipe):
    name = "warn-to-op"
    requires = frozenset({"register_fake"})
    shared = (OP_LIBRARY,)
    summary = "warnings.warn(...) -> a library op that warns at run time, kept in order by inductor"
    helper = NUMBERED_HELPER
    helper_code = '''\
def _gbfix_warn_impl(message, category, lineno, sink):
    # Added by gbfix: the body of the op below, run at run time inside compiled
    # graphs. The warning is attributed to line `lineno` of this module, with
    # its filters and once-per-location registry, as warnings.warn there would.
    # The category travels by name.
    cls = globals()[category] if category in globals() else getattr(builtins, category)
    registry = globals().setdefault("__warningregistry__", {})
    warnings.warn_explicit(
        message, cls, __file__, lineno, module=__name__, registry=registry, module_globals=globals()
    )


_gbfix_lib.define(f"warn_{_gbfix_tag}(str message, str category, int lineno, Tensor(a!) sink) -> ()")
_gbfix_lib.impl(f"warn_{_gbfix_tag}", torch.compiler.disable(_gbfix_warn_impl), "CompositeExplicitAutograd")
torch.library.register_fake(f"gbfix::warn_{_gbfix_tag}", lambda *args: None, lib=_gbfix_lib)
_gbfix_warn_op = getattr(torch.ops.gbfix, f"warn_{_gbfix_tag}")


def _gbfix_warn(message, category, lineno):
    # Added by gbfix: runs while Dynamo traces. A message known then (a str) goes to
    # the op; anything else is warned here, which Dynamo cannot trace.
    if type(message) is str:
        _gbfix_warn_op(message, category, lineno, _gbfix_sink)
    else:
        _gbfix_warn_impl(message, category, lineno, _gbfix_sink)
'''

    @classmethod
    def finalize(cls, module: cst.Module) -> cst.Module:
        """The helper's calls carry their own line, which any edit above them moves."""
        return renumber(module) if NUMBERED_HELPER in module.code else module

    def observe(self, ctx: SiteContext) -> cst.FunctionDef | None:
        """The function holding the call, when the message is built from its parameters
        (a ``deprecate(name, version, message)`` helper): an uncompiled run shows them as text."""
        call = super().match(ctx)
        fn = ctx.enclosing(cst.FunctionDef)
        if call is None or fn is None:
            return None
        try:
            values = _message_values(ctx, call, self._bound["message"].value)
        except Decline:
            return None  # declined whatever the run shows
        return fn if any(parameter(fn, v) for v in values) else None

    def match(self, ctx: SiteContext) -> cst.Call | None:
        call = super().match(ctx)
        if call is None:
            return None
        # Dynamo formats an f-string with a tensor field lazily: not text the op could take
        for value in _message_values(ctx, call, self._bound["message"].value):
            why = not_text_or_number(ctx, value)
            if why:
                raise Decline(f"{ctx.code(value)} {why}")
        stacklevel, category = self._bound.get("stacklevel"), self._bound.get("category")
        if stacklevel is not None and int(stacklevel.value.value, 0) > 1 and category is not None:
            # The location moves to this module: keep it only where the default
            # filters decide the same whatever module the location names.
            name = category.value
            if not (isinstance(name, cst.Name) and name.value in _SHOWN_EVERYWHERE and is_builtin(ctx, name)):
                return None
        return call

    def reroute(self, call: cst.Call) -> cst.Call:
        assert self.ctx is not None
        # The call keeps its line when replaced alone; adding a helper renumbers it.
        line = cst.Integer(str(self.ctx.file.span(call)[0][0]))
        stacklevel = self._bound.get("stacklevel")
        where = cst.Arg(line) if stacklevel is None else stacklevel.with_changes(value=line)
        return call.with_changes(func=cst.Name(self.helper), args=arglist(call, [*self.message_and_category(call), where]))


class WarnToLeaf(WarnRecipe):
    name = "warn-to-leaf"
    requires = frozenset({"leaf_function"})
    summary = "warnings.warn(...) -> a module-level leaf_function helper that warns at run time, inside the graph"
    helper = "_gbfix_warn_leaf"
    helper_code = '''\
@torch._dynamo.decorators.leaf_function
def _gbfix_warn_leaf(message, category, stacklevel=1):
    # Added by gbfix: runs eagerly inside the compiled graph, so the warning is
    # issued at run time. The category travels by name.
    category = globals()[category] if category in globals() else getattr(builtins, category)
    warnings.warn(message, category, stacklevel)


@_gbfix_warn_leaf.register_fake
def _gbfix_warn_leaf_fake(message, category, stacklevel=1):
    return None
'''

    def reroute(self, call: cst.Call) -> cst.Call:
        stacklevel = self._bound.get("stacklevel")
        args = [*self.message_and_category(call), *([stacklevel] if stacklevel is not None else [])]
        return call.with_changes(func=cst.Name(self.helper), args=arglist(call, args))


def _message_values(ctx: SiteContext, call: cst.Call, message: cst.BaseExpression) -> list[cst.BaseExpression]:
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


def _by_name(ctx: SiteContext, category: cst.BaseExpression) -> bool:
    """The helper can find the category from its name: a builtin or a module global."""
    return isinstance(category, cst.Name) and (is_builtin(ctx, category) or is_module_global(ctx, category))


def _callee(call: cst.Call) -> str:
    func = call.func
    if isinstance(func, cst.Attribute):
        return func.attr.value
    return func.value if isinstance(func, cst.Name) else ""


RECIPES = (WarnToOp, WarnToLeaf)
