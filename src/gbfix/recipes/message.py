"""The message of a report or a check, as the conditional helpers make it at run time.

report-if (``gbfix_print_if`` / ``gbfix_warn_if`` / ``gbfix_log_if``) and raise-if's
``gbfix_raise_if_format`` take a message the same way: a ``str.format`` (or ``%``)
template and its values, each value handed to the op by kind (text, numbers,
tensors, None: ``op_helpers.VALUES``), and the casts the message applied to a value
(``int(t)``, ``float(t)``, ``t.item()``, ``str(t)``, ``repr(t)``: ``cast={0: "int"}``),
applied at run time with the formatting, only where the test holds
(``op_helpers.MESSAGE``). This module is the static half of that: the template of a
message as written (``template``), the casts moved to run time (``uncast``), the
values one by one (``flat``), and what may happen when a value is now evaluated where
the test does not hold (``risk``).

    f"iter {it}: norm {grad_norm:.3f}"       ->  "iter {}: norm {:.3f}", it, grad_norm
    "entropy %.3f" % entropy                  ->  "entropy %.3f", entropy            (percent=True)
    f"{int(mask.sum())} rows"                 ->  "{} rows", mask.sum()              (cast={0: "int"})
    "non-finite loss " + str(loss)            ->  "non-finite loss {}", loss         (cast={0: "str"})

A 0-dim tensor formats through ``Tensor.__format__`` (its item's format), any other
through ``str``; ``{t!r}`` / ``%s`` / ``%r`` convert it: the template keeps each as
written, so ``fmt.format(*values)`` at run time makes the text the original made.
"""

from __future__ import annotations

import re

import libcst as cst

from gbfix.recipes.analysis import COMPARISONS, bound_before, called, is_builtin, is_torch_call, pure
from gbfix.recipes.base import Decline, SiteContext
from gbfix.recipes.logging_call import literal
from gbfix.recipes.print_call import _to_text, format_fields, has_fstring, str_literal
from gbfix.recipes.tree import walk
from gbfix.recipes.vocabulary import words

# A `%` template: at least one conversion, and no mapping key (`%(name)s`): then
# `fmt % x` is `fmt % (x,)` for any x that is no tuple, which the helpers rely on.
_PERCENT_SPEC = re.compile(r"%[-#0 +]*(\d+|\*)?(\.(\d+|\*))?[diouxXeEfFgGcrsa]")
_FLOAT_SPEC = re.compile(r"%[-#0 +]*(\d+|\*)?(\.(\d+|\*))?[eEfFgG]")
# Tensor methods and torch functions that raise for no tensor (no dtype or shape they
# refuse) and have no effect: a message may evaluate them where the original did not.
_TOTAL_METHODS = words("sum any all count_nonzero isnan isinf isfinite logical_not detach clone numel nelement dim")
_TOTAL_TORCH = words("sum any all count_nonzero isnan isinf isfinite logical_not numel")
_DIM_METHODS = words("sum any all count_nonzero")  # may take a dim: 0 and -1 exist in every tensor
_SAFE_OPERATORS = (cst.Add, cst.Subtract, cst.Multiply, cst.BitAnd, cst.BitOr, cst.BitXor)
# Casts a message applies to a value, made at run time by the helpers (``_gbfix_cast_of``).
_BUILTIN_CASTS = ("int", "float", "str", "repr")
# Casts that give a number, and the reductions made at run time beneath one (they raise on
# an empty tensor, so the message may not compute them where the test does not hold).
_NUMBERS = frozenset({"int", "float", "item", "round"})
_RUN_TIME_REDUCTIONS = frozenset({"max", "min", "amax", "amin", "argmax", "argmin"})


# --- the template -----------------------------------------------------------------------


