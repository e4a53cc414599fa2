"""GB0291: a ``logging.Logger`` method called inside compiled code.

Dynamo cannot trace Logger methods and cannot reorder them
(``reorderable_logging_functions`` only takes plain functions;
``ignore_logging_functions`` drops the record). The rewrite sends the call
through a module-level helper that the compiled graph keeps and runs at run
time. Two helpers, the first preferred:

- ``logger-to-op``: an op defined in a ``torch.library.Library`` that writes to
  a 0-element tensor of the module. That write keeps it in the graph (an op
  with no output is dead code to inductor: the record would vanish) and in
  order with the module's other ops, and inductor runs it on every call, also
  with ``fullgraph=True`` and in training. Unlike an effectful op, it leaves the
  graph cacheable in inductor's FX graph cache, and a call costs a plain op
  call. The call keeps its arguments, any expression::

      logger.warning("`x` is deprecated")   ->  _gbfix_log("logger", "warning", "`x` is deprecated")
      logger.info("step %d", step)           ->  _gbfix_log("logger", "info", "step %d", step)
      logger.warning_once(f"{cls} is slow")  ->  _gbfix_log("logger", "warning_once", "{} is slow", cls, template=True)

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
  (``x.shape``, a list) is declined (see ``_not_a_plain_value``): the helper
  would call the logger itself, which breaks again in the helper's code.
  A logger that is not a module global is found by its name when that name is
  known: ``logging.getLogger(__name__).info(...)`` written inline (Dynamo
  first breaks inside ``getLogger``, GB6215) and ``self.logger.info(...)``
  where every assignment of the class to ``self.logger`` is the same
  ``logging.getLogger("literal" or __name__)`` become
  ``_gbfix_log_named(__name__, "info", ...)``.
- ``logger-to-leaf``: a ``torch._dynamo.decorators.leaf_function``, which takes
  any argument (tensors too) but does not lower in inductor on torch 2.13, so
  the engine only offers it when every compile uses the eager backend::

      logger.warning("x %s", t)  ->  _gbfix_log_leaf("logger", "warning", "x %s", t)

  A tensor that requires grad is detached at the leaf boundary (its text loses
  ``grad_fn``).

Dynamo can pass a Logger into neither helper: ``_gbfix_log``'s and
``_gbfix_log_leaf``'s calls name the logger's module global
(``getattr(globals()["logger"], "warning")(...)`` at run time). Declined:
keyword arguments (``exc_info=``, ``extra=``, ...), star arguments,
``logger.exception`` and calls whose result is used. The record's
funcName/lineno name the helper.
"""

from __future__ import annotations

import ast
from typing import ClassVar

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from gbfix.recipes.analysis import (
    builtin_at,
    call_at,
    global_bindings,
    is_module_global,
    qualified_names,
)
from gbfix.recipes.base import Decline, Recipe, SiteContext
from gbfix.recipes.print_call import format_fields, has_fstring, str_literal
from gbfix.recipes.tree import nodes
from gbfix.records import ValueSpec

# Logger methods that emit a record and return None. `warning_once` / `info_once`
# are the lru_cached methods transformers adds to Logger; `exception` is left
# out: it logs the exception being handled, which differs inside the helper.
_METHODS = frozenset(
    {"debug", "info", "warning", "warn", "error", "critical", "fatal", "log", "warning_once", "info_once"}
)
# warn_call's op helper: its calls end with their own line number, which a
# helper added above them changes, so adding any helper renumbers them.
NUMBERED_HELPER = "_gbfix_warn"
# What the op helpers of one module share, placed before the first of them. Each op
# writes to the 0-element sink: that write keeps it in the graph (an op with no
# output is dead code to inductor), keeps the module's ops in order, and gives
# inductor the op's device. Unlike an effectful op (with_effects), a graph holding
# it stays in inductor's FX graph cache, and its run-time cost is a plain op call.
# Each op's body is registered through torch.compiler.disable: called from code that
# Dynamo skipped (a frame with a break in a loop runs eagerly), the body would
# otherwise be compiled as a frame of its own and break on the logger it reaches.
OP_LIBRARY = ("_gbfix_lib", '''\
# Added by gbfix: this module's run-time ops, named after the module, and the
# 0-element tensor each of them writes to, which keeps them in compiled graphs
# and in order.
_gbfix_lib = torch.library.Library("gbfix", "FRAGMENT")
_gbfix_tag = "".join(c if c.isalnum() else "_" for c in __name__)
_gbfix_sink = torch.empty(0)
''')

