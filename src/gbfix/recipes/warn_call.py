"""GB0007 at ``warnings.warn(...)`` inside compiled code.

GB0007 ("call to a skipped function") is generic; this recipe only takes
``warnings.warn`` calls. ``reorderable_logging_functions`` would not do:
Dynamo refuses to reorder a call with a category argument (GB0296), drops
keyword arguments of the calls it reorders, and drops the call altogether when
it sits in an inlined function. The rewrite instead goes through a leaf
function, like ``logging_call``::

    warnings.warn("msg", FutureWarning, stacklevel=2)  ->  _gbfix_warn("msg", "FutureWarning", 2)

The helper calls ``warnings.warn`` at run time with the same message, category
and stacklevel. The category travels by name (Dynamo cannot pass a class into a
leaf function), so it must be a builtin or a module-global name; a dotted
category (``mod.MyWarning``), ``source=``, ``skip_file_prefixes=``, a non-literal
stacklevel and a message built as a Warning instance are declined.

What differs: the location the warning is attributed to. With stacklevel 1 it
is the helper's line in the same module (same filters, same once-per-location
registry); above 1 both the original under compile and the helper point into
torch's frames.
"""

from __future__ import annotations

import libcst as cst

from gbfix.recipes.base import SiteContext
from gbfix.recipes.logging_call import LeafHelperRecipe
from gbfix.recipes.print_call import (
    builtin_at,
    call_at,
    is_builtin,
    is_module_global,
    qualified_names,
    str_literal,
)

_PARAMS = ("message", "category", "stacklevel")


class WarnToLeaf(LeafHelperRecipe):
    name = "warn-to-leaf"
    codes = ("GB0007",)
    safety = "safe"
    summary = "warnings.warn(...) -> a module-level leaf_function helper that warns at run time, inside the graph"
    rule = "GB0007"
    helper = "_gbfix_warn"
    helper_imports = ("torch", "warnings", "builtins")
    helper_code = '''\
@torch._dynamo.decorators.leaf_function
def _gbfix_warn(message, category, stacklevel=1):
    # Added by gbfix: runs eagerly inside the compiled graph, so the warning is
    # issued at run time. The category travels by name.
    category = globals()[category] if category in globals() else getattr(builtins, category)
    warnings.warn(message, category, stacklevel)


@_gbfix_warn.register_fake
def _gbfix_warn_fake(message, category, stacklevel=1):
    return None
'''

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

    def reroute(self, call: cst.Call) -> cst.Call:
        bound = self._bound
        category = bound.get("category")
        name = cst.SimpleString(str_literal(category.value.value if category is not None else "UserWarning"))
        args = [_positional(bound["message"]), cst.Arg(name) if category is None else _positional(category, name)]
        if "stacklevel" in bound:
            args.append(_positional(bound["stacklevel"]))
        args[-1] = args[-1].with_changes(comma=call.args[-1].comma)  # a trailing comma stays at the end
        return call.with_changes(func=cst.Name(self.helper), args=args)


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


def _positional(arg: cst.Arg, value: cst.BaseExpression | None = None) -> cst.Arg:
    return arg.with_changes(keyword=None, equal=cst.MaybeSentinel.DEFAULT, value=value or arg.value)


def _callee(call: cst.Call) -> str:
    func = call.func
    if isinstance(func, cst.Attribute):
        return func.attr.value
    return func.value if isinstance(func, cst.Name) else ""


RECIPES = (WarnToLeaf,)