def template(ctx: SiteContext, call: cst.BaseExpression, node: cst.BaseExpression) -> tuple[str | None, list[cst.BaseExpression], bool]:
    """A message as (a template made at run time, its values, whether it is a `%` one);
    the template None for a message that is no f-string, literal, `%` / str.format of a
    literal, or `+` of those and `str(x)` / `repr(x)`. ``call``: where builtins are
    looked up (the call the message is given to)."""
    if has_fstring(node):
        found = format_fields(ctx, call, node)  # `call`: only where `str` is the builtin is asked there
        if found is None:
            raise Decline(f"`{ctx.code(node)}`: an f-string field the op cannot format (a nested format spec, a value it cannot take)")
        return found[0], found[1], False
    text = literal(ctx, node)
    if isinstance(text, str):
        return _escape(text), [], False
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo) and not has_fstring(node.left):
        fmt = literal(ctx, node.left)
        if isinstance(fmt, str):
            if "%(" in fmt or not _PERCENT_SPEC.search(fmt.replace("%%", "")):
                raise Decline(f"`{ctx.code(node)}`: a `%` template with a mapping key, or with no conversion")
            return fmt, [node.right], True
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "format":
        fmt = literal(ctx, node.func.value)
        if isinstance(fmt, str) and not has_fstring(node.func.value):
            if any(a.keyword is not None or a.star for a in node.args):
                raise Decline(f"`{ctx.code(node)}`: str.format with keyword or starred arguments")
            return fmt, [a.value for a in node.args], False
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
        parts = _concatenated(ctx, call, node)
        if parts is not None:
            return "".join(p[0] for p in parts), [v for p in parts for v in p[1]], False
    return None, [], False