# What logger-to-op's helpers share. The arguments reach the op by kind, as its
# schema types them: strings as text, numbers (sizes and steps that Dynamo made
# symbolic too) as Scalars, tensors as tensors (computed by the graph before the
# op runs), None as a mark; the op rebuilds them in order, so the logger's method
# gets the very arguments of the original call: the record's msg/args and a
# `*_once` method's cache (keyed on the arguments) are the same.
LOG_OP = ("_gbfix_log_send", '''\
def _gbfix_logger(owner, name):
    # Added by gbfix: the logger, by the name of its module global or by its own
    # name (stdlib logging, looked up without an import that could rebind this
    # module's own `logging`).
    return globals()[owner] if owner is not None else __import__("logging").getLogger(name)


def _gbfix_log_impl(owner, name, method, kinds, texts, numbers, tensors, sink):
    # Added by gbfix: the body of the op below, run at run time inside compiled
    # graphs: the arguments back in order (s: text, n: number, t: tensor, -: None).
    # A leading "f": the first text is an f-string's template, and the message is
    # that template formatted with the arguments, here, with their run-time values.
    texts, numbers, tensors = iter(texts), iter(numbers), iter(tensors)
    pick = {"s": texts, "n": numbers, "t": tensors}
    template = next(texts) if kinds.startswith("f") else None
    args = [next(pick[k]) if k in pick else None for k in kinds.removeprefix("f")]
    if template is not None:
        args = [template.format(*args)]
    getattr(_gbfix_logger(owner, name), method)(*args)


_gbfix_lib.define(
    f"log_{_gbfix_tag}(str? owner, str? name, str method, str kinds, str[] texts, Scalar[] numbers, "
    "Tensor[] tensors, Tensor(a!) sink) -> ()"
)
_gbfix_lib.impl(f"log_{_gbfix_tag}", torch.compiler.disable(_gbfix_log_impl), "CompositeExplicitAutograd")
torch.library.register_fake(f"gbfix::log_{_gbfix_tag}", lambda *args: None, lib=_gbfix_lib)
_gbfix_log_op = getattr(torch.ops.gbfix, f"log_{_gbfix_tag}")


def _gbfix_log_send(owner, name, method, args, template):
    # Added by gbfix: runs while Dynamo traces. Strings, numbers (exact types: a
    # subclass would print differently), tensors and None go to the op (a tensor
    # subclass, an nn.Parameter, reaches the logger as a plain tensor, and prints
    # so); anything else is logged by the logger itself, which Dynamo cannot trace.
    # With a template (an f-string's), args[0] is the template, formatted by the op.
    kinds = {str: "s", int: "n", float: "n", bool: "n", type(None): "-"}
    values = args[1:] if template else args
    of = "".join(["t" if isinstance(a, torch.Tensor) else kinds.get(type(a), "?") for a in values])
    if "?" not in of:
        texts = [a for a, k in zip(values, of) if k == "s"]
        numbers = [a for a, k in zip(values, of) if k == "n"]
        tensors = [a for a, k in zip(values, of) if k == "t"]
        if template:
            of, texts = "f" + of, [args[0], *texts]
        _gbfix_log_op(owner, name, method, of, texts, numbers, tensors, _gbfix_sink)
    else:
        getattr(_gbfix_logger(owner, name), method)(*([args[0].format(*values)] if template else args))
''')


class HelperRecipe(Recipe):
    """Base for rewrites that route one call through a module-level helper.

    The edit replaces only the call; the helper (its definition and
    registrations) goes with it as a helper of the edit, which the file gets
    once, after its imports, however many edits in it need it.
    """

    helper: ClassVar[str]  # the helper's name
    helper_code: ClassVar[str]  # its definition and registrations
    helper_imports: ClassVar[tuple[str, ...]] = ("torch",)
    # Module-level pieces the helper uses, (name, code), placed before it.
    shared: ClassVar[tuple[tuple[str, str], ...]] = ()

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
        if _defines(ctx, self.helper) is None:
            return None  # the name is taken by something else
        return call

    def rewrite(self, node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.Call)
        for module in self.helper_imports:
            self.need_import(module)
        assert self.ctx is not None
        if not _defines(self.ctx, self.helper):
            for name, code in self.shared:
                self.need_helper(name, code)
        self.need_helper(self.helper, self.helper_code)
        return self.reroute(node)


