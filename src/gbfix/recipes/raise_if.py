"""GB0170 / GB0124: a check that raises, on a tensor's value. The test and the raise go
to an op that runs them at run time, so the exception is the original's::

    if torch.isnan(x).any(): raise ValueError("NaN")  ->  gbfix_raise_if(torch.isnan(x).any(), ValueError, "NaN")
    if m is not None and not torch.isfinite(m).all():  ->  if m is not None:
        raise FloatingPointError(f"bad {name}")                gbfix_raise_if(torch.logical_not(torch.isfinite(m).all()), FloatingPointError, lambda: f"bad {name}")
    assert not t.isnan().any(), f"{name} has NaNs"     ->  if __debug__:
                                                                gbfix_raise_if(t.isnan().any(), AssertionError, lambda: f"{name} has NaNs")
    assert ids.max().item() < n, "id out of range"     ->  if __debug__:
                                                                gbfix_raise_if(torch.logical_not(ids.max().double() < n), AssertionError, "id out of range")

Why this is safe where ``branch-to-check`` (``torch._assert_async``) and
``assert-item-to-tensor`` are not: ``gbfix_raise_if`` (``op_helpers.RAISE``) runs the
original statement uncompiled (``if cond: raise exc(*message)``, the message built
only when the test holds); while Dynamo traces it, it hands the test, the exception
class (pinned, as ``warn-to-op`` pins a category) and the message's text to an op of
the helpers' module whose body is that same statement, run at run time. So a failing
check raises the same class with the same arguments on every backend (eager,
aot_eager, inductor; ``fullgraph=True`` or not), with the traceback's last frames in
the helper. The op writes the sink the print/warn/log ops write, so their reports
before the check come out before it, and those after it do not when it raises (the
tests run both on inductor). The op is tagged ``cudagraph_unsafe``: a CUDA graph
(``mode="reduce-overhead"``) would replay the kernels around it without its test.
A check in a `try` or `with` block is declined in its own function; in a caller's,
the helper sees the block while Dynamo traces and breaks there, as the original did
(an exception from inside the graph would skip the handler or the exit). The test runs once, where it ran, and only the tensor
part of it: a Python part (`self.training`, `m is not None`) stays an `if` around
the call (``branch.site_branch``, the split every branch recipe uses); an `or` of two
tensor tests is evaluated whole (``torch.logical_or``), so both sides must be pure.
An assert keeps ``python -O``'s behaviour: the call sits under `if __debug__:`,
which the compiler drops under -O as it drops the assert.

What a compiled graph cannot keep of a failing check is the module state that other
ops of the same graph change: with aot_eager and inductor (AOTAutograd), in-place
updates of buffers and parameters are applied once the whole graph has run, so an
update before the check is not applied when the op raises (the original, which broke
the graph at the check, applied it), and inductor may run an update after the check
that does not depend on it (a counter's `add_(1)`, BatchNorm's
`num_batches_tracked`) in a kernel before the op. That state differs only after the
exception, in a program that catches it and goes on; the eager backend runs the
graph's ops in order and keeps it exactly (tests/recipes/test_raise_if.py runs each
case, and rules/GB0170.md says so).

A message that is text while Dynamo traces (``Message``: literals, f-strings and
%-formats of values that are, such as loop counters, attribute chains, module globals,
parameters an uncompiled run showed as text or numbers: warn-to-op's checks) goes to
the op as it is written. A message whose text is only known at run time (it formats a
tensor: `f"non-finite loss {loss}"`) goes to ``gbfix_raise_if_format`` as report-if's
messages go to theirs (``message``: a template, its values by kind, the casts applied at
run time), and the op makes it only where the test holds::

    if loss is not None and not torch.isfinite(loss):   ->  if loss is not None:
        raise FloatingPointError(f"non-finite loss {loss}")      gbfix_raise_if_format(torch.logical_not(torch.isfinite(loss)),
                                                                     FloatingPointError, "non-finite loss {}", loss)

Its values are evaluated whenever the check runs, so they must be plain (text, numbers,
tensors, None) and free of effects and errors where the test does not hold
(``message.risk``). Where the text would show a tensor's autograd state through str()
or repr() (a grad_fn, a Parameter), which the op's detached copy lacks, the helper keeps
the `if` while tracing (the break stays, as written); a `float()` of a tensor (`%.3f`,
`float(t)`) is declined: torch warns once when that tensor requires grad, from the
converting line. Declined also: `raise ... from ...`, a bare `raise`, an exception
instance built elsewhere (`raise err`), an exception class that is no builtin or
module-level name (`self.Error`), keyword arguments to the exception, a message of
several arguments that is not text while tracing.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import ClassVar, cast

import libcst as cst

from gbfix import generated
from gbfix.recipes import message, op_helpers
from gbfix.recipes.analysis import (
    builtin_at,
    global_bindings,
    is_builtin,
    is_module_global,
)
from gbfix.recipes.base import Decline, Recipe, Replacement, SiteContext
from gbfix.recipes.branch import (
    SplitTest,
    _replace_if,
    _split_test,
    fit,
    make_call,
    single,
    site_branch,
)
from gbfix.recipes.logging_call import helper_fits, not_a_plain_value, not_text_or_number, observed_owner
from gbfix.recipes.print_call import _to_text, has_fstring
from gbfix.recipes.scalar import as_double, item_assert
from gbfix.recipes.tree import keyword_arg, walk
from gbfix.recipes.warn_call import message_values

# ---------------------------------------------------------------- the message


class Message:
    """The exception's arguments as ``gbfix_raise_if`` takes them, and whether they are
    text while Dynamo traces (the one place that judges a message).

    A string literal goes as it is; anything else as a lambda, so that uncompiled it is
    built only when the test holds, as the original built it. Each must be text while
    Dynamo traces: a literal, an f-string, a `%`-format or a `str.format` of values that
    ``not_text_or_number`` (warn-to-op's check) passes, or such a value itself.
    """

    @staticmethod
    def values(ctx: SiteContext, args: Sequence[cst.Arg]) -> list[cst.BaseExpression]:
        """The values the message is built from (the f-string's fields, a `%`-format's
        operands, ...), for ``not_text_or_number``; ``Decline`` for an argument list the
        helper cannot take."""
        out: list[cst.BaseExpression] = []
        for arg in args:
            if arg.star or arg.keyword is not None:
                raise Decline("the exception is given keyword or starred arguments")
            out += Message._parts(ctx, arg.value)
        return out

    @staticmethod
    def _parts(ctx: SiteContext, node: cst.BaseExpression) -> list[cst.BaseExpression]:
        if isinstance(node, cst.SimpleString) or (isinstance(node, cst.ConcatenatedString) and not has_fstring(node)):
            if "b" in (node.prefix if isinstance(node, cst.SimpleString) else "").lower():
                raise Decline("the message is a bytes literal")
            return []
        if has_fstring(node):
            # format_fields asks, at this node, whether str/repr are the builtins
            return message_values(ctx, cast(cst.Call, node), node)
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.Modulo, cst.Add)):
            if not isinstance(node.left, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)):
                return [node]
            right = node.right
            if isinstance(node.operator, cst.Modulo) and isinstance(right, cst.Tuple):
                return [*Message._parts(ctx, node.left), *(v for el in right.elements for v in Message._parts(ctx, el.value))]
            return [*Message._parts(ctx, node.left), *Message._parts(ctx, right)]
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "format":
            if isinstance(node.func.value, (cst.SimpleString, cst.ConcatenatedString)):
                return [*Message._parts(ctx, node.func.value), *(v for a in node.args for v in Message._parts(ctx, a.value))]
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value in ("str", "repr") and len(node.args) == 1:
            arg = node.args[0].value  # text, but Dynamo cannot make the text of a tensor
            if is_builtin(ctx, node.func) and not _to_text(arg):
                return [arg]
        return [node]

    @staticmethod
    def check(ctx: SiteContext, args: Sequence[cst.Arg]) -> None:
        """``Decline`` unless every argument is text while Dynamo traces."""
        for value in Message.values(ctx, args):
            why = not_text_or_number(ctx, value) or _converts_tensor(ctx, value)
            if why:
                raise Decline(
                    f"the message's `{ctx.code(value)}` {why}: its text is only known at run time,"
                    " and the op takes text known while Dynamo traces"
                )

    @staticmethod
    def owner(ctx: SiteContext, args: Sequence[cst.Arg]) -> cst.FunctionDef | None:
        """The function whose calls an uncompiled run must show, when the message reads
        its parameters (a `check_finite(x, name)` helper)."""
        try:
            values = Message.values(ctx, args)
        except Decline:
            return None
        return next(filter(None, (observed_owner(ctx, v) for v in values)), None)

    @staticmethod
    def formatted(
        ctx: SiteContext, args: Sequence[cst.Arg], at: cst.CSTNode, cond: cst.BaseExpression, why: Decline
    ) -> list[cst.Arg]:
        """``gbfix_raise_if_format``'s message arguments (a template, its values, ``cast=`` and
        ``percent=``) for a message whose text is only known at run time (``why``): one
        argument, a template report-if takes (``message.template``), each value text, a
        number, a tensor or None, and free of effects and errors where the test does not
        hold (it is now evaluated there); ``Decline`` with both reasons otherwise."""
        def no(reason: str) -> Decline:
            return Decline(f"{why}; made at run time instead, {reason}")

        if len(args) != 1 or args[0].star or args[0].keyword is not None:
            raise no("the exception is given more than one argument")
        said = args[0].value
        text, values, percent = message.template(ctx, said, said)
        if text is None:
            raise no(f"`{ctx.code(said)}` is no f-string, literal, `+` of those and str(), or `%` / str.format of a literal")
        cast = message.uncast(ctx, values, percent)
        for value in message.flat(values, percent):
            reason = not_a_plain_value(ctx, value)
            if reason:
                raise no(f"`{ctx.code(value)}` {reason}: the op takes text, numbers, tensors and None")
        for value in message.float_converted(text, values, percent, cast):
            if not_text_or_number(ctx, value):
                raise no(
                    f"`{ctx.code(value)}` may be a tensor converted by float(), which warns once when it requires grad:"
                    " the op's copy would not, and uncompiled the helper's line would"
                )
        for value in values:
            reason = message.risk(ctx, value, at, cond)
            if reason:
                raise no(f"`{ctx.code(value)}` {reason}: it would be evaluated where the test does not hold")
        out = [cst.Arg(message.text_literal(text)), *(cst.Arg(v) for v in values)]
        keywords: dict[str, cst.BaseExpression] = {"cast": message.cast_argument(cast)} if cast else {}
        if percent:
            keywords["percent"] = cst.Name("True")
        return out + [keyword_arg(k, v) for k, v in keywords.items()]

    @staticmethod
    def arguments(args: Sequence[cst.Arg]) -> list[cst.Arg]:
        """The helper's message arguments: literals as they are, the rest as lambdas."""
        out = []
        for arg in args:
            value = arg.value
            literal = isinstance(value, cst.SimpleString) or (
                isinstance(value, cst.ConcatenatedString) and not has_fstring(value)
            )
            if not literal:
                value = cst.Lambda(params=cst.Parameters(), body=value)
            out.append(cst.Arg(value))
        return out