def _concatenated(ctx: SiteContext, call: cst.BaseExpression, node: cst.BaseExpression) -> list[tuple[str, list[cst.BaseExpression]]] | None:
    """The operands of `a + b + ...` as templates, when each is a string literal, an
    f-string or `str(x)` / `repr(x)` (text whatever x is: `+` cannot raise), else None."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add) and not node.lpar:
        left, right = _concatenated(ctx, call, node.left), _concatenated(ctx, call, node.right)
        return None if left is None or right is None else left + right
    if isinstance(node, cst.Call):
        recv, name = called(node)
        single = len(node.args) == 1 and node.args[0].keyword is None and not node.args[0].star
        if recv is None and name in ("str", "repr") and single and is_builtin(ctx, node.func):
            return [("{}", [node])]
        return None
    if has_fstring(node) or isinstance(literal(ctx, node), str):
        text, values, _ = template(ctx, call, node)
        return None if text is None else [(text, values)]
    return None


def _escape(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def text_literal(text: str) -> cst.SimpleString:
    """A template as the string literal the helper call is given."""
    return cst.SimpleString(str_literal(text))


# --- the casts ----------------------------------------------------------------------------


def uncast(ctx: SiteContext, values: list[cst.BaseExpression], percent: bool, star: int | None = None) -> dict[int, str]:
    """Moves `int(t)`, `float(t)`, `t.item()`, `str(t)` and `repr(t)` among ``values`` to run
    time, in place: the value becomes `t`, and the map returned names the cast at the
    value's index among those the helper formats (a `%` tuple's items; a log call's
    arguments, its message first). ``star``: the index of a `*args` value (Decline for a
    cast at or after it: its index is not known)."""
    cast: dict[int, str] = {}
    if percent and isinstance(values[0], cst.Tuple):
        tup = values[0]
        if any(isinstance(el, cst.StarredElement) for el in tup.elements):
            return cast
        elements = []
        for i, el in enumerate(tup.elements):
            value, kind = _uncast(ctx, el.value)
            if kind:
                cast[i] = kind
            elements.append(el.with_changes(value=value))
        values[0] = tup.with_changes(elements=elements)
        return cast
    for i, v in enumerate(values):
        value, kind = _uncast(ctx, v)
        if kind is not None:
            if star is not None and i >= star:
                raise Decline(f"`{ctx.code(v)}` is at or after a starred argument: its index among the values is not known")
            values[i], cast[i] = value, kind
    return cast


def _uncast(ctx: SiteContext, node: cst.BaseExpression) -> tuple[cst.BaseExpression, str | None]:
    """(`t`, "int") for `int(t)` (the builtin), "float" for `float(t)`, "item" for
    `t.item()`, "str" / "repr" for `str(t)` / `repr(t)` of anything but a container or
    a shape (those Dynamo turns into text while it traces), "round:2" for `round(t, 2)`
    (digits a literal; "round" without); a cast of a cast as both, innermost first
    (`round(t.item(), 3)`: "item,round:3"); else (``node``, None)."""
    if isinstance(node, cst.Call):
        recv, name = called(node)
        args = node.args
        if any(a.keyword or a.star for a in args):
            return node, None
        if recv is None and name in _BUILTIN_CASTS and len(args) == 1 and is_builtin(ctx, node.func):
            if not (name in ("str", "repr") and _to_text(args[0].value)):
                return _then(ctx, args[0].value, name)
        if recv is None and name == "round" and len(args) in (1, 2) and is_builtin(ctx, node.func):
            digits = _digits(args[1].value) if len(args) == 2 else ""
            if digits is not None:
                return _then(ctx, args[0].value, f"round:{digits}" if digits else "round")
        if recv is not None and name == "item" and not args:
            return _then(ctx, recv, "item")
    return node, None


def _then(ctx: SiteContext, inner: cst.BaseExpression, kind: str) -> tuple[cst.BaseExpression, str]:
    """``inner`` uncast itself, then ``kind`` applied to what that gives. Under a number
    conversion, a reduction that raises on an empty tensor (`t.max()` in `t.max().item()`,
    `int(t.min())`) is made at run time too, where the test held: "max,item"."""
    value, first = _uncast(ctx, inner)
    if first is None and kind.partition(":")[0] in _NUMBERS and not _tested(ctx, value):
        value, first = _reduced(value)
    return value, f"{first},{kind}" if first else kind


def _tested(ctx: SiteContext, node: cst.BaseExpression) -> bool:
    """The test of the `if` or assert around ``node`` computes it too (evaluated anyway)."""
    for anc in ctx.ancestors(node):
        test = anc.test if isinstance(anc, (cst.If, cst.Assert)) else None
        if test is not None:
            return any(type(n) is type(node) and n.deep_equals(node) for n in walk(test))
    return False


def _reduced(node: cst.BaseExpression) -> tuple[cst.BaseExpression, str | None]:
    """(`t`, "max") for `t.max()`, `t.abs().max()`: (`t.abs()`, "max"); else (``node``, None)."""
    if isinstance(node, cst.Call) and not node.args:
        recv, name = called(node)
        if recv is not None and name in _RUN_TIME_REDUCTIONS:
            return recv, name
    return node, None


def _digits(node: cst.BaseExpression) -> str | None:
    """The text of an integer literal (`2`, `-1`), else None."""
    sign = ""
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        sign, node = "-", node.expression
    return sign + str(int(node.value, 0)) if isinstance(node, cst.Integer) else None


def float_converted(text: str, values: list[cst.BaseExpression], percent: bool, cast: dict[int, str]) -> list[cst.BaseExpression]:
    """The values the message converts with ``float()``: a `float(t)` cast, and with a `%`
    template that has a float conversion (`%f`, `%e`, `%g`), every value it does not cast.
    (torch warns once a process when ``float()`` converts a tensor that requires grad, from
    the line that converts it.)"""
    items = flat(values, percent)
    out = [v for i, v in enumerate(items) if "float" in cast.get(i, "").split(",")]
    if percent and _FLOAT_SPEC.search(text.replace("%%", "")):
        out += [v for i, v in enumerate(items) if i not in cast]
    return out


def cast_argument(cast: dict[int, str]) -> cst.Dict:
    """`{0: "int", 2: "item"}`: the helper's ``cast`` keyword."""
    items = [cst.DictElement(cst.Integer(str(i)), cst.SimpleString(f'"{c}"')) for i, c in sorted(cast.items())]
    return cst.Dict(items)


def flat(values: list[cst.BaseExpression], percent: bool) -> list[cst.BaseExpression]:
    """The values the helper gets one by one (a `%` tuple's items)."""
    if percent and isinstance(values[0], cst.Tuple):
        return [el.value for el in values[0].elements]
    return list(values)


# --- evaluated where the original did not ---------------------------------------------


def risk(ctx: SiteContext, node: cst.BaseExpression, at: cst.CSTNode, cond: cst.BaseExpression) -> str | None:
    """What may happen when ``node`` is evaluated whenever the statement ``at`` runs, where
    the original evaluated it only where its test ``cond`` held: an effect or an error;
    None when nothing can. A part of the test with no effect may raise: the test,
    evaluated first, raised there already; a name the test binds (`(n := t.sum()) > 0`)
    is bound by then."""
    seen = [n for n in walk(cond) if isinstance(n, cst.BaseExpression) and not isinstance(n, cst.Name) and pure(n)]
    return _risk_in(ctx, node, at, seen, _walrus_names(cond))


