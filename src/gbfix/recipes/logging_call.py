"""GB0291: a ``logging.Logger`` method called inside compiled code.

Dynamo cannot trace Logger methods and cannot reorder them
(``reorderable_logging_functions`` only takes plain functions;
``ignore_logging_functions`` drops the record). The rewrite sends the call
through a helper that the compiled graph keeps and runs at run time (in a
package, the helper lives in the package's generated ``_gbfix.py``; see
``gbfix.generated``). Two helpers, the first preferred:

- ``logger-to-op``: ``gbfix_log`` hands the call to a library op that writes to
  a 0-element tensor (``op_helpers``): kept in the graph and in order with its
  other ops, run by inductor on every call, also with ``fullgraph=True`` and in
  training, and the graph stays in inductor's FX graph cache. The call keeps
  its logger and its arguments, any expression::

      logger.warning("`x` is deprecated")   ->  gbfix_log(logger, "warning", "`x` is deprecated")
      self.logger.info("step %d", step)      ->  gbfix_log(self.logger, "info", "step %d", step)
      logger.warning_once(f"{cls} is slow")  ->  gbfix_log(logger, "warning_once", "{} is slow", cls, template=True)
      logging.getLogger(__name__).info("x")  ->  gbfix_log(__name__, "info", "x")

  The logger itself reaches the op: Dynamo cannot pass a Logger to an op (nor
  read its name), so the helper pins the object Dynamo tracks while it traces
  and hands the op its index. ``logging.getLogger(name)`` written inline
  (Dynamo first breaks inside ``getLogger``, GB6215) goes as its name, when
  that is a literal or ``__name__``.

  An f-string message goes as its ``str.format`` template and its fields'
  values, and the op formats it at run time into the same text (Dynamo formats
  an f-string with a tensor field lazily: it could not hand the op that text).

  The helper runs while Dynamo traces it: it hands strings, numbers, tensors
  and None to the op by kind (the op's arguments are typed; a number Dynamo
  made symbolic, a step or a size, travels as a Scalar and is known at run
  time; a tensor is computed by the graph and formatted by the logger at run
  time), and the op calls the method with the same arguments, rebuilt in
  order: the record's msg/args are the original's, and so is what a
  ``*_once`` method (an ``lru_cache`` on its arguments: once per process per
  distinct arguments) counts as a repeat. An argument that may be anything else
  (``x.shape``, a list) is declined (see ``not_a_plain_value``): the helper
  would call the logger itself, which breaks again in the helper's code.
  Uncompiled, the helper calls the logger itself.
- ``logger-to-leaf``: a ``torch._dynamo.decorators.leaf_function``, which takes
  any argument (tensors too) but does not lower in inductor on torch 2.13, so
  the engine only offers it when every compile uses the eager backend::

      _gbfix_log_logger = gbfix_log_leaf(lambda: logger)  # once per module and logger
      logger.warning("x %s", t)  ->  _gbfix_log_logger("warning", "x %s", t)

  A tensor that requires grad is detached at the leaf boundary (its text loses
  ``grad_fn``). A leaf function takes no Logger: the module builds its helper
  for the logger once, at import, from a lambda returning it (``leaf_helpers``),
  so the logger must be a module global.

Declined: keyword arguments (``exc_info=``, ``extra=``, ...), ``**`` arguments,
``logger.exception`` and calls whose result is used. A ``*values`` argument goes to
the helper as it is: what it holds is told apart while Dynamo traces (anything but
text, numbers, tensors and None is logged by the helper itself, where Dynamo breaks,
which the verifier sees). The record's
funcName/lineno name the helper.
"""

from __future__ import annotations

import ast
from typing import ClassVar

import libcst as cst

from gbfix import generated
from gbfix.recipes import leaf_helpers, op_helpers
from gbfix.recipes.analysis import (
    builtin_at,
    call_at,
    closure_owner,
    global_bindings,
    is_module_global,
    qualified_names,
    range_counter,
)
from gbfix.recipes.base import Decline, Recipe, SiteContext
from gbfix.recipes.print_call import format_fields, has_fstring, str_literal
from gbfix.recipes.tree import nodes
from gbfix.records import ValueSpec