def _converts_tensor(ctx: SiteContext, value: cst.BaseExpression) -> str | None:
    """`int(t.max())`, `float(loss)`, `round(x, 2)`: a number, but read from what may be a
    tensor, which Dynamo breaks on when the helper builds the text while tracing."""
    if not (isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.args):
        return None
    if value.func.value not in _CONVERSIONS or not is_builtin(ctx, value.func):
        return None
    inner = value.args[0].value
    return None if not_text_or_number(ctx, inner) is None else f"converts `{ctx.code(inner)}`, which may be a tensor"


_CONVERSIONS = frozenset({"int", "float", "round", "bool", "str", "repr"})


# ---------------------------------------------------------------- the exception


def _exception(ctx: SiteContext, raise_: cst.Raise) -> tuple[cst.BaseExpression, Sequence[cst.Arg]]:
    """(the class, its arguments) of `raise E(args)` / `raise E`; ``Decline`` otherwise."""
    if raise_.exc is None:
        raise Decline("a bare `raise` re-raises the exception being handled")
    if raise_.cause is not None:
        raise Decline("`raise ... from ...`: the op does not chain the cause")
    exc = raise_.exc
    if isinstance(exc, cst.Call):
        if not _named(ctx, exc.func):
            raise Decline(f"`{ctx.code(exc.func)}` is no builtin or module-level name the op can be handed")
        return exc.func, exc.args
    if isinstance(exc, cst.Name) and _exception_class(ctx, exc):
        return exc, ()  # `raise E` of a class raises E()
    raise Decline(f"`raise {ctx.code(exc)}` may raise an exception instance built elsewhere")