class LoggerRecipe(HelperRecipe):
    """A Logger method called on a module-global logger, positional arguments only."""

    codes = ("GB0291",)
    safety = "safe"
    rule = "GB0291"
    methods: ClassVar[frozenset[str]] = _METHODS

    def match(self, ctx: SiteContext) -> cst.Call | None:
        call = call_at(ctx)
        if call is None or not isinstance(call.func, cst.Attribute) or call.func.attr.value not in self.methods:
            return None
        if not call.args or any(a.keyword is not None or a.star for a in call.args):
            return None
        self._owner = self.owner(ctx, call.func.value)
        return None if self._owner is None else call

    def owner(self, ctx: SiteContext, node: cst.BaseExpression) -> cst.BaseExpression | None:
        """How the helper finds the logger: the name of its module global, as a string."""
        if isinstance(node, cst.Name) and is_module_global(ctx, node):
            return cst.SimpleString(str_literal(node.value))
        return None

    def head(self, call: cst.Call) -> list[cst.Arg]:
        """The logger's owner and the method, as the helper's first arguments."""
        assert isinstance(call.func, cst.Attribute)
        return [cst.Arg(self._owner), cst.Arg(cst.SimpleString(str_literal(call.func.attr.value)))]


class LoggerToOp(LoggerRecipe):
    name = "logger-to-op"
    codes = ("GB0291", "GB6215")  # GB6215: Dynamo first breaks inside logging.getLogger(...) written inline
    requires = frozenset({"register_fake"})
    shared = (OP_LIBRARY, LOG_OP)
    summary = "logger.<level>(...) -> a library op that logs at run time with the same arguments, kept in order by inductor"
    helper = "_gbfix_log"
    helper_code = '''\
def _gbfix_log(owner, method, *args, template=False):
    # Added by gbfix: the logger travels by the name of its module global.
    _gbfix_log_send(owner, None, method, args, template)
'''
    named_helper = ("_gbfix_log_named", '''\
def _gbfix_log_named(name, method, *args, template=False):
    # Added by gbfix: the logger travels by its own name (logging.getLogger(name)).
    _gbfix_log_send(None, name, method, args, template)
''')

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
        return fn if any(parameter(fn, v) for v in values) else None

    def match(self, ctx: SiteContext) -> cst.Call | None:
        self.helper, self.helper_code = type(self).helper, type(self).helper_code
        call = super().match(ctx)
        if call is None:
            return None
        for value in self._values(ctx, call):
            why = _not_a_plain_value(ctx, value)
            if why:
                raise Decline(f"{ctx.code(value)} {why}")
        if self._named:
            self.helper, self.helper_code = self.named_helper
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

    def owner(self, ctx: SiteContext, node: cst.BaseExpression) -> cst.BaseExpression | None:
        """A module global's name, or the name expression of a logger that
        ``logging.getLogger`` returns: written inline, or stored on ``self`` by
        every assignment the class makes to that attribute."""
        self._named = False
        found = super().owner(ctx, node)
        if found is not None:
            return found
        self._named = True
        if isinstance(node, cst.Attribute):
            node = _attribute_logger(ctx, node)
        return None if node is None else _logger_name(ctx, node)

    def reroute(self, call: cst.Call) -> cst.Call:
        if self._template is None:
            return call.with_changes(func=cst.Name(self.helper), args=arglist(call, [*self.head(call), *call.args]))
        fmt, values = self._template
        flag = cst.Arg(cst.Name("True"))
        args = arglist(call, [*self.head(call), cst.Arg(cst.SimpleString(str_literal(fmt))), *map(cst.Arg, values), flag])
        keyword = dict(keyword=cst.Name("template"), equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))
        return call.with_changes(func=cst.Name(self.helper), args=[*args[:-1], args[-1].with_changes(**keyword)])


class LoggerToLeaf(LoggerRecipe):
    name = "logger-to-leaf"
    requires = frozenset({"leaf_function"})
    summary = "logger.<level>(...) -> a module-level leaf_function helper that logs at run time, inside the graph"
    helper = "_gbfix_log_leaf"
    helper_code = '''\
@torch._dynamo.decorators.leaf_function
def _gbfix_log_leaf(owner, method, *args):
    # Added by gbfix: runs eagerly inside the compiled graph, so the record is
    # emitted at run time. The logger travels by the name of its global.
    getattr(globals()[owner], method)(*args)


@_gbfix_log_leaf.register_fake
def _gbfix_log_leaf_fake(owner, method, *args):
    return None
'''

    def reroute(self, call: cst.Call) -> cst.Call:
        return call.with_changes(func=cst.Name(self.helper), args=[*self.head(call), *call.args])


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