class HelperRecipe(Recipe):
    """Base for rewrites that route one call through a helper.

    The edit replaces only the call; the helper goes with it as helpers of the
    edit: a piece registered in ``gbfix.generated`` (and the pieces it needs),
    which a module of a package imports from the package's generated module and
    any other file gets once, after its imports.
    """

    helper: ClassVar[str]  # the helper's name: a registered piece

    def match(self, ctx: SiteContext) -> cst.Call | None:
        """The call to reroute, or None."""
        raise NotImplementedError

    def reroute(self, call: cst.Call) -> cst.Call:
        """The call to the helper that replaces ``call``."""
        raise NotImplementedError

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        call = self.match(ctx)
        if call is None or not isinstance(ctx.file.parent(call), cst.Expr):
            return None  # the helper returns None: only a call whose result is unused
        return call if helper_fits(ctx, self.helper) else None

    def rewrite(self, node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.Call)
        for p in generated.closure([self.helper]):
            self.need_helper(p.name, p.code)
        return self.reroute(node)


def helper_fits(ctx: SiteContext, helper: str) -> bool:
    """Whether the site's module can call ``helper`` (a registered piece): False when
    the name is taken by something else; ``Decline`` when the helper would go into
    this file (no generated module: see ``generated.home``) and the file cannot take it."""
    if defines_helper(ctx, helper) is None:
        return False
    if generated.home(ctx.site.path, ctx.module) is None:
        # the helper goes into this file, with the imports it needs
        if not generated.imports_torch(ctx.module):
            near = generated.beside(ctx.site.path)
            if near is not None and generated.foreign(near.path):
                raise Decline(f"the module does not import torch at module level, and `{near.path.name}`, where its helpers would go, is a file gbfix did not write")
            raise Decline("the module does not import torch at module level, and the helper, which would be added to it, does")
        for module, _ in (imp for p in generated.closure([helper]) for imp in p.imports):
            if any(not _imports_itself(n, module) for n in global_bindings(ctx, module)):
                raise Decline(f"the module binds `{module}` to something else than the module the helper imports")
    return True


class LeafRecipe(HelperRecipe):
    """Base for the ``leaf_function`` fallbacks: the call goes to a leaf function that
    the module builds once, at import, with a factory of the generated module from a
    lambda returning its category or logger (``leaf_helpers``): a leaf function takes
    neither a class nor a Logger, and no name travels as a string."""

    kind: ClassVar[str]  # the helper's middle name: ``_gbfix_<kind>_<name>``

    def bound(self, ctx: SiteContext) -> str | None:
        """The name (of a builtin or a module global) of what the lambda returns."""
        raise NotImplementedError

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        call = super().anchor(ctx)
        if call is None:
            return None
        if not generated.imports_torch(ctx.module):
            # the module builds its helper when it is imported: that imports torch
            raise Decline("the module does not import torch at module level, and the line building the helper would")
        self._binding = leaf_helpers.binding(self.helper, self.kind, self.bound(ctx))
        name, code = self._binding
        if global_bindings(ctx, name) and not _builds(ctx, name, code):
            return None  # the name is taken by something else
        return call

    def rewrite(self, node: cst.CSTNode) -> cst.CSTNode:
        call = super().rewrite(node)
        self.need_helper(*self._binding)  # after the factory it calls
        return call