def _named(ctx: SiteContext, func: cst.BaseExpression) -> bool:
    """A builtin or a module-level name (a class, an import), or an attribute of an
    imported module (`errors.ConfigError`): what the helper gets is the object the
    original called, read where it read it."""
    root = func
    while isinstance(root, cst.Attribute):
        root = root.value
    if not isinstance(root, cst.Name):
        return False
    if root is func:
        return is_builtin(ctx, root) or (
            is_module_global(ctx, root) and all(isinstance(n, (cst.ClassDef, cst.Import, cst.ImportFrom)) for n in global_bindings(ctx, root.value))
        )
    return is_module_global(ctx, root) and all(isinstance(n, cst.Import) for n in global_bindings(ctx, root.value))


def _exception_class(ctx: SiteContext, name: cst.Name) -> bool:
    """``name`` is an exception class: a builtin one, or a class of this module (an
    imported name may be an instance, which `raise` raises as it is)."""
    if is_builtin(ctx, name):
        value = getattr(builtins, name.value, None)
        return isinstance(value, type) and issubclass(value, BaseException)
    bound = global_bindings(ctx, name.value)
    return is_module_global(ctx, name) and bool(bound) and all(isinstance(n, cst.ClassDef) for n in bound)


# ---------------------------------------------------------------- the recipes