def _walrus_names(cond: cst.BaseExpression) -> frozenset[str]:
    """The names ``cond`` binds whenever it is evaluated: walrus targets not in the right
    operand of `and`/`or`, an arm of a conditional expression, a comprehension or a lambda."""
    out: set[str] = set()

    def visit(node: cst.CSTNode) -> None:
        if isinstance(node, (cst.Lambda, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)):
            return
        if isinstance(node, cst.BooleanOperation):
            return visit(node.left)
        if isinstance(node, cst.IfExp):
            return visit(node.test)
        if isinstance(node, cst.NamedExpr) and isinstance(node.target, cst.Name):
            out.add(node.target.value)
        for child in node.children:
            visit(child)

    visit(cond)
    return frozenset(out)


def _risk_in(
    ctx: SiteContext, node: cst.BaseExpression, at: cst.CSTNode, seen: list[cst.BaseExpression], bound: frozenset[str]
) -> str | None:
    if any(type(s) is type(node) and s.deep_equals(node) for s in seen):
        return None  # the test computed it already
    if isinstance(node, cst.Name):
        if node.value in ("True", "False", "None") or node.value in bound or bound_before(ctx, node.value, at):
            return None
        return f"reads `{node.value}`, which may not be bound there"
    if isinstance(node, (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.ConcatenatedString)):
        return None
    if isinstance(node, cst.Attribute):
        return _risk_in(ctx, node.value, at, seen, bound)
    if isinstance(node, (cst.Tuple, cst.List)):
        return next(filter(None, (_risk_in(ctx, el.value, at, seen, bound) for el in node.elements)), None)
    if isinstance(node, cst.BinaryOperation) and not isinstance(node.operator, _SAFE_OPERATORS):
        return "divides or shifts, which may raise"
    if isinstance(node, cst.Comparison) and not all(isinstance(c.operator, (*COMPARISONS, cst.Is, cst.IsNot)) for c in node.comparisons):
        return "tests membership, which may raise"
    if isinstance(node, (cst.UnaryOperation, cst.BooleanOperation, cst.Comparison, cst.BinaryOperation)):
        parts = [c for c in node.children if isinstance(c, cst.BaseExpression)]
        parts += [c.comparator for c in node.comparisons] if isinstance(node, cst.Comparison) else []
        return next(filter(None, (_risk_in(ctx, p, at, seen, bound) for p in parts)), None)
    if isinstance(node, cst.Call) and _total(ctx, node):
        inner = [a.value for a in node.args] + ([node.func.value] if isinstance(node.func, cst.Attribute) else [])
        return next(filter(None, (_risk_in(ctx, p, at, seen, bound) for p in inner)), None)
    if isinstance(node, cst.Call):
        return f"calls `{ctx.code(node.func)}`, which may have effects or raise"
    if isinstance(node, cst.Subscript):
        return "indexes"
    return "may have effects or raise"


def _total(ctx: SiteContext, call: cst.Call) -> bool:
    """A call with no effect that raises for no value of its arguments: a total tensor
    method or torch function (a dim only 0 or -1), `str` / `repr` / `tuple` / `list` of
    a shape."""
    if any(a.keyword is not None or a.star for a in call.args):
        return False
    recv, name = called(call)
    if is_torch_call(call):
        return name in _TOTAL_TORCH and len(call.args) == 1
    if recv is not None:
        dim = len(call.args) == 1 and name in _DIM_METHODS and _end_dim(call.args[0].value)
        return name in _TOTAL_METHODS and (not call.args or dim)
    if name not in ("str", "repr", "tuple", "list") or len(call.args) != 1 or not is_builtin(ctx, call.func):
        return False
    arg = call.args[0].value
    if isinstance(arg, cst.Call) and called(arg)[1] in ("tuple", "list") and name in ("str", "repr"):
        return _total(ctx, arg)
    size = isinstance(arg, cst.Call) and called(arg)[1] == "size" and called(arg)[0] is not None and not arg.args
    return size or (isinstance(arg, cst.Attribute) and arg.attr.value == "shape")


def _end_dim(node: cst.BaseExpression) -> bool:
    """0 or -1: a dim every tensor has (a 0-dim one too)."""
    return cst.Module([]).code_for_node(node).replace(" ", "") in ("0", "-1")