class LoggerRecipe(HelperRecipe):
    """A Logger method called with positional arguments only, on a logger the helper can be handed."""

    codes: ClassVar[tuple[str, ...]] = ("GB0291",)
    safety = "safe"
    rule = "GB0291"
    methods: ClassVar[frozenset[str]] = leaf_helpers.LOGGER_METHODS

    def match(self, ctx: SiteContext) -> cst.Call | None:
        call = call_at(ctx)
        if call is None or not isinstance(call.func, cst.Attribute) or call.func.attr.value not in self.methods:
            return None
        # `*values` goes through as it is (evaluated once, in order, as before): what it
        # holds the helper sees at trace time; `**kwargs` may hold exc_info=, extra=
        if not call.args or any(a.keyword is not None or a.star == "**" for a in call.args):
            return None
        self._owner = self.owner(ctx, call.func.value)
        return None if self._owner is None else call

    def owner(self, ctx: SiteContext, node: cst.BaseExpression) -> cst.BaseExpression | None:
        """What the helper gets for the logger: the logger itself, written as the call
        wrote it (a name or an attribute chain, evaluated once as before), or for
        ``logging.getLogger(name)`` written inline (Dynamo breaks inside getLogger,
        GB6215) the name it is given."""
        if _is_chain(node):
            return node
        return _logger_name(ctx, node)

    def head(self, call: cst.Call) -> list[cst.Arg]:
        """The logger and the method, as the helper's first arguments."""
        assert isinstance(call.func, cst.Attribute)
        return [cst.Arg(self._owner), cst.Arg(cst.SimpleString(str_literal(call.func.attr.value)))]


class LoggerToOp(LoggerRecipe):
    name = "logger-to-op"
    codes = ("GB0291", "GB6215")  # GB6215: Dynamo first breaks inside logging.getLogger(...) written inline
    requires = frozenset({"register_fake"})
    summary = "logger.<level>(...) -> a library op that logs at run time with the same arguments, kept in order by inductor"
    helper = op_helpers.LOG.name

    def observe(self, ctx: SiteContext) -> cst.FunctionDef | None:
        """The function holding the call, when a value logged is one of its parameters:
        its kinds in an uncompiled run tell a number or a tensor from anything else."""
        call = super().match(ctx)
        fn = ctx.enclosing(cst.FunctionDef)
        if call is None or fn is None:
            return None
        try:
            values = self._values(ctx, call)
        except Decline:
            return None  # declined whatever the run shows
        return next(filter(None, (observed_owner(ctx, v) for v in values)), None)

    # Values known to be tensors where the call runs (report-if: an operand of the
    # `if` test the call is under, which Dynamo broke on).
    tensors: tuple[cst.BaseExpression, ...] = ()

    def match(self, ctx: SiteContext) -> cst.Call | None:
        call = super().match(ctx)
        if call is None:
            return None
        starred = {id(a.value) for a in call.args if a.star}
        for value in self._values(ctx, call):
            # the items of `*values` are told apart at trace time: the helper logs
            # anything that is no text, number, tensor or None itself (Dynamo breaks there)
            known = id(value) in starred or any(value.deep_equals(t) for t in self.tensors)
            why = None if known else not_a_plain_value(ctx, value)
            if why:
                raise Decline(f"{ctx.code(value)} {why}")
        return call

    def _values(self, ctx: SiteContext, call: cst.Call) -> list[cst.BaseExpression]:
        """What the helper gets after the method: the call's arguments, or for an
        f-string message its template (``self._template``) and its fields' values.
        Dynamo cannot hand an f-string with a tensor field to the op as text (it
        formats it lazily): the op formats the template at run time instead."""
        self._template = None
        if not any(has_fstring(a.value) for a in call.args):
            return [a.value for a in call.args]
        if len(call.args) > 1:
            raise Decline("an f-string message with arguments")
        found = format_fields(ctx, call, call.args[0].value)
        if found is None:
            raise Decline("an f-string field the op cannot format")
        self._template = found
        return found[1]

    def reroute(self, call: cst.Call) -> cst.Call:
        if self._template is None:
            return call.with_changes(func=cst.Name(self.helper), args=arglist(call, [*self.head(call), *call.args]))
        fmt, values = self._template
        flag = cst.Arg(cst.Name("True"))
        args = arglist(call, [*self.head(call), cst.Arg(cst.SimpleString(str_literal(fmt))), *map(cst.Arg, values), flag])
        keyword = dict(keyword=cst.Name("template"), equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))
        return call.with_changes(func=cst.Name(self.helper), args=[*args[:-1], args[-1].with_changes(**keyword)])