def _not_a_plain_value(ctx: SiteContext, node: cst.BaseExpression, seen: frozenset[str] = frozenset()) -> str | None:
    """Why ``node`` may be something else than a str, a number, a tensor or None
    while Dynamo traces (a list, a tuple, a ``torch.Size``), or None.

    The helper sends anything else to the logger itself, which breaks in the
    helper's code, where the verifier does not look for the edit's breaks: so such
    an argument is declined here. Attribute chains (``self.idx``), calls (``t.mean()``),
    subscripts and module globals are taken; a parameter by its kinds in an
    uncompiled run; a local by what its assignments assign.
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
        fn = ctx.enclosing(cst.FunctionDef, node=node)
        if fn is not None and parameter(fn, node):
            return _observed_as(ctx, fn, node.value, _OP_KINDS)
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
    config value), a module global, or a parameter an uncompiled run showed as
    text or a number (``fn`` observed, see ``LoggerToOp.observe``)."""
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
        fn = ctx.enclosing(cst.FunctionDef, node=node)
        if fn is not None and parameter(fn, node):
            return _observed_as(ctx, fn, node.value, _PLAIN_KINDS)
        return None if is_module_global(ctx, node) else "is a local that may hold a tensor"
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
        if not isinstance(n, (cst.Assign, cst.AnnAssign)) or n.value is None:
            return f"is bound by {type(n).__name__}"
        if any(isinstance(t.target, (cst.Tuple, cst.List)) for t in getattr(n, "targets", ())):
            return "is unpacked"
        why = _not_a_plain_value(ctx, n.value, seen | {name})
        if why:
            return f"is assigned {ctx.code(n.value)}, which {why}"
    return None


def _bound_names(node: cst.CSTNode) -> set[str]:
    if isinstance(node, cst.Assign):
        targets = [t.target for t in node.targets]
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


def _attribute_logger(ctx: SiteContext, node: cst.Attribute) -> cst.BaseExpression | None:
    """The one value that the class of the method holding ``self.<attr>`` gives that
    attribute (every ``self.<attr> = ...`` in its methods and a class-level
    ``<attr> = ...`` writing the same code), or None."""
    func = ctx.enclosing(cst.FunctionDef, node=node)
    cls = None if func is None else ctx.enclosing(cst.ClassDef, node=func)
    if cls is None or not func.params.params or not isinstance(node.value, cst.Name):
        return None
    if node.value.value != func.params.params[0].name.value:
        return None
    values = _AttributeValues(node.attr.value)
    cls.visit(values)
    codes = {ctx.code(v) for v in values.found}
    return values.found[0] if values.found and len(codes) == 1 and not values.other else None


class _AttributeValues(cst.CSTVisitor):
    """What a class assigns to one attribute: at class level or on its methods' first parameter."""

    def __init__(self, attr: str) -> None:
        self.attr = attr
        self.found: list[cst.BaseExpression] = []
        self.other = False  # also bound some other way (augmented, unpacked, deleted, in a nested class)
        self.selves: list[str] = []  # the first parameter of each method entered
        self.depth = 0  # classes entered

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.depth += 1

    def leave_ClassDef(self, node: cst.ClassDef) -> None:
        self.depth -= 1

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        params = node.params.params
        self.selves.append(params[0].name.value if params else "")

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.selves.pop()

    def _is_target(self, target: cst.BaseExpression) -> bool:
        if isinstance(target, (cst.Tuple, cst.List)):
            self.other |= any(self._is_target(e.value) for e in target.elements)
            return False
        if not self.selves:
            hit = isinstance(target, cst.Name) and target.value == self.attr
        else:
            hit = (
                isinstance(target, cst.Attribute)
                and target.attr.value == self.attr
                and isinstance(target.value, cst.Name)
                and target.value.value == self.selves[0]
            )
        self.other |= hit and self.depth > 1
        return hit

    def visit_Assign(self, node: cst.Assign) -> None:
        for t in node.targets:
            if self._is_target(t.target):
                self.found.append(node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if self._is_target(node.target):
            self.other |= node.value is None
            if node.value is not None:
                self.found.append(node.value)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self.other |= self._is_target(node.target)

    def visit_Del(self, node: cst.Del) -> None:
        self.other |= self._is_target(node.target)


def _defines(ctx: SiteContext, name: str) -> bool | None:
    """True if the module defines the helper, False if the name is free, None if taken."""
    bound = global_bindings(ctx, name)
    if not bound:
        return False
    ours = [s for s in ctx.module.body if isinstance(s, cst.FunctionDef) and s.name.value == name]
    return True if all(any(n is s for s in ours) for n in bound) else None


def renumber(module: cst.Module) -> cst.Module:
    """Each call to the numbered helper with its own line as last argument."""
    wrapper = MetadataWrapper(module)
    positions = wrapper.resolve(PositionProvider)

    class _Line(cst.CSTTransformer):
        def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
            if not (isinstance(original.func, cst.Name) and original.func.value == NUMBERED_HELPER and updated.args):
                return updated
            line = cst.Integer(str(positions[original].start.line))
            return updated.with_changes(args=[*updated.args[:-1], updated.args[-1].with_changes(value=line)])

    return wrapper.module.visit(_Line())


RECIPES = (LoggerToOp, LoggerToLeaf)
