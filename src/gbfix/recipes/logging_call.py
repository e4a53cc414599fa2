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
  call. Its arguments must be typed, so only string and number literals are
  taken, and the message is formatted here::

      logger.warning("`x` is deprecated")  ->  _gbfix_log("logger", "warning", "`x` is deprecated")
      logger.info("step %d", 3)            ->  _gbfix_log("logger", "info", "step 3")

  The record's ``getMessage()`` is the same; its ``msg``/``args`` hold the
  formatted text. A ``*_once`` method with arguments is declined (it caches on
  the arguments), as is ``log`` (its level is an expression).
- ``logger-to-leaf``: a ``torch._dynamo.decorators.leaf_function``, which takes
  any argument (tensors too) but does not lower in inductor on torch 2.13, so
  the engine only offers it when every compile uses the eager backend::

      logger.warning("x %s", t)  ->  _gbfix_log_leaf("logger", "warning", "x %s", t)

  A tensor that requires grad is detached at the leaf boundary (its text loses
  ``grad_fn``).

Both helpers call ``getattr(globals()["logger"], "warning")(...)``: the logger
travels by the name of its module global (Dynamo cannot pass a Logger into
either), so ``self.logger.info(...)`` is declined, as are keyword arguments
(``exc_info=``, ``extra=``, ...), star arguments, ``logger.exception`` and
calls whose result is used. The record's funcName/lineno name the helper.
"""

from __future__ import annotations

import ast
from typing import ClassVar

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from gbfix.recipes.base import Recipe, SiteContext
from gbfix.recipes.print_call import call_at, global_bindings, is_module_global, str_literal

# Logger methods that emit a record and return None. `warning_once` / `info_once`
# are the lru_cached methods transformers adds to Logger; `exception` is left
# out: it logs the exception being handled, which differs inside the helper.
_METHODS = frozenset(
    {"debug", "info", "warning", "warn", "error", "critical", "fatal", "log", "warning_once", "info_once"}
)
# What the custom op takes: `log` needs its level, an expression, as first argument.
_OP_METHODS = _METHODS - {"log"}
_LITERALS = (str, int, float, type(None))  # bool is an int
# warn_call's op helper: its calls end with their own line number, which a
# helper added above them changes, so adding any helper renumbers them.
NUMBERED_HELPER = "_gbfix_warn"
# What the op helpers of one module share, placed before the first of them. Each op
# writes to the 0-element sink: that write keeps it in the graph (an op with no
# output is dead code to inductor), keeps the module's ops in order, and gives
# inductor the op's device. Unlike an effectful op (with_effects), a graph holding
# it stays in inductor's FX graph cache, and its run-time cost is a plain op call.
OP_LIBRARY = ("_gbfix_lib", '''\
# Added by gbfix: this module's run-time ops, named after the module, and the
# 0-element tensor each of them writes to, which keeps them in compiled graphs
# and in order.
_gbfix_lib = torch.library.Library("gbfix", "FRAGMENT")
_gbfix_tag = "".join(c if c.isalnum() else "_" for c in __name__)
_gbfix_sink = torch.empty(0)
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
        if call is None or not isinstance(call.func, cst.Attribute):
            return None
        owner, method = call.func.value, call.func.attr.value
        if not isinstance(owner, cst.Name) or method not in self.methods or not is_module_global(ctx, owner):
            return None
        if not call.args or any(a.keyword is not None or a.star for a in call.args):
            return None
        return call

    def head(self, call: cst.Call) -> list[cst.Arg]:
        """The logger's global name and the method, as the helper's first arguments."""
        assert isinstance(call.func, cst.Attribute) and isinstance(call.func.value, cst.Name)
        owner, method = call.func.value.value, call.func.attr.value
        return [cst.Arg(cst.SimpleString(str_literal(owner))), cst.Arg(cst.SimpleString(str_literal(method)))]


class LoggerToOp(LoggerRecipe):
    name = "logger-to-op"
    requires = frozenset({"register_fake"})
    shared = (OP_LIBRARY,)
    methods = _OP_METHODS
    summary = "logger.<level>(literal, ...) -> a library op that logs at run time, kept in order by inductor"
    helper = "_gbfix_log"
    helper_code = '''\
def _gbfix_log_impl(owner, method, message, sink):
    # Added by gbfix: the body of the op below, run at run time inside compiled
    # graphs. The logger travels by the name of its global.
    getattr(globals()[owner], method)(message)


_gbfix_lib.define(f"log_{_gbfix_tag}(str owner, str method, str message, Tensor(a!) sink) -> ()")
_gbfix_lib.impl(f"log_{_gbfix_tag}", _gbfix_log_impl, "CompositeExplicitAutograd")
torch.library.register_fake(f"gbfix::log_{_gbfix_tag}", lambda *args: None, lib=_gbfix_lib)
_gbfix_log_op = getattr(torch.ops.gbfix, f"log_{_gbfix_tag}")


def _gbfix_log(owner, method, message):
    _gbfix_log_op(owner, method, message, _gbfix_sink)
'''

    def match(self, ctx: SiteContext) -> cst.Call | None:
        call = super().match(ctx)
        if call is None:
            return None
        values = [literal(ctx, a.value) for a in call.args]
        if not all(isinstance(v, _LITERALS) for v in values) or not isinstance(values[0], str):
            return None  # a value known only at run time (a tensor would print as a FakeTensor)
        message, *args = values
        if args:
            assert isinstance(call.func, cst.Attribute)
            if call.func.attr.value.endswith("_once"):
                return None  # lru_cached on its arguments: formatting here would change what counts as a repeat
            try:
                message = message % tuple(args)  # what LogRecord.getMessage() does
            except (TypeError, ValueError, OverflowError, MemoryError):
                return None  # the original reports a logging error
        self._message = None if not args else cst.SimpleString(str_literal(message))
        return call

    def reroute(self, call: cst.Call) -> cst.Call:
        first = call.args[0]
        message = first if self._message is None else first.with_changes(value=self._message)
        return call.with_changes(func=cst.Name(self.helper), args=arglist(call, [*self.head(call), message]))


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
    sep = call.args[0].comma if len(call.args) > 1 else cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    out = []
    for i, arg in enumerate(args):
        if i == len(args) - 1:
            comma = last.comma
        elif arg is not last and any(arg is a for a in call.args):
            comma = arg.comma  # its own separator, comments included
        else:
            comma = sep
        out.append(arg.with_changes(keyword=None, equal=cst.MaybeSentinel.DEFAULT, comma=comma))
    return out


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