class LoggerToLeaf(LeafRecipe, LoggerRecipe):
    name = "logger-to-leaf"
    requires = frozenset({"leaf_function"})
    summary = "logger.<level>(...) -> a module-level leaf_function helper that logs at run time, inside the graph"
    helper = leaf_helpers.LOG_LEAF.name
    kind = "log"

    def owner(self, ctx: SiteContext, node: cst.BaseExpression) -> cst.BaseExpression | None:
        """The logger: a module global (the module's helper is built from it)."""
        return node if isinstance(node, cst.Name) and is_module_global(ctx, node) else None

    def bound(self, ctx: SiteContext) -> str:
        assert isinstance(self._owner, cst.Name)
        return self._owner.value

    def reroute(self, call: cst.Call) -> cst.Call:
        assert isinstance(call.func, cst.Attribute)
        method = cst.Arg(cst.SimpleString(str_literal(call.func.attr.value)))
        return call.with_changes(func=cst.Name(self._binding[0]), args=[method, *call.args])


_NOT_LITERAL = object()


def literal(ctx: SiteContext, node: cst.BaseExpression) -> object:
    """The value of a literal (string, number, None, ...), or a sentinel for anything else."""
    try:
        return ast.literal_eval(f"({ctx.code(node)})")  # parenthesised: strings concatenated over lines
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return _NOT_LITERAL


def arglist(call: cst.Call, args: list[cst.Arg]) -> list[cst.Arg]:
    """``args`` as positional arguments laid out like ``call``'s (same separators, same trailing comma)."""
    last = call.args[-1]
    if len(call.args) > 1:
        sep = call.args[0].comma
    elif isinstance(call.whitespace_before_args, cst.ParenthesizedWhitespace):
        sep = cst.Comma(whitespace_after=call.whitespace_before_args)  # one argument per line, as it was
    else:
        sep = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    out = []
    for i, arg in enumerate(args):
        # the last argument ends the list as the call's did (trailing comma, line break before the paren)
        after = last.whitespace_after_arg if i == len(args) - 1 else cst.SimpleWhitespace("")
        if i == len(args) - 1:
            comma = last.comma
        elif arg is not last and any(arg is a for a in call.args):
            comma = arg.comma  # its own separator, comments included
        else:
            comma = sep
        out.append(arg.with_changes(keyword=None, equal=cst.MaybeSentinel.DEFAULT, comma=comma, whitespace_after_arg=after))
    return out


# Calls whose result may be a list, a tuple or a torch.Size: neither a plain value nor a tensor.
_CONTAINER_CALLS = frozenset({"list", "tuple", "dict", "set", "sorted", "zip", "map", "range", "enumerate"})
_CONTAINER_METHODS = frozenset({"tolist", "items", "keys", "values", "split", "chunk", "unbind", "named_parameters"})
_OP_KINDS = frozenset({"int", "float", "bool", "str", "none", "tensor"})


def not_a_plain_value(ctx: SiteContext, node: cst.BaseExpression, seen: frozenset[str] = frozenset()) -> str | None:
    """Why ``node`` may be something else than a str, a number, a tensor or None
    while Dynamo traces (a list, a tuple, a ``torch.Size``), or None.

    The helper sends anything else to the logger itself, which breaks in the
    helper's code, where the verifier does not look for the edit's breaks: so such
    an argument is declined here. Attribute chains (``self.idx``), calls (``t.mean()``),
    subscripts, module globals and loop counters over ``range`` are taken; a parameter
    by its kinds in an uncompiled run; a local by what its assignments assign.
    """
    if isinstance(node, (cst.Tuple, cst.List, cst.Set, cst.Dict, cst.ListComp, cst.SetComp, cst.DictComp)):
        return "is a container"
    if isinstance(node, (cst.GeneratorExp, cst.Lambda)):
        return "is not a value the op can take"
    if isinstance(node, cst.Attribute):
        return "is a torch.Size" if node.attr.value == "shape" else None
    if isinstance(node, cst.Call):
        func = node.func
        if isinstance(func, cst.Name) and func.value in _CONTAINER_CALLS:
            return "may be a container"
        if isinstance(func, cst.Attribute) and (
            func.attr.value in _CONTAINER_METHODS or (func.attr.value == "size" and not node.args)
        ):
            return "may be a container or a torch.Size"
        return None
    if isinstance(node, cst.Name) and node.value not in ("True", "False", "None"):
        if range_counter(ctx, node):
            return None  # an int
        fn = ctx.enclosing(cst.FunctionDef, node=node)
        owner = observed_owner(ctx, node)
        if owner is not None:
            return _observed_as(ctx, owner, node.value, _OP_KINDS)
        if fn is not None and not is_module_global(ctx, node):
            return "is assigned from itself" if node.value in seen else _local_values(ctx, fn, node.value, seen)
    return None