class RaiseRecipe(Recipe):
    """Base: the site's check becomes a call of ``gbfix_raise_if`` (``_plan``)."""

    codes: ClassVar[tuple[str, ...]] = ("GB0170",)
    rule: ClassVar[str] = "GB0170"
    safety = "safe"
    requires = frozenset({"register_fake"})
    helper: ClassVar[str] = op_helpers.RAISE.name

    def __init__(self) -> None:
        super().__init__()
        self._plan: Replacement | None = None
        self._helper = self.helper
        self._cond: cst.BaseExpression = cst.Name("True")  # the test as written (check sets it)

    def check(self, ctx: SiteContext) -> tuple[cst.CSTNode, Sequence[cst.Arg]] | None:
        """The node to rewrite and the exception's arguments (Decline / None as ``anchor``)."""
        raise NotImplementedError

    def plan(self, ctx: SiteContext, node: cst.CSTNode, message: list[cst.Arg]) -> Replacement:
        raise NotImplementedError

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        found = self.check(ctx)
        if found is None:
            return None
        node, args = found
        _not_guarded(ctx, node)
        try:
            Message.check(ctx, args)
            self._helper, message = self.helper, Message.arguments(args)
        except Decline as why:  # text only known at run time: the op makes it there
            self._helper, message = op_helpers.RAISE_FORMAT.name, Message.formatted(ctx, args, node, self._cond, why)
        if not helper_fits(ctx, self._helper):
            return None
        self._plan = self.plan(ctx, node, message)
        return node

    def observe(self, ctx: SiteContext) -> cst.FunctionDef | None:
        """The function holding the check, when the message reads its parameters."""
        try:
            found = self.check(ctx)
        except Decline:
            return None
        return None if found is None else Message.owner(ctx, found[1])

    def rewrite(self, node: cst.CSTNode) -> Replacement | None:
        for p in generated.closure([self._helper]):
            self.need_helper(p.name, p.code)
        if self._plan is not None and any(isinstance(n, cst.Attribute) and _torch_name(n) for n in _nodes(self._plan)):
            self.need_import("torch")
        return self._plan

    def call(self, cond: cst.BaseExpression, exc: cst.BaseExpression, message: list[cst.Arg]) -> cst.Expr:
        """`gbfix_raise_if(cond, exc, *message)` (or `gbfix_raise_if_format(cond, exc, fmt, *values, ...)`)."""
        bare = cond.with_changes(lpar=[], rpar=[]) if getattr(cond, "lpar", None) else cond
        return cst.Expr(cst.Call(func=cst.Name(self._helper), args=[cst.Arg(bare), cst.Arg(exc), *message]))