# Calls that give text or a number (a size), whatever they are called on.
_TEXT_OR_NUMBER_CALLS = frozenset({"len", "int", "float", "str", "repr", "round", "bool", "type"})
_TEXT_OR_NUMBER_METHODS = frozenset({"size", "dim", "numel", "format", "join", "lower", "upper", "strip", "replace"})
_PLAIN_KINDS = _OP_KINDS - {"tensor"}


def not_text_or_number(ctx: SiteContext, node: cst.BaseExpression) -> str | None:
    """Why ``node`` may be a tensor while Dynamo traces, or None: it is a literal,
    a string built at the call, a size, an attribute chain (``self.name``, a
    config value), a module global, the counter of a loop over ``range``, or a
    parameter an uncompiled run showed as text or a number (``fn`` observed, see
    ``LoggerToOp.observe``)."""
    if isinstance(node, cst.Name) and node.value in ("True", "False", "None"):
        return None
    if isinstance(node, (cst.SimpleString, cst.Integer, cst.Float, cst.FormattedString, cst.ConcatenatedString)):
        return None
    if isinstance(node, cst.BinaryOperation) and isinstance(node.left, (cst.SimpleString, cst.FormattedString)):
        return None  # "..." % x, "..." + s: text, or an error at the call
    if isinstance(node, cst.Subscript) and isinstance(node.value, cst.Attribute) and node.value.attr.value == "shape":
        return None
    if isinstance(node, cst.Attribute):
        return None if node.attr.value not in ("shape", "data", "grad", "weight", "bias") and _is_chain(node) else "may be a tensor"
    if isinstance(node, cst.Call):
        func = node.func
        if isinstance(func, cst.Name) and func.value in _TEXT_OR_NUMBER_CALLS:
            return None
        if isinstance(func, cst.Attribute) and func.attr.value in _TEXT_OR_NUMBER_METHODS:
            return None
        return "may return a tensor"
    if isinstance(node, cst.Name):
        owner = observed_owner(ctx, node)
        if owner is not None:
            return _observed_as(ctx, owner, node.value, _PLAIN_KINDS)
        if is_module_global(ctx, node) or range_counter(ctx, node):
            return None
        return "is a local that may hold a tensor"
    return "may be a tensor"


def _observed_as(ctx: SiteContext, fn: cst.FunctionDef, name: str, kinds: frozenset[str]) -> str | None:
    """Why parameter ``name`` of ``fn`` may be something else than ``kinds``, by the
    calls of ``fn`` an uncompiled run showed (None: it was of those kinds in every one)."""
    calls = ctx.observed.get((ctx.site.path, ctx.file.span(fn.decorators[0] if fn.decorators else fn)[0][0]), ())
    seen = {dict(c.args).get(name, ValueSpec("other")).kind for c in calls}
    return None if calls and seen <= kinds else f"was {sorted(seen) or 'not seen'} in an uncompiled run"


def _local_values(ctx: SiteContext, fn: cst.FunctionDef, name: str, seen: frozenset[str]) -> str | None:
    """Why local ``name`` of ``fn`` may hold a container, or None: every binding is
    a plain assignment of a value that is not one."""
    bound = [
        n
        for n in nodes(fn, (cst.Assign, cst.AnnAssign, cst.AugAssign, cst.For, cst.WithItem, cst.NamedExpr, cst.CompFor))
        if name in _bound_names(n)
    ]
    if not bound:
        return "is not bound in the function"
    for n in bound:
        if not isinstance(n, (cst.Assign, cst.AnnAssign, cst.NamedExpr)) or n.value is None:
            return f"is bound by {type(n).__name__}"
        if any(isinstance(t.target, (cst.Tuple, cst.List)) for t in getattr(n, "targets", ())):
            return "is unpacked"
        why = not_a_plain_value(ctx, n.value, seen | {name})
        if why:
            return f"is assigned {ctx.code(n.value)}, which {why}"
    return None


def _bound_names(node: cst.CSTNode) -> set[str]:
    if isinstance(node, cst.Assign):
        targets: list[cst.BaseExpression] = [t.target for t in node.targets]
    elif isinstance(node, (cst.AnnAssign, cst.AugAssign, cst.For, cst.NamedExpr, cst.CompFor)):
        targets = [node.target]
    else:  # WithItem
        targets = [node.asname.name] if node.asname is not None else []
    return {n.value for t in targets for n in nodes(t, cst.Name)}


def _is_chain(node: cst.BaseExpression) -> bool:
    """``a.b.c``: names and attributes only."""
    while isinstance(node, cst.Attribute):
        node = node.value
    return isinstance(node, cst.Name)


def parameter(fn: cst.FunctionDef, node: cst.BaseExpression) -> bool:
    params = fn.params
    names = {p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)}
    return isinstance(node, cst.Name) and node.value in names


def observed_owner(ctx: SiteContext, node: cst.BaseExpression) -> cst.FunctionDef | None:
    """The function whose calls an uncompiled run must show to tell what ``node``
    holds: the function around it when ``node`` is its parameter, or the outer
    function whose parameter it reads as a closure (``closure_owner``)."""
    fn = ctx.enclosing(cst.FunctionDef, node=node)
    if fn is None or not isinstance(node, cst.Name):
        return None
    return fn if parameter(fn, node) else closure_owner(ctx, node)


def _logger_name(ctx: SiteContext, node: cst.BaseExpression) -> cst.BaseExpression | None:
    """The name argument of a ``logging.getLogger(...)`` call (``None`` for the root
    logger), when it is a string literal or the module's ``__name__``: a value
    that names the same logger wherever the helper is called."""
    if not isinstance(node, cst.Call) or qualified_names(ctx, node.func) != {"logging.getLogger"}:
        return None
    if not node.args:
        return cst.Name("None")
    if len(node.args) > 1 or node.args[0].keyword is not None or node.args[0].star:
        return None
    name = node.args[0].value
    if isinstance(literal(ctx, name), str) and not isinstance(name, cst.FormattedString):
        return name
    if isinstance(name, cst.Name) and name.value == "__name__" and builtin_at(ctx, name, "__name__"):
        return name
    return None


def _builds(ctx: SiteContext, name: str, code: str) -> bool:
    """The module binds ``name`` only by the line ``code`` (a leaf helper gbfix built)."""
    lines = [s for s in ctx.module.body if isinstance(s, cst.SimpleStatementLine) and isinstance(s.body[0], cst.Assign)]
    ours = [s.body[0].targets[0].target for s in lines if cst.Module(body=[s]).code.strip() == code.strip()]
    return bool(ours) and all(any(n is t for t in ours) for n in global_bindings(ctx, name))


def _imports_itself(node: cst.CSTNode, module: str) -> bool:
    """``node`` is ``import module`` (so the name is bound to that module)."""
    return isinstance(node, cst.Import) and any(
        a.asname is None and cst.Module(body=[]).code_for_node(a.name) == module for a in node.names
    )


def defines_helper(ctx: SiteContext, name: str) -> bool | None:
    """True if the module has the helper (defines it, or imports it from the generated
    module), False if the name is free, None if it is taken by something else."""
    bound = global_bindings(ctx, name)
    if not bound:
        return False
    ours = [s for s in ctx.module.body if isinstance(s, cst.FunctionDef) and s.name.value == name]
    return True if all(any(n is s for s in ours) or generated.is_import(n) for n in bound) else None


RECIPES = (LoggerToOp, LoggerToLeaf)