def _not_guarded(ctx: SiteContext, node: cst.CSTNode) -> None:
    """``Decline`` a check inside a `try` or `with` block of its function: an exception of
    the op leaves the compiled graph without the handler, `finally` or exit (a grad mode
    put back) that the original ran. (In a caller, the helper sees it while Dynamo traces
    and keeps the break there: see ``op_helpers.RAISE``.)"""
    for anc in ctx.ancestors(node):
        if isinstance(anc, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            return
        if isinstance(anc, (cst.Try, cst.TryStar, cst.With)):
            what = "with" if isinstance(anc, cst.With) else "try"
            raise Decline(
                f"the check is inside a `{what}` block: an exception the op raises in the graph would"
                " skip the handler or exit the original ran"
            )


def _nodes(plan: Replacement) -> list[cst.CSTNode]:
    if isinstance(plan, cst.FlattenSentinel):
        return [n for node in plan.nodes for n in walk(node)]
    return list(walk(plan)) if isinstance(plan, cst.CSTNode) else []


def _torch_name(node: cst.Attribute) -> bool:
    return isinstance(node.value, cst.Name) and node.value.value == "torch" and node.attr.value.startswith("logical_")


def _negated(test: SplitTest) -> cst.BaseExpression:
    """The tensor condition under which `assert <test.cond>` fails: `t` for `not t`."""
    cond = test.cond
    if isinstance(cond, cst.UnaryOperation) and isinstance(cond.operator, cst.Not):
        return cast(cst.Call, test.tensor).args[0].value  # tensor_cond wrote torch.logical_not(t)
    return make_call("torch.logical_not", test.tensor)


class RaiseIf(RaiseRecipe):
    """`if <tensor test>: raise E(msg)` (an `elif` too; an `else` goes after the call)."""

    name = "raise-if"
    summary = "`if <tensor>: raise E(msg)` -> gbfix_raise_if(<tensor>, E, msg): an op tests and raises the same exception at run time"

    def check(self, ctx: SiteContext) -> tuple[cst.CSTNode, Sequence[cst.Arg]] | None:
        found = site_branch(ctx)
        if found is None or not isinstance(found[0], cst.If):
            return None
        node, test = found
        raise_ = single(node.body)
        if not isinstance(raise_, cst.Raise):
            return None
        self._test, self._cond = test, test.cond
        self._exc, args = _exception(ctx, raise_)
        return node, args

    def plan(self, ctx: SiteContext, node: cst.CSTNode, message: list[cst.Arg]) -> Replacement:
        assert isinstance(node, cst.If)
        test = self._test
        out = _replace_if(ctx, node, test, self.call(test.tensor, self._exc, message))
        if node.orelse is None:
            return out
        # `if T: raise ... else: B` is `if T: raise ...` then B: the else part follows the call
        after = _after(node.orelse)
        if isinstance(out, cst.Else):  # the `if` was an `elif`
            block = cast(cst.IndentedBlock, out.body)
            return out.with_changes(body=block.with_changes(body=[*block.body, *after]))
        if isinstance(out, cst.If) and test.kind == "and":
            out = out.with_changes(orelse=None)  # `if P and c:` kept its test's Python part P
        lines = list(out.nodes) if isinstance(out, cst.FlattenSentinel) else [out]
        return cst.FlattenSentinel([*lines, *after])


def _after(orelse: cst.If | cst.Else) -> list[cst.BaseStatement]:
    """What the `else` (or `elif`) of a raising `if` runs, as statements after it."""
    if isinstance(orelse, cst.If):
        return [orelse]  # the `elif` becomes an `if`
    body = orelse.body
    if isinstance(body, cst.IndentedBlock):
        return list(body.body)
    return [cst.SimpleStatementLine(body=list(body.body))]


class AssertToRaiseIf(RaiseRecipe):
    """`assert <tensor test>, msg` -> `if __debug__: gbfix_raise_if(<fails>, AssertionError, msg)`."""

    name = "assert-to-raise-if"
    summary = "`assert <tensor>, msg` -> `if __debug__: gbfix_raise_if(not <tensor>, AssertionError, msg)`: the same AssertionError at run time"

    def check(self, ctx: SiteContext) -> tuple[cst.CSTNode, Sequence[cst.Arg]] | None:
        node = ctx.node
        if isinstance(node, cst.SimpleStatementLine) and len(node.body) == 1:
            node = node.body[0]
        stmt = ctx.enclosing(cst.Assert, node=node)
        if stmt is None or not any(n is stmt.test or n is stmt for n in (node, *ctx.ancestors(node))):
            return None
        if stmt.msg is not None and any(n is stmt.msg for n in (node, *ctx.ancestors(node))):
            return None  # a break of its own in the message
        line = _own_line(ctx, stmt)
        test = _split_test(cast(cst.If, stmt))  # it reads only `.test`
        if test is None:
            return None
        self._test, self._cond = test, test.cond
        return line, _assert_args(ctx, stmt)

    def plan(self, ctx: SiteContext, node: cst.CSTNode, message: list[cst.Arg]) -> Replacement:
        assert isinstance(node, cst.SimpleStatementLine)
        stmt = cast(cst.Assert, node.body[0])
        test = self._test
        call = self.call(_negated(test), cst.Name("AssertionError"), message)
        if test.prefix is None:
            return _debug_block(ctx, node, call)
        if test.kind == "and":  # `assert P and c`: P first, as its own assert
            first = node.with_changes(body=[stmt.with_changes(test=test.prefix)], trailing_whitespace=cst.TrailingWhitespace())
            return cst.FlattenSentinel([first, _debug_block(ctx, node, call).with_changes(leading_lines=[])])
        # `assert P or c` fails only where P does not hold
        guard = cst.BooleanOperation(cst.Name("__debug__"), cst.And(), _not(test.prefix))
        return _debug_block(ctx, node, call, guard)


def _not(expr: cst.BaseExpression) -> cst.BaseExpression:
    """`not expr`: `a is not b` for `a is b` (and back), else `not (expr)`."""
    if isinstance(expr, cst.Comparison) and len(expr.comparisons) == 1 and not expr.lpar:
        (target,) = expr.comparisons
        flipped = {cst.Is: cst.IsNot, cst.IsNot: cst.Is}.get(type(target.operator))
        if flipped is not None:
            return expr.with_changes(comparisons=[target.with_changes(operator=flipped())])
    if isinstance(expr, (cst.BooleanOperation, cst.Comparison)) and not expr.lpar:
        expr = expr.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return cst.UnaryOperation(cst.Not(), expr)


class AssertItemToRaiseIf(RaiseRecipe):
    """`assert t.item() <op> n, msg` -> `if __debug__: gbfix_raise_if(torch.logical_not(t.double() <op> n), AssertionError, msg)`."""

    name = "assert-item-to-raise-if"
    codes = ("GB0124",)
    rule = "GB0124"
    summary = "`assert t.item() <= n, msg` -> `if __debug__: gbfix_raise_if(not t.double() <= n, AssertionError, msg)`: no .item(), the same AssertionError"

    def check(self, ctx: SiteContext) -> tuple[cst.CSTNode, Sequence[cst.Arg]] | None:
        found = item_assert(ctx)
        if found is None:
            return None
        stmt, self._read, self._source = found
        self._cond = stmt.test
        return _own_line(ctx, stmt), _assert_args(ctx, stmt)

    def plan(self, ctx: SiteContext, node: cst.CSTNode, message: list[cst.Arg]) -> Replacement:
        assert isinstance(node, cst.SimpleStatementLine)
        comparison = cast(cst.Assert, node.body[0]).test
        read = self._read
        tensor = comparison.deep_replace(read, as_double(self._source))
        cond = make_call("torch.logical_not", tensor)
        return _debug_block(ctx, node, self.call(cond, cst.Name("AssertionError"), message))


def _own_line(ctx: SiteContext, stmt: cst.Assert) -> cst.SimpleStatementLine:
    """The line holding the assert alone (it becomes an `if __debug__:` block)."""
    line = ctx.file.parent(stmt)
    if not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1:
        raise Decline("the assert shares its line with other statements")
    return line


def _assert_args(ctx: SiteContext, stmt: cst.Assert) -> list[cst.Arg]:
    """The AssertionError's arguments: the message, if any (``AssertionError`` must be the builtin)."""
    if not builtin_at(ctx, stmt, "AssertionError"):
        raise Decline("`AssertionError` is bound to something else here")
    return [cst.Arg(stmt.msg)] if stmt.msg is not None else []


def _debug_block(
    ctx: SiteContext, line: cst.SimpleStatementLine, call: cst.Expr, test: cst.BaseExpression | None = None
) -> cst.If:
    """`if __debug__:` around the call, where the assert's line was (its comments kept)."""
    column = ctx.file.span(line)[0][1] + 4
    inner = cst.SimpleStatementLine(body=[fit(call, column)], trailing_whitespace=line.trailing_whitespace)
    return cst.If(
        test=test if test is not None else cst.Name("__debug__"),
        body=cst.IndentedBlock(body=[inner]),
        leading_lines=line.leading_lines,
    )


RECIPES = (RaiseIf, AssertToRaiseIf, AssertItemToRaiseIf)

__all__ = ["AssertItemToRaiseIf", "AssertToRaiseIf", "Message", "RaiseIf"]
