"""GB0170: an `if` on a tensor's value. Rewrite the branch into compiled control flow.

    if cond: raise E("msg")             -> torch._assert_async(torch.logical_not(cond), "E: msg")
    if cond: x = a  [elif/else: x = b]  -> x = torch.where(cond, a, b)        (b defaults to x)
    a if cond else b                    -> torch.where(cond, a, b)
    if cond: return a  (else:) return b -> return torch.cond(cond, lambda: a, lambda: b)
    if M.any(): x = x.masked_fill(M, v) -> x = x.masked_fill(M, v)      (the identity for an all-False M)
    if (m == 1).all(): m = None         -> (removed)                   (unsafe: the general path runs)

Dynamo reports the `if` test (or, when the body returns or raises, the whole
`if`). The Python part of an `and`/`or` test (`self.training`, `x.shape[1] > 0`,
`mask is not None`) stays an ordinary `if` around the rewrite. Everything here is
syntactic, so each recipe declines whatever it cannot prove equivalent; shapes and
dtypes it cannot see are left to the verifier, which compares outputs.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence, Set
from dataclasses import dataclass, replace
from typing import cast

import libcst as cst
import libcst.matchers as m

from gbfix.generated import piece
from gbfix.recipes.analysis import (
    COMPARISONS,
    bound_before,
    called,
    is_torch_call,
    local_effects_only,
    mutated,
    name_of,
    number_evidence,
    pure,
    pure_call,
    root_name,
    scope_of,
    single_binding,
    taken,
    target_names,
    tensor_evidence,
)
from gbfix.recipes.base import Decline, Recipe, Replacement, SiteContext
from gbfix.recipes.tree import (
    contains,
    names_outside,
    nodes,
    param_names,
    variable_names,
    walk,
)
from gbfix.recipes.vocabulary import (
    ALIASING,
    CASTS,
    FULL_REDUCTIONS,
    PREDICATES,
    SHAPE_VIEWS,
    TUPLE_WITH_DIM,
    words,
)

_WIDTH = 88  # longer generated calls get one argument a line, as black would lay them out
# Calls that return a boolean tensor: a test made of them needs no proof that it is a tensor.
_BOOL_CALLS = PREDICATES | words("any all")
# Elementwise maps that keep their input's shape and dtype and have a finite
# gradient everywhere: `torch.where` evaluates both arms, and the unselected one
# still gets a zero gradient, which turns into NaN through a singular derivative.
_ELEMENTWISE = {
    "abs": (), "neg": (), "negative": (), "relu": (), "sigmoid": (), "tanh": (), "sign": (),
    "sgn": (), "round": ("decimals",), "floor": (), "ceil": (), "trunc": (), "frac": (),
    "square": (), "clone": (), "contiguous": (), "clamp": ("min", "max"),
    "clip": ("min", "max"), "clamp_min": (), "clamp_max": (), "masked_fill": ("mask", "value"),
    "nan_to_num": ("nan", "posinf", "neginf"), "add": ("alpha",), "sub": ("alpha",), "mul": (),
    # not elementwise, but of the input's shape and dtype, with a finite derivative
    "flip": ("dims",), "fliplr": (), "flipud": (), "roll": ("shifts", "dims"), "cumsum": ("dim",),
    "tril": ("diagonal",), "triu": ("diagonal",), "softmax": ("dim",), "log_softmax": ("dim",),
}
_LIKE = {"zeros_like": (), "ones_like": (), "full_like": ("fill_value",)}  # torch.*_like(x, ...)


def _bare(expr: cst.BaseExpression) -> cst.BaseExpression:
    """Without its own parentheses, for use as a call argument."""
    return expr.with_changes(lpar=[], rpar=[]) if getattr(expr, "lpar", None) else expr


def make_call(func: str, *args: cst.BaseExpression) -> cst.Call:
    return cst.Call(func=cst.parse_expression(func), args=[cst.Arg(_bare(a)) for a in args])


# ---------------------------------------------------------------- purity


# ---------------------------------------------------------------- conditions


def operands(expr: cst.BaseExpression, op: type) -> list[cst.BaseExpression]:
    """The operands of an unparenthesized `a and b and c` (``op`` cst.And) or `or` chain."""
    if isinstance(expr, cst.BooleanOperation) and isinstance(expr.operator, op) and not expr.lpar:
        return [*operands(expr.left, op), *operands(expr.right, op)]
    return [expr]


def and_operands(expr: cst.BaseExpression) -> list[cst.BaseExpression]:
    return operands(expr, cst.And)


def _has_call(expr: cst.CSTNode) -> bool:
    return contains(expr, (cst.Call, cst.Subscript))


# Facts about a tensor that are Python values (never tensors): tests on them stay Python `if`s.
_STATIC_ATTRS = frozenset("training shape ndim dtype device is_cuda is_sparse requires_grad".split())
_STATIC_METHODS = frozenset("dim size numel is_floating_point is_complex".split())
_STATIC_FUNCS = frozenset(
    "isinstance torch.is_grad_enabled torch.is_autocast_enabled torch.is_inference_mode_enabled"
    " torch.jit.is_scripting torch.jit.is_tracing torch.compiler.is_compiling".split()
)


def _access(expr: cst.BaseExpression) -> bool:
    """A name or a chain of attributes of one (`self.cfg.eps`): reading it runs no code of ours."""
    while isinstance(expr, cst.Attribute):
        expr = expr.value
    return isinstance(expr, cst.Name)


def _static_value(expr: cst.BaseExpression) -> bool:
    """A literal, a dtype, or a shape fact of a tensor (`x.shape[1]`, `x.size(0)`, `len(x)`)."""
    if isinstance(expr, (cst.Integer, cst.Float, cst.SimpleString)) or name_of(expr) in ("None", "True", "False"):
        return True
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        return _static_value(expr.expression)
    if isinstance(expr, (cst.Tuple, cst.List)):
        return all(_static_value(el.value) for el in expr.elements if isinstance(el, cst.Element))
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, (cst.Add, cst.Subtract, cst.Multiply)):
        return _static_value(expr.left) and _static_value(expr.right)
    if isinstance(expr, cst.Attribute):
        if name_of(expr.value) == "torch":
            return True  # torch.float16, torch.bool
        if expr.attr.value in _STATIC_ATTRS:
            return _access(expr.value)
        return expr.attr.value == "type" and isinstance(expr.value, cst.Attribute) and expr.value.attr.value == "device"
    if isinstance(expr, cst.Subscript):  # x.shape[1], x.shape[-1]
        index = expr.slice[0].slice if len(expr.slice) == 1 else None
        return (
            isinstance(expr.value, cst.Attribute) and expr.value.attr.value == "shape" and _static_value(expr.value)
            and isinstance(index, cst.Index) and _static_value(index.value)
        )
    if isinstance(expr, cst.Call):
        recv, name = called(expr)
        args = all(_static_value(a.value) and a.keyword is None and not a.star for a in expr.args)
        if recv is not None and name in _STATIC_METHODS:
            return _access(recv) and args
        return name == "len" and recv is None and len(expr.args) == 1 and _access(expr.args[0].value)
    return False


def static(expr: cst.BaseExpression) -> bool:
    """A Python truth value that is never a tensor's and runs no code of ours
    (`self.training`, `x.shape[1] > 0`, `mask is not None`, `x.dtype == torch.float16`):
    it may stay a Python `if` even where it follows a tensor operand (see ``_safe_early``)."""
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Not):
        return static(expr.expression)
    if isinstance(expr, cst.BooleanOperation):
        return static(expr.left) and static(expr.right)
    if isinstance(expr, cst.Comparison):
        parts = [expr.left, *(c.comparator for c in expr.comparisons)]
        if all(isinstance(c.operator, (cst.Is, cst.IsNot)) for c in expr.comparisons):
            return all(_access(p) or _static_value(p) for p in parts)  # identity: no __eq__, no __bool__
        return all(_static_value(p) for p in parts)
    if isinstance(expr, cst.Attribute) and expr.attr.value in ("training", "is_cuda", "requires_grad"):
        return _access(expr.value)
    if isinstance(expr, cst.Call):
        func = cst.Module([]).code_for_node(expr.func)
        recv, name = called(expr)
        if func in _STATIC_FUNCS:
            return all(_access(a.value) or _static_value(a.value) for a in expr.args)
        return recv is not None and name in ("is_floating_point", "is_complex") and _access(recv) and not expr.args
    return name_of(expr) in ("True", "False")


def _used_as_tensors(expr: cst.BaseExpression) -> set[str]:
    """Names ``expr`` calls a method on or passes to a torch function."""
    out: set[str | None] = set()
    for n in walk(expr):
        if isinstance(n, cst.Call):
            recv, _ = called(n)
            if is_torch_call(n):
                out |= {root_name(a.value) for a in n.args}
            elif recv is not None:
                out.add(root_name(recv))
    return {n for n in out if n is not None}


def _safe_early(expr: cst.BaseExpression, tensors: set[str]) -> bool:
    """A static operand that the rewrite evaluates before a tensor operand the
    original evaluated first must not raise where the original never read it:
    it tests plain names against None, reads `self.training`, or reads only
    names the operands before it used as tensors (`m.any() and m.dim() == 2`:
    when m is no tensor, the original raised there already)."""
    if isinstance(expr, cst.UnaryOperation):
        return _safe_early(expr.expression, tensors)
    if isinstance(expr, cst.BooleanOperation):
        return _safe_early(expr.left, tensors) and _safe_early(expr.right, tensors)
    if isinstance(expr, cst.Comparison) and all(isinstance(c.operator, (cst.Is, cst.IsNot)) for c in expr.comparisons):
        if all(isinstance(p, cst.Name) for p in (expr.left, *(c.comparator for c in expr.comparisons))):
            return True
    if m.matches(expr, m.Attribute(value=m.Name("self"), attr=m.Name("training"))):
        return True
    return variable_names(expr) - {"torch", "len", "None", "True", "False"} <= tensors


def _tensor_valued(call: cst.Call) -> bool:
    """A call that returns a tensor: a torch function, a reduction, an elementwise map."""
    if is_torch_call(call):
        return cst.Module([]).code_for_node(call.func) not in _STATIC_FUNCS
    return called(call)[1] in FULL_REDUCTIONS | _BOOL_CALLS | _ELEMENTWISE.keys()


def tensor_cond(expr: cst.BaseExpression, known: bool, tensors: Set[str] = frozenset()) -> cst.BaseExpression | None:
    """``expr`` as a tensor expression with the same truth value, or None.

    ``known``: the break proves ``expr`` is a tensor (it is the only operand of
    the test that is not static). Otherwise it must show it is one by its shape
    (a comparison involving a call or one of ``tensors``, names the scope shows to be
    tensors; or a boolean-valued call).
    """
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Not):
        inner = tensor_cond(expr.expression, known, tensors)
        return inner and make_call("torch.logical_not", inner)
    if isinstance(expr, cst.BooleanOperation):
        # Python short-circuits; the tensor form evaluates both sides, so both must be pure.
        left, right = tensor_cond(expr.left, False, tensors), tensor_cond(expr.right, False, tensors)
        if left is None or right is None or not pure(expr):
            return None
        op = "and" if isinstance(expr.operator, cst.And) else "or"
        return make_call(f"torch.logical_{op}", left, right)
    if isinstance(expr, cst.Comparison):
        if not all(isinstance(c.operator, COMPARISONS) for c in expr.comparisons):
            return None  # `is` / `in` are not elementwise
        if len(expr.comparisons) > 1:
            # `lo <= t <= hi` is `lo <= t and t <= hi`, the middle read twice: it must be pure
            if not pure(expr):
                return None
            parts = [expr.left, *(c.comparator for c in expr.comparisons)]
            pairs = [
                cst.Comparison(left=_bare(a), comparisons=[c.with_changes(comparator=_bare(b))])
                for a, b, c in zip(parts, parts[1:], expr.comparisons)
            ]
            conds = [tensor_cond(pair, known, tensors) for pair in pairs]
            if any(c is None for c in conds):
                return None
            out = conds[0]
            for c in conds[1:]:
                out = make_call("torch.logical_and", out, c)
            return out
        operands = [expr.left, *(c.comparator for c in expr.comparisons)]
        if known or contains(expr, cst.Call, _tensor_valued) or any(name_of(o) in tensors for o in operands):
            return expr
        return None
    if known:
        return expr
    if isinstance(expr, cst.Call) and called(expr)[1] in _BOOL_CALLS:
        return expr
    return None


@dataclass(frozen=True)
class SplitTest:
    """An `if` test split into a Python part that stays an `if`, and a tensor condition.

    ``kind`` "and": `if P and c:` runs the rewrite of `if c:` under `if P:`;
    "or": `if P or c:` keeps its body under `if P:` and runs the rewrite of
    `if c:` in the `else:`. The operands of P may come after c in the test as
    written (``static`` and ``_safe_early``: evaluating them first changes nothing).
    """

    prefix: cst.BaseExpression | None
    cond: cst.BaseExpression  # the tensor part as written
    tensor: cst.BaseExpression  # the same as a tensor expression
    kind: str = "and"
    leading: bool = True  # the Python operands all come before the tensor ones, as written


def _join(ops: Sequence[cst.BaseExpression], op: type) -> cst.BaseExpression:
    out = ops[0]
    for o in ops[1:]:
        out = cst.BooleanOperation(left=out, operator=op(), right=o)
    return out


def _split_test(if_node: cst.If | cst.IfExp, known_tensors: Set[str] = frozenset()) -> SplitTest | None:
    """Split the test into Python and tensor operands. Which operand broke is not
    told reliably (CPython 3.11 puts every jump of an `and` chain on its first
    operand), so operands are told apart by their shape: the leading ones without
    calls were evaluated before any tensor, as in the original (unless all are
    call-free: then the one that is not ``static`` broke); later ones must be
    ``static`` and ``_safe_early``. With one tensor operand left the break proves
    it is a tensor; with several, each must show it (``known_tensors``: names the
    scope shows to be tensors)."""
    op = cst.Or if len(operands(if_node.test, cst.Or)) > 1 else cst.And
    ops = operands(if_node.test, op)

    def python_operands(lead: int) -> list[int]:
        out: list[int] = []
        seen: set[str] = set()
        for i, o in enumerate(ops):
            if pure(o) and (i < lead or (static(o) and _safe_early(o, seen))):
                out.append(i)
            else:
                seen |= _used_as_tensors(o)
        return out

    python = python_operands(next((i for i, o in enumerate(ops) if _has_call(o) and not static(o)), len(ops)))
    if len(python) == len(ops):  # `if has_pad:`, `if flag and self.training:`: the one non-static operand broke
        python = python_operands(next((i for i, o in enumerate(ops) if not static(o)), len(ops)))
        rest = [o for i, o in enumerate(ops) if i not in python]
        if len(rest) != 1 and not (rest and all(variable_names(o) & known_tensors for o in rest)):
            return None  # several operands of unknown kind: which one broke is not told
    tensors = [o for i, o in enumerate(ops) if i not in python]
    if len(tensors) > 1 and not all(pure(o) for o in tensors):
        return None
    converted = [tensor_cond(o, len(tensors) == 1, known_tensors) for o in tensors]
    if any(c is None for c in converted):
        return None
    tensor = converted[0]
    for c in converted[1:]:
        tensor = make_call("torch.logical_" + ("and" if op is cst.And else "or"), tensor, c)
    prefix = _join([ops[i] for i in python], op) if python else None
    kind = "and" if op is cst.And else "or"
    return SplitTest(prefix, _join(tensors, op), tensor, kind, python == list(range(len(python))))


def _site_if(ctx: SiteContext) -> cst.If | cst.IfExp | None:
    """The `if` (or conditional expression) whose test the break is in."""
    node = ctx.node
    if isinstance(node, (cst.If, cst.IfExp)):
        return node
    prev = node
    for anc in ctx.ancestors():
        if isinstance(anc, (cst.If, cst.IfExp)):
            return anc if prev is anc.test else None
        if isinstance(anc, (cst.BaseStatement, cst.BaseSmallStatement, cst.Lambda, cst.BaseSuite)):
            return None
        prev = anc
    return None


def site_branch(ctx: SiteContext) -> tuple[cst.If | cst.IfExp, SplitTest] | None:
    """The `if` (or conditional expression) whose test the break is in, its test split."""
    found = _site_if(ctx)
    if found is None:
        return None
    scope = scope_of(ctx, found)
    shown = {n for n in variable_names(found.test) if _tensor_name(n, scope)}
    test = _split_test(found, shown)
    return (found, test) if test else None


def _tensor_name(name: str, scope: cst.CSTNode) -> bool:
    """The scope calls a tensor method on ``name``, or binds it once to a torch call or
    to a reduction, map, cast or view of such a name (`pos_rate = labels.mean()`)."""
    return tensor_evidence(name, scope) or _tensor_call(single_binding(scope, name), scope)


# ---------------------------------------------------------------- scope


# ---------------------------------------------------------------- statements


def fresh(scope: cst.CSTNode, base: str, taken: set[str]) -> str:
    """``base``, or ``base_2``, ... : a name the scope does not use yet."""
    used = {n.value for n in nodes(scope, cst.Name)} | taken
    name, k = base, 1
    while name in used:
        k += 1
        name = f"{base}_{k}"
    taken.add(name)
    return name


def single(suite: cst.BaseSuite) -> cst.BaseSmallStatement | None:
    """The one small statement a block holds, or None."""
    body = suite.body
    if isinstance(suite, cst.IndentedBlock):
        if len(body) != 1 or not isinstance(body[0], cst.SimpleStatementLine):
            return None
        body = body[0].body
    return cast(cst.BaseSmallStatement, body[0]) if len(body) == 1 else None


def _is_elif(ctx: SiteContext, if_node: cst.If) -> bool:
    parent = ctx.file.parent(if_node)
    return isinstance(parent, cst.If) and parent.orelse is if_node


def _header(if_node: cst.If) -> list[cst.EmptyLine]:
    """The comment on the `if` line itself, as a line of its own."""
    body = if_node.body
    header = body.header if isinstance(body, cst.IndentedBlock) else body.trailing_whitespace
    return [cst.EmptyLine(comment=header.comment)] if header.comment is not None else []


def _comments(if_node: cst.If) -> list[cst.EmptyLine]:
    """The comments around the `if` line and its one-statement body, so the
    statement that replaces them keeps them."""
    lines = [*if_node.leading_lines, *_header(if_node)]
    if isinstance(if_node.body, cst.IndentedBlock):
        lines += if_node.body.body[0].leading_lines
    return lines


def statement(small: cst.BaseSmallStatement, if_node: cst.If, **changes) -> cst.SimpleStatementLine:
    """``small`` as a line that keeps the comments of the `if` it replaces."""
    line = cst.SimpleStatementLine(body=[small], leading_lines=_comments(if_node))
    if isinstance(if_node.body, cst.IndentedBlock):
        line = line.with_changes(trailing_whitespace=if_node.body.body[0].trailing_whitespace)
    return line.with_changes(**changes)


def _newline(extra: str) -> cst.ParenthesizedWhitespace:
    return cst.ParenthesizedWhitespace(indent=True, last_line=cst.SimpleWhitespace(extra))


def fit(small: cst.BaseSmallStatement, column: int) -> cst.BaseSmallStatement:
    """``small`` with its call laid out one argument a line when it is too long."""
    call = small.value
    code = cst.Module([]).code_for_node(small)
    if column + len(code) <= _WIDTH or "\n" in code or not isinstance(call, cst.Call):
        return small
    last = len(call.args) - 1
    args = [a.with_changes(comma=cst.Comma(whitespace_after=_newline("" if i == last else "    "))) for i, a in enumerate(call.args)]
    return small.with_changes(value=call.with_changes(whitespace_before_args=_newline("    "), args=args))


def _lines(
    if_node: cst.If, smalls: Sequence[cst.BaseSmallStatement], column: int, lead: Sequence[cst.EmptyLine] = (), keep: bool = True
) -> list[cst.SimpleStatementLine]:
    """``smalls`` as lines, the last ones keeping the comments and line ends of
    the body lines they replace one for one (``keep``; extra ones come first),
    the first preceded by ``lead``."""
    body = if_node.body
    extra = len(smalls) - len(body.body) if isinstance(body, cst.IndentedBlock) else 0
    out = []
    for i, small in enumerate(smalls):
        line = cst.SimpleStatementLine(body=[fit(small, column)])
        if keep and isinstance(body, cst.IndentedBlock) and i >= extra:
            old = body.body[i - extra]
            line = line.with_changes(leading_lines=old.leading_lines, trailing_whitespace=old.trailing_whitespace)
        out.append(line)
    out[0] = out[0].with_changes(leading_lines=[*lead, *out[0].leading_lines])
    return out


def _replace_if(
    ctx: SiteContext, if_node: cst.If, test: SplitTest, smalls: cst.BaseSmallStatement | Sequence[cst.BaseSmallStatement]
) -> Replacement:
    """Put ``smalls`` (the rewrite of `if <tensor test>: <body>`, one per body
    line) where the `if` was: under `if <prefix>:` (an `and` test), in the `else:`
    of `if <prefix>: <body>` (an `or` test), in an `else:` when the `if` was an
    `elif`, else as plain statements."""
    smalls = [smalls] if isinstance(smalls, cst.BaseSmallStatement) else list(smalls)
    nested = test.prefix is not None or _is_elif(ctx, if_node)
    column = ctx.file.span(if_node)[0][1] + 4 * nested
    if test.prefix is not None and test.kind == "or":
        # `if P or c: B [else: E]` -> `if P: B` + `else: <c ? B : E>`
        block = cst.IndentedBlock(body=_lines(if_node, smalls, column, keep=False))
        return if_node.with_changes(test=test.prefix, orelse=cst.Else(body=block))
    if test.prefix is not None:
        body = if_node.body
        if isinstance(body, cst.IndentedBlock):
            return if_node.with_changes(test=test.prefix, body=body.with_changes(body=_lines(if_node, smalls, column)))
        return if_node.with_changes(test=test.prefix, body=body.with_changes(body=[fit(sm, column) for sm in smalls]))
    if _is_elif(ctx, if_node):
        block = cst.IndentedBlock(body=_lines(if_node, smalls, column, _header(if_node)))
        return cst.Else(body=block, leading_lines=if_node.leading_lines)
    lines = _lines(if_node, smalls, column, [*if_node.leading_lines, *_header(if_node)])
    return lines[0] if len(lines) == 1 else cst.FlattenSentinel(lines)


class BranchRecipe(Recipe):
    codes = ("GB0170",)
    rule = "GB0170"

    def __init__(self) -> None:
        super().__init__()
        self._plan: Replacement | None = None

    def rewrite(self, node: cst.CSTNode) -> Replacement | None:
        self.need_import("torch")
        return self._plan


# ---------------------------------------------------------------- if cond: raise


class BranchToCheck(BranchRecipe):
    """`if cond: raise E(msg)` -> an asynchronous assert with the same condition."""

    name = "branch-to-check"
    # The error becomes RuntimeError("E: msg") instead of E(msg), and on CUDA it
    # fires asynchronously as a device-side assert.
    safety = "unsafe"
    requires = frozenset({"check"})  # torch._check and the message form of _assert_async: both 2.1+
    summary = "replace `if <tensor>: raise` by torch._assert_async (the error becomes a RuntimeError)"

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        found = site_branch(ctx)
        if found is None or not isinstance(found[0], cst.If) or found[0].orelse is not None:
            return None
        if_node, test = found
        raise_ = single(if_node.body)
        if raise_ is None or not m.matches(raise_, m.Raise(exc=m.Call() | m.Name() | m.Attribute(), cause=None)):
            return None
        exc = raise_.exc
        func = exc.func if isinstance(exc, cst.Call) else exc
        label = ctx.code(func)
        args = exc.args if isinstance(exc, cst.Call) else ()
        first = args[0].value if args and args[0].keyword is None else None
        text = first.evaluated_value if isinstance(first, (cst.SimpleString, cst.ConcatenatedString)) else None
        if not isinstance(text, str):
            text = ctx.code(test.cond)  # no constant message: say which test failed
        if isinstance(test.cond, cst.UnaryOperation) and isinstance(test.cond.operator, cst.Not):
            ok = test.tensor.args[0].value  # `not c` holds when c does: skip a double negation
        else:
            ok = make_call("torch.logical_not", test.tensor)
        message = cst.SimpleString(json.dumps(f"{label}: {text}", ensure_ascii=False))
        check = cst.Expr(make_call("torch._assert_async", ok, message))
        self._plan = _replace_if(ctx, if_node, test, check)
        return if_node


# ---------------------------------------------------------------- if cond: x = a / a if cond else b


Evidence = Callable[[cst.BaseExpression], bool]


def _scalar(expr: cst.BaseExpression, evidence: Evidence | None = None) -> bool:
    """A number or a 0-dim value: broadcasts against x without changing its shape.
    A name or attribute counts as one when ``evidence`` shows it (None: taken on trust)."""
    if isinstance(expr, (cst.Integer, cst.Float)):
        return True
    if isinstance(expr, (cst.Name, cst.Attribute)):
        return evidence is None or evidence(expr)
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, (cst.Minus, cst.Plus)):
        return _scalar(expr.expression, evidence)
    if isinstance(expr, cst.BinaryOperation):
        return _scalar(expr.left, evidence) and _scalar(expr.right, evidence) and _safe_operator(expr)
    if isinstance(expr, cst.Call):
        recv, name = called(expr)
        if name == "detach" and recv is not None and not expr.args:  # what item-to-tensor writes for `t.item()`
            return _scalar(recv, evidence)
        return recv is not None and name in FULL_REDUCTIONS and not expr.args
    return False


def _safe_divisor(expr: cst.BaseExpression) -> bool:
    """A literal, or `(... + eps)`: a divisor that cannot be zero on the unselected arm."""
    if isinstance(expr, (cst.Integer, cst.Float)):
        return float(expr.evaluated_value) != 0
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Add):
        for side in (expr.left, expr.right):
            if isinstance(side, (cst.Integer, cst.Float)) and float(side.evaluated_value) > 0:
                return True
            last = side.attr.value if isinstance(side, cst.Attribute) else name_of(side)
            if last is not None and "eps" in last.lower():
                return True
    return False


def _safe_operator(expr: cst.BinaryOperation) -> bool:
    op = expr.operator
    if isinstance(op, (cst.Add, cst.Subtract, cst.Multiply)):
        return True
    if isinstance(op, cst.Divide):
        return _safe_divisor(expr.right)
    if isinstance(op, cst.Power):
        return isinstance(expr.right, cst.Integer) and int(expr.right.value) >= 1
    return False


def _args_ok(rest: Sequence[cst.Arg], keywords: tuple[str, ...], evidence: Evidence | None = None) -> bool:
    return all(
        _scalar(a.value, evidence) and not a.star and (a.keyword is None or a.keyword.value in keywords) for a in rest
    )


def _like(expr: cst.BaseExpression, evidence: Evidence | None = None) -> set[str]:
    """The names x such that ``expr`` has x's shape and dtype when x is a tensor
    and the other names are scalars (an elementwise function of x and scalars);
    with ``evidence``, only where the other names are shown to be scalars."""
    if isinstance(expr, cst.Name):
        return set() if expr.value in ("True", "False", "None") else {expr.value}
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, (cst.Minus, cst.Plus)):
        return _like(expr.expression, evidence)
    if isinstance(expr, cst.BinaryOperation) and _safe_operator(expr):
        left, right = _like(expr.left, evidence), _like(expr.right, evidence)
        out = left & right
        if _scalar(expr.right, evidence):
            out |= left
        if _scalar(expr.left, evidence) and not isinstance(expr.operator, (cst.Divide, cst.Power)):
            out |= right
        return out
    if isinstance(expr, cst.Call):
        recv, name = called(expr)
        if is_torch_call(expr) or name_of(expr.func) == WHERE.name:
            if name in ("where", WHERE.name) and len(expr.args) == 3 and not any(a.keyword for a in expr.args):
                # what this recipe writes: an `elif` chain folds into nested wheres
                return _like(expr.args[1].value, evidence) & _like(expr.args[2].value, evidence)
            if not expr.args or expr.args[0].keyword is not None:
                return set()
            first, rest = expr.args[0].value, expr.args[1:]
            if name in _LIKE and _args_ok(rest, _LIKE[name], evidence) and isinstance(first, cst.Name):
                return {first.value}
            if name in _ELEMENTWISE and _args_ok(rest, _ELEMENTWISE[name], evidence):
                return _like(first, evidence)
        elif recv is not None and name in _ELEMENTWISE and _args_ok(expr.args, _ELEMENTWISE[name], evidence):
            return _like(recv, evidence)
        elif recv is not None and name == "masked_fill" and len(expr.args) == 2 and _args_ok(expr.args[1:], (), evidence):
            # The mask must broadcast to the receiver, so the result has the
            # receiver's shape and dtype whatever the mask expression is.
            if expr.args[0].keyword is None and not expr.args[0].star:
                return _like(recv, evidence)
    return set()


def _same_constructor(a: cst.BaseExpression, b: cst.BaseExpression) -> bool:
    """`torch.tensor(p, dtype=D, ...)` on both arms with the same keywords and an
    explicit dtype: two tensors of one dtype. (Phi-3's long/short RoPE factors.)
    Their shapes come from the data; arms of different lengths would broadcast
    or fail, which changes the program's outputs and the verifier sees that."""
    calls = [e for e in (a, b) if isinstance(e, cst.Call) and is_torch_call(e) and called(e)[1] == "tensor"]
    if len(calls) != 2:
        return False
    (pa, *ka), (pb, *kb) = calls[0].args, calls[1].args
    if pa.keyword is not None or pb.keyword is not None or pa.star or pb.star:
        return False
    keywords = [k.keyword.value for k in ka if k.keyword is not None]
    same = len(ka) == len(kb) and all(x.deep_equals(y) for x, y in zip(ka, kb))
    return same and len(keywords) == len(ka) and "dtype" in keywords


def _where_why(
    ctx: SiteContext,
    at: cst.CSTNode,
    a: cst.BaseExpression,
    b: cst.BaseExpression,
    temps: Set[str] = frozenset(),
    in_place: bool = False,
) -> tuple[str | None, str]:
    """Why a select between ``a`` and ``b`` may not stand for the branch (or None), and
    the function that selects: `torch.where` when the arms are shown to be of one
    tensor's shape and dtype, else the checked ``gbfix_where``, which
    selects in the graph only when the shapes, dtypes and devices it sees while
    tracing agree (and runs the branch as written otherwise). Both arms are
    evaluated: they must be pure, bound (before ``at``, or as ``temps`` of the arm),
    and free of singular gradients unless proven of one shape. ``in_place``: an
    augmented assignment elsewhere does not count as an update in place."""
    if not (pure(a) and pure(b)):
        return "an arm calls something that may have effects or draw random numbers: torch.where runs both arms", ""
    scope = scope_of(ctx, at)

    def shown(e: cst.BaseExpression) -> bool:
        return number_evidence(ctx, e, scope)

    func = WHERE.name
    if (_same_constructor(a, b) or any(tensor_evidence(root, scope) for root in _like(a, shown) & _like(b, shown))) and (
        _made_without_grad(a) == _made_without_grad(b)
    ):
        func = "torch.where"
    elif not (_grad_safe(a) and _grad_safe(b)):
        return (
            f"`{ctx.code(a)}` and `{ctx.code(b)}` are not shown to be one tensor's shape and dtype, and an arm has a"
            " singular derivative: its zero gradient on the unselected side would turn into NaN"
        ), ""
    elif not (_tensor_arm(a, scope) or _tensor_arm(b, scope)) or any(_python_number(ctx, e, scope) for e in (a, b)):
        # gbfix_where would only run the branch as written: no edit worth a trial
        return f"`{ctx.code(a)}` or `{ctx.code(b)}` shows no sign of a tensor (a Python number stays one)", ""
    unbound = sorted(n for n in variable_names(a) | variable_names(b) if n not in temps and not bound_before(ctx, n, at))
    if unbound:
        return f"`{unbound[0]}` is not bound on both paths before the `if`", ""
    updated = [n for n in (name_of(a), name_of(b)) if n and mutated(scope, n, augmented=not in_place)]
    if updated:
        return f"`{updated[0]}` is updated in place: torch.where makes a new tensor", ""
    return None, func


def _made_without_grad(expr: cst.BaseExpression) -> bool:
    """`torch.zeros_like(x)`, `x.new_zeros(...)`, `x.detach()`: a tensor that never requires
    grad, of x's shape maybe. torch.where with the other arm would require grad where the
    branch's value did not (a backward that raised would run), so the select is the checked
    one, which runs the branch as written when the two differ there."""
    if not isinstance(expr, cst.Call):
        return False
    _, name = called(expr)
    return name in _LIKE or name in ("empty_like", "detach", "new_zeros", "new_ones", "new_full", "new_empty")


WHERE = piece("gbfix_where", '''\
def gbfix_where(cond, a, b):
    # Added by gbfix: `a if cond else b` without a Python test on a tensor. While
    # tracing, when cond holds one element and a and b are tensors of one shape,
    # dtype, device and gradient need, torch.where picks in the graph; otherwise
    # (torch.where would broadcast or promote) the branch runs as written.
    if (
        isinstance(cond, torch.Tensor) and isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
        and cond.numel() == 1 and a.shape == b.shape and a.dtype == b.dtype and a.device == b.device
        and a.requires_grad == b.requires_grad
    ):
        return torch.where(cond.reshape(()).bool(), a, b)
    return a if cond else b
''')


def _python_number(ctx: SiteContext, expr: cst.BaseExpression, scope: cst.CSTNode) -> bool:
    """A number literal, or a local name first bound to one (what an `if` that does not
    rebind it keeps, unless something between rebinds it: only a hint, to spare a trial)."""
    if isinstance(expr, (cst.Integer, cst.Float)):
        return True
    name = name_of(expr)
    if name is None or not isinstance(scope, cst.FunctionDef) or name in param_names(scope):
        return False
    values = [a.value for a in nodes(scope, cst.Assign) if any(name_of(t.target) == name for t in a.targets)]
    return bool(values) and isinstance(values[0], (cst.Integer, cst.Float))


# Calls whose derivative is finite everywhere: on torch.where's unselected arm a zero
# gradient times theirs stays zero (not log, sqrt, exp, norm, division by data).
_GRAD_SAFE_CALLS = (
    frozenset(_ELEMENTWISE) | frozenset(_LIKE) | SHAPE_VIEWS | CASTS | _BOOL_CALLS
    | words("unbind split chunk movedim swapaxes sum mean max min amax amin nansum softmax where zeros ones full matmul")
    | words("finfo iinfo")  # limits of a dtype: numbers, no derivative
)


def _tensor_arm(expr: cst.BaseExpression, scope: cst.CSTNode) -> bool:
    """Some sign that ``expr`` involves a tensor (torch.where would make a Python
    number one): a call of a tensor method, a matrix product, or a name the scope
    uses as a tensor or binds to a torch call."""
    if _used_as_tensors(expr) - {"self"} or contains(expr, cst.BinaryOperation, lambda n: isinstance(n.operator, cst.MatrixMultiply)):
        return True
    for name in variable_names(expr) - {"self"}:  # `self.f(...)` calls a method, not a tensor's
        if tensor_evidence(name, scope):
            return True
        bound = [a.value for a in nodes(scope, cst.Assign) if any(name_of(t.target) == name for t in a.targets)]
        if any(_tensor_call(v, scope) or _used_as_tensors(v) - {"self"} for v in bound):
            return True  # `pad = (1.0 - m.float()) * big`: arithmetic on a tensor method's result
    return False


def _tensor_call(value: cst.BaseExpression | None, scope: cst.CSTNode) -> bool:
    """A torch call, or a method returning a tensor of something the scope uses as one."""
    return isinstance(value, cst.Call) and (is_torch_call(value) or _method_of_tensor(value, scope))


def _method_of_tensor(call: cst.Call, scope: cst.CSTNode) -> bool:
    """`m.sum()`, `x.float()`: a method of something the scope uses as a tensor, of the
    kinds that return one (a reduction, an elementwise map, a cast, a view)."""
    recv, name = called(call)
    root = root_name(recv) if recv is not None else None
    kinds = FULL_REDUCTIONS | _ELEMENTWISE.keys() | CASTS | SHAPE_VIEWS
    return root is not None and name in kinds and tensor_evidence(root, scope)


def _grad_safe(expr: cst.BaseExpression) -> bool:
    """No operation in ``expr`` has a singular derivative."""
    for n in walk(expr):
        if isinstance(n, (cst.Lambda, cst.ListComp, cst.GeneratorExp, cst.DictComp, cst.SetComp)):
            return False
        if isinstance(n, cst.BinaryOperation) and not (_safe_operator(n) or isinstance(n.operator, cst.MatrixMultiply)):
            return False
        if isinstance(n, cst.Call) and called(n)[1] not in _GRAD_SAFE_CALLS:
            return False
    return True


def _assigned(suite: cst.BaseSuite, target: str) -> cst.BaseExpression | None:
    """``v`` when the block is exactly `target = v`."""
    small = single(suite)
    if small is None or not m.matches(small, m.Assign(targets=[m.AssignTarget(target=m.Name(target))])):
        return None
    return small.value


def _else_value(ctx: SiteContext, if_node: cst.If, target: str, func: str = "torch.where") -> cst.BaseExpression | None:
    """What ``target`` holds when the `if` test is false: its `else` value, the
    value the `elif` chain picks (as nested `torch.where`), or ``target`` itself."""
    orelse = if_node.orelse
    if orelse is None:
        return cst.Name(target) if bound_before(ctx, target, if_node) else None
    if isinstance(orelse, cst.Else):
        return _assigned(orelse.body, target)
    # An `elif` test now runs whenever the `if` test is false: it must be pure and
    # visibly a tensor (the break says nothing about it).
    value, rest = _assigned(orelse.body, target), _else_value(ctx, orelse, target, func)
    cond = tensor_cond(orelse.test, False) if pure(orelse.test) else None
    if value is None or rest is None or cond is None:
        return None
    return make_call(func, cond, value, rest)


_AUGMENTED: dict[type, type[cst.Add | cst.Subtract | cst.Multiply]] = {
    cst.AddAssign: cst.Add,
    cst.SubtractAssign: cst.Subtract,
    cst.MultiplyAssign: cst.Multiply,
}


def _name_assigns(suite: cst.BaseSuite, augmented: bool = False) -> list[cst.Assign] | None:
    """The block's statements when each is one `name = value` (``augmented``: or
    `name += value`, as `name = name + value`)."""
    if isinstance(suite, cst.IndentedBlock):
        if not all(isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1 for line in suite.body):
            return None
        smalls = [line.body[0] for line in suite.body]
    else:
        smalls = list(suite.body)
    out = []
    for sm in smalls:
        if augmented and isinstance(sm, cst.AugAssign) and isinstance(sm.target, cst.Name):
            op = _AUGMENTED.get(type(sm.operator))
            if op is None:
                return None
            value = cst.BinaryOperation(left=sm.target, operator=op(), right=sm.value)
            sm = cst.Assign(targets=[cst.AssignTarget(sm.target)], value=value)
        elif not m.matches(sm, m.Assign(targets=[m.AssignTarget(target=m.Name())])):
            return None
        out.append(sm)
    return out


# What may fail where an `if`'s tensor test is false: reductions without an identity and
# picks of one element (`t.any()` is false for an empty t), a move to a GPU.
_FAILS_WHERE_FALSE = TUPLE_WITH_DIM | words("amax amin argmax argmin select narrow cuda")


def _temporary_safe(expr: cst.BaseExpression) -> bool:
    """A temporary of an arm, now computed whatever the test: it may neither raise
    where the test is false nor bring a singular derivative into torch.where's
    unselected arm (``_grad_safe``): maps, casts and views of tensors and numbers
    (`pad = (1.0 - m[:, None].float()) * torch.finfo(x.dtype).min`), with no
    reduction that fails on an empty tensor and no subscript but slices, None and
    `...` (an index from data, or a first element, may not exist there)."""
    if not _grad_safe(expr) or contains(expr, cst.Call, lambda c: called(c)[1] in _FAILS_WHERE_FALSE):
        return False
    return all(
        isinstance(e.slice, cst.Slice) or isinstance(e.slice.value, cst.Ellipsis) or name_of(e.slice.value) == "None"
        for s in nodes(expr, cst.Subscript)
        for e in s.slice
    )


class BranchToWhere(BranchRecipe):
    """`if cond: x = a else: x = b` (or `a if cond else b`) -> torch.where(cond, a, b).

    An arm of several assignments (`if c: s = finfo.max - 1000; x = x.clamp(-s, s)`)
    becomes one `torch.where` per name bound before the `if`, in order (each
    later statement then sees the updated names, as in the original when `c`
    holds); names the arm binds that nothing outside it reads are its
    temporaries and are bound unconditionally.
    """

    name = "branch-to-where"
    summary = "replace a data-dependent `if` that picks a tensor by torch.where"
    in_place = False  # `x += v` is an update in place, not an assignment

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        found = site_branch(ctx)
        if found is None:
            return None
        node, test = found
        if isinstance(node, cst.IfExp):
            why, func, a, b = _select_arm(ctx, node, test, node.body, node.orelse, self.in_place)
            if why:
                raise Decline(why)
            where: cst.BaseExpression = make_call(func, test.tensor, a, b)
            if test.prefix is not None:  # `a if P and c else b` -> `where(c, a, b) if P else b`
                where = cst.IfExp(test=test.prefix, body=where, orelse=b) if test.kind == "and" else cst.IfExp(
                    test=test.prefix, body=a, orelse=where
                )
                where = where.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
                if isinstance(ctx.file.parent(node), (cst.Return, cst.Assign, cst.Arg)):
                    where = where.with_changes(lpar=[], rpar=[])
            self._plan = where.with_changes(lpar=node.lpar or where.lpar, rpar=node.rpar or where.rpar)
            return node
        body_smalls = nodes(node.body, (cst.Expr, cst.Assign, cst.AugAssign), nested=False)  # not a raise's exception
        effect = next((n for sm in body_smalls for n in walk(sm) if isinstance(n, cst.Call) and not pure_call(n)), None)
        if effect is not None:
            # said, since it is what blocks the fix (in a loop it even hides the call's own break)
            raise Decline(f"the `if` body calls `{ctx.code(effect)}`, which may have effects: torch.where runs both arms")
        assigns = _name_assigns(node.body, augmented=self.in_place)
        if assigns is None:
            return None
        if node.orelse is not None:
            if len(assigns) != 1:
                return None
            (assign,) = assigns
            target = assign.targets[0].target.value
            other = _else_value(ctx, node, target)
            if other is None or mutated(scope_of(ctx, node), target, augmented=not self.in_place):
                return None
            why, func, value, other_value = _select_arm(ctx, node, test, assign.value, other, self.in_place)
            if why:
                raise Decline(why)
            if func != "torch.where":  # the `elif` chain's selects are checked too
                other = other_value if other_value is not other else _else_value(ctx, node, target, func)
            smalls: list[cst.BaseSmallStatement] | None = [
                assign.with_changes(value=make_call(func, test.tensor, value, other))
            ]
        else:
            smalls = _where_steps(ctx, node, test, assigns, self.in_place)
            if smalls is None:
                return None
        self._plan = _replace_if(ctx, node, test, smalls)
        return node

    def rewrite(self, node: cst.CSTNode) -> Replacement | None:
        plan = super().rewrite(node)
        made = plan.nodes if isinstance(plan, cst.FlattenSentinel) else [plan] if isinstance(plan, cst.CSTNode) else []
        if any(name_of(n.func) == WHERE.name for m in made for n in nodes(m, cst.Call)):
            if taken(self.ctx, WHERE.name):
                raise Decline(f"the module binds {WHERE.name} to something else")
            self.need_helper(WHERE.name, WHERE.code)
        return plan


def _select_arm(
    ctx: SiteContext, node: cst.CSTNode, test: SplitTest, a: cst.BaseExpression, b: cst.BaseExpression, in_place: bool
) -> tuple[str | None, str, cst.BaseExpression, cst.BaseExpression]:
    """``_where_why`` for the arms ``a`` and ``b``, and the arms to select. An arm that
    divides by something that may be zero there (`s / n if n > 0 else z`, `if valid.any():
    loss = loss.sum() / valid.sum() else: ...`) divides by torch.where(c, n, 1) (the other
    arm: torch.where(c, 1, n)), as `x = x / n` does: the same divisor where that arm is
    selected, and no 1/0 whose NaN gradient the unselected arm would pass on. Its select
    is the checked one (an int over 1 is a float)."""
    divided = [(i, d) for i, d in enumerate(map(_unsafe_divisor, (a, b))) if d is not None] if pure(test.tensor) else []
    if len(divided) != 1:
        why, func = _where_why(ctx, node, a, b, in_place=in_place)
        return why, func, a, b
    ((i, d),) = divided
    arms = [a, b]
    quotient = cast(cst.BinaryOperation, arms[i])
    checked = list(arms)
    checked[i] = quotient.with_changes(operator=cst.Multiply())
    why, _ = _where_why(ctx, node, checked[0], checked[1], in_place=in_place)
    picks = (_bare(d), cst.Integer("1")) if i == 0 else (cst.Integer("1"), _bare(d))
    arms[i] = quotient.with_changes(right=make_call("torch.where", _bare(test.tensor), *picks))
    return why, WHERE.name, arms[0], arms[1]


def _where_steps(
    ctx: SiteContext, node: cst.If, test: SplitTest, assigns: list[cst.Assign], in_place: bool
) -> list[cst.BaseSmallStatement] | None:
    """The arm `if c: <assigns>` (no else) as straight-line statements."""
    scope = scope_of(ctx, node)
    outside = names_outside(scope, node.body)
    guarded = [a for a in assigns if bound_before(ctx, a.targets[0].target.value, node)]
    cond = test.tensor
    steps: list[cst.BaseSmallStatement] = []
    divided = any(_divisor(a.targets[0].target.value, a.value) is not None for a in guarded)
    # a temporary dividing by what may be zero where the test is false (`factor = s / n` under `n > 0`)
    divided = divided or (pure(cond) and any(_unsafe_divisor(a.value) is not None for a in assigns if a not in guarded))
    if len(guarded) > 1 or (divided and not isinstance(cond, cst.Name)):
        # One test for every `torch.where`, read before the arm changes what it reads.
        pred = fresh(scope, "pred", set())
        steps.append(cst.Assign(targets=[cst.AssignTarget(cst.Name(pred))], value=_bare(cond)))
        cond = cst.Name(pred)
    temps: set[str] = set()
    for a in assigns:
        target, value = a.targets[0].target.value, a.value
        if target in temps or not bound_before(ctx, target, node):
            # now bound whatever the test: only the arm may read it, and computing it must be harmless
            unbound_read = target not in temps and target in variable_names(value)  # `s += 1` with no s yet
            if target in outside or unbound_read:
                return None
            d = _unsafe_divisor(value) if divided else None
            # divided by torch.where(c, d, 1): d where the test holds, no 1/0 where it does not
            checked = cast(cst.BinaryOperation, value).with_changes(operator=cst.Multiply()) if d is not None else value
            if not (pure(value) and _temporary_safe(checked)):
                raise Decline(
                    f"`{target} = {ctx.code(value)}` would run whatever the test: it may have effects, fail"
                    " where the test is false (an empty tensor, an index from data) or have a singular derivative"
                )
            if not all(n in temps or bound_before(ctx, n, node) for n in variable_names(value)):
                return None
            temps.add(target)
            if d is not None:
                divisor = make_call("torch.where", cond, _bare(d), cst.Integer("1"))
                a = a.with_changes(value=cast(cst.BinaryOperation, value).with_changes(right=divisor))
            steps.append(a)
        elif (d := _divisor(target, value)) is not None:
            # `x = x / d`: x / torch.where(c, d, 1) is x / d where c holds and x itself where it
            # does not, and no division by what d holds there (its zero gradient times 1/0
            # would be NaN). `x * d` stands in for the checks; int x / 1 is a float, so the
            # select is always the checked one.
            why, _ = _where_why(ctx, node, cst.BinaryOperation(cst.Name(target), cst.Multiply(), d), cst.Name(target), temps, in_place)
            if why or mutated(scope, target, augmented=not in_place):
                raise Decline(why or f"`{target}` is updated in place: torch.where makes a new tensor")
            kept = cst.BinaryOperation(cst.Name(target), cst.Divide(), make_call("torch.where", cond, _bare(d), cst.Integer("1")))
            steps.append(a.with_changes(value=make_call(WHERE.name, cond, kept, cst.Name(target))))
        else:
            why, func = _where_why(ctx, node, value, cst.Name(target), temps, in_place)
            if why or mutated(scope, target, augmented=not in_place):
                raise Decline(why or f"`{target}` is updated in place: torch.where makes a new tensor")
            steps.append(a.with_changes(value=make_call(func, cond, value, cst.Name(target))))
    return steps if len(steps) > len(temps) else None


def _divisor(target: str, value: cst.BaseExpression) -> cst.BaseExpression | None:
    """``d`` when ``value`` is `target / d` with a divisor that may be zero (not a literal, not `+ eps`)."""
    d = _unsafe_divisor(value)
    return d if d is not None and name_of(cast(cst.BinaryOperation, value).left) == target else None


def _unsafe_divisor(value: cst.BaseExpression) -> cst.BaseExpression | None:
    """``d`` when ``value`` is `... / d` with a divisor that may be zero."""
    if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Divide) and not _safe_divisor(value.right):
        return value.right
    return None


class BranchToWhereUnchecked(BranchToWhere):
    """branch-to-where for `out += v` (as `out = out + v`, `out = gbfix_where(c, out + v, out)`):
    a MoE accumulation `out += x * sel.unsqueeze(-1).to(x.dtype) * p`."""

    name = "branch-to-where-inplace"
    # The in-place update of out's object becomes a new tensor: another name for
    # that object (a caller's, a list's) no longer sees the update. Nothing in
    # the source shows there is none.
    safety = "unsafe"
    summary = "branch-to-where for `x += v` (as `x = x + v`): the update makes a new tensor instead of changing x's in place"
    in_place = True

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        try:
            if BranchToWhere().anchor(ctx) is not None:
                return None  # the safe recipe's edit: not proposed again as an unsafe one
        except Decline:
            pass  # its reason holds here too, and the anchor below says it again
        return super().anchor(ctx)


# ---------------------------------------------------------------- if cond: return a; return b


def may_alias(expr: cst.BaseExpression) -> bool:
    """Whether ``expr`` may be an existing tensor or a view of one."""
    if isinstance(expr, cst.Name):
        return True
    if isinstance(expr, (cst.Attribute, cst.Subscript)):
        return may_alias(expr.value)
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute):
        return expr.func.attr.value in ALIASING and may_alias(expr.func.value)
    return False


def _branch_value(expr: cst.BaseExpression, fresh: Set[str] = frozenset()) -> cst.BaseExpression | None:
    """A returned value as a torch.cond branch body: tensors only, and fresh ones
    (torch.cond rejects a branch that returns an input or a view of it; ``fresh``: names
    the branch itself binds to new tensors)."""
    if isinstance(expr, cst.Tuple):
        values = [_branch_value(el.value, fresh) for el in expr.elements]
        if not values or any(v is None or isinstance(el, cst.StarredElement) for v, el in zip(values, expr.elements)):
            return None
        elements = [el.with_changes(value=v) for el, v in zip(expr.elements, values)]
        return expr.with_changes(elements=elements, lpar=expr.lpar or [cst.LeftParen()], rpar=expr.rpar or [cst.RightParen()])
    if isinstance(expr, (cst.BaseNumber, cst.BaseString, cst.List, cst.Dict, cst.Set, cst.Lambda)):
        return None
    if name_of(expr) in ("None", "True", "False"):
        return None
    if may_alias(expr) and root_name(expr) not in fresh:
        return cst.Call(func=cst.Attribute(value=expr, attr=cst.Name("clone")))
    return expr


def _returned(suite: cst.BaseSuite) -> cst.BaseExpression | None:
    ret = single(suite)
    return ret.value if isinstance(ret, cst.Return) else None


class BranchToCond(BranchRecipe):
    """`if cond: return a` + `else: return b` / `return b` -> return torch.cond(...);
    `if cond: return a` + the rest of the function -> the rest as a nested function,
    one branch of the torch.cond."""

    name = "branch-to-cond"
    requires = frozenset({"cond"})
    summary = "replace a data-dependent `if` between two returns, or before the rest of the function, by torch.cond"

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        found = _cond_test(ctx)
        if found is None:
            return None
        if_node, test = found
        a = _returned(if_node.body)
        if a is None:
            return None
        if isinstance(if_node.orelse, cst.Else):
            b, block, following = _returned(if_node.orelse.body), None, None
        elif if_node.orelse is None and not _is_elif(ctx, if_node):
            block = ctx.file.parent(if_node)
            if not isinstance(block, cst.IndentedBlock):
                return None
            i = block.body.index(if_node)
            following = block.body[i + 1] if i + 1 < len(block.body) else None
            b = _returned(cst.IndentedBlock(body=[following])) if following is not None else None
            if b is None and following is not None and test.prefix is None:
                return self._rest(ctx, if_node, test, a, block)
        else:
            return None
        if b is None or not (pure(a) and pure(b)):
            return None
        if not all(bound_before(ctx, n, if_node) for n in variable_names(a) | variable_names(b)):
            return None
        true_value, false_value = _branch_value(a), _branch_value(b)
        if true_value is None or false_value is None:
            return None
        branches = [cst.Lambda(params=cst.Parameters(), body=v) for v in (true_value, false_value)]
        ret: cst.BaseSmallStatement = cst.Return(value=make_call("torch.cond", test.tensor, *branches))
        if _without_grad_maybe(a) or _without_grad_maybe(b):
            return self._guarded(ctx, if_node, test, a, b, ret, following)
        if block is None or (test.prefix is not None and test.kind == "and"):
            # if/else, or `if P and c: return a` whose `return b` must stay for `not P`
            self._plan = _replace_if(ctx, if_node, test, ret)
            return if_node
        ret = fit(ret, ctx.file.span(if_node)[0][1])
        if test.prefix is not None:  # `if P or c: return a` -> `if P: return a`, then the cond
            line = following.with_changes(body=[ret])
            new = [if_node.with_changes(test=test.prefix), line]
        else:
            line = statement(ret, if_node, trailing_whitespace=following.trailing_whitespace)
            new = [line.with_changes(leading_lines=[*line.leading_lines, *following.leading_lines])]
        body = list(block.body)
        body[i : i + 2] = new
        self._plan = block.with_changes(body=body)
        return block

    def _guarded(
        self, ctx: SiteContext, if_node: cst.If, test: SplitTest, a: cst.BaseExpression, b: cst.BaseExpression,
        ret: cst.BaseSmallStatement, following: cst.BaseStatement | None,
    ) -> cst.CSTNode | None:
        """The two-return form where an arm's tensors may not require grad: the test as written
        under autograd, then the torch.cond (as the early-return form does)."""
        if test.prefix is not None or _is_elif(ctx, if_node):
            raise Decline(
                "an arm's tensors may not require grad and the test has a Python part: "
                "keeping the test under autograd takes a plain `if`"
            )
        block = ctx.file.parent(if_node)
        if not isinstance(block, cst.IndentedBlock):
            return None
        column = ctx.file.span(if_node)[0][1]
        line = cst.SimpleStatementLine(body=[fit(ret, column)])
        if isinstance(following, cst.SimpleStatementLine):
            line = line.with_changes(leading_lines=following.leading_lines, trailing_whitespace=following.trailing_whitespace)
        i = block.body.index(if_node)
        body = list(block.body)
        body[i : i + (1 if following is None else 2)] = [_grad_guard(if_node, a, b, column, _comments(if_node)), line]
        self._plan = block.with_changes(body=body)
        return block

    def _rest(
        self, ctx: SiteContext, if_node: cst.If, test: SplitTest, a: cst.BaseExpression, block: cst.IndentedBlock
    ) -> cst.CSTNode:
        """`if c: return a` + the rest of the function ending in `return b` ->
        `def otherwise(<names the rest rebinds>): <rest>` + `return torch.cond(c, lambda ...: a, otherwise, (...))`.
        The rest runs as it did when ``c`` is false; only names it rebinds that were bound
        before need passing (a nested function would make them its own locals)."""
        fn = ctx.file.parent(block)
        if not isinstance(fn, cst.FunctionDef) or fn.asynchronous is not None:
            raise Decline("the `if` is not at the top of a function: the code after it does not end the function")
        i = block.body.index(if_node)
        rest = list(block.body[i + 1 :])
        last = rest[-1]
        b = _returned(cst.IndentedBlock(body=[last]))
        if b is None:
            raise Decline("the function does not end in `return <value>`")
        why = _rest_why(rest)
        if why:
            raise Decline(why)
        why = _branch_effects(a, "the value the `if` returns")
        if why:
            raise Decline(why)
        if not all(bound_before(ctx, n, if_node) for n in variable_names(a)):
            raise Decline("the `if` returns a name not bound before it")
        true_value, false_value = _branch_value(a), _branch_value(b, _fresh_locals(rest))
        if true_value is None or false_value is None:
            raise Decline("an arm returns something other than tensors (torch.cond's branches return tensors)")
        outside = names_outside(fn, cst.IndentedBlock(body=rest)) | param_names(fn)
        bound_in_rest = set().union(*(_bound_names(st) for st in rest))
        passed = sorted(bound_in_rest & outside)
        if not all(bound_before(ctx, n, if_node) for n in passed):
            raise Decline("the rest rebinds a name that may be unbound at the `if`")
        name = fresh(fn, "otherwise", set())
        params = cst.Parameters(params=[cst.Param(cst.Name(n)) for n in passed])
        ret_b = _single_small(last)
        assert isinstance(ret_b, cst.Return)
        if not getattr(b, "lpar", None):  # `return a, b` keeps its look
            false_value = _bare(false_value)
        body = [*rest[:-1], last.with_changes(body=[ret_b.with_changes(value=false_value)])]
        lead = list(body[0].leading_lines)
        while lead and lead[0].comment is None:  # no blank line first in the new function
            lead.pop(0)
        nested = cst.FunctionDef(
            name=cst.Name(name), params=params,
            body=cst.IndentedBlock(body=[body[0].with_changes(leading_lines=lead), *body[1:]]),
            leading_lines=[cst.EmptyLine(indent=False)] if i else [],
        )
        call = make_call("torch.cond", test.tensor, cst.Lambda(params=params, body=true_value), cst.Name(name))
        if passed:  # the operands' tuple keeps its parentheses (make_call drops an argument's)
            call = call.with_changes(args=[*call.args, cst.Arg(cst.parse_expression(f"({', '.join(passed)},)"))])
        column = ctx.file.span(if_node)[0][1]
        ret = fit(cst.Return(value=call), column)
        line = statement(ret, if_node, trailing_whitespace=last.trailing_whitespace)
        line = line.with_changes(leading_lines=[cst.EmptyLine(indent=False), *line.leading_lines])
        new: list[cst.BaseStatement] = [nested, line]
        if _without_grad_maybe(a):
            otherwise = cst.Call(cst.Name(name), [cst.Arg(cst.Name(n)) for n in passed])
            guard = _grad_guard(if_node, a, otherwise, column, [cst.EmptyLine(indent=False)])
            new = [nested, guard, line.with_changes(leading_lines=list(line.leading_lines[1:]))]
        self._plan = block.with_changes(body=[*block.body[:i], *new])
        return block


_GRAD_NOTE = "# gbfix: as written under autograd: torch.cond's outputs would all require grad"


def _grad_guard(
    if_node: cst.If, a: cst.BaseExpression, b: cst.BaseExpression, column: int, lead: Sequence[cst.EmptyLine]
) -> cst.If:
    """`if torch.is_grad_enabled(): return a if <test> else b`: torch.cond's outputs all require
    grad when an input does, where an arm made without grad would not; with autograd on, the
    test stays as it was (and breaks as before)."""

    def shown(v: cst.BaseExpression) -> cst.BaseExpression:
        return v.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()]) if isinstance(v, cst.Tuple) and not v.lpar else v

    as_was = cst.IfExp(test=_bare(if_node.test), body=shown(a), orelse=shown(b))
    return cst.If(
        test=cst.parse_expression("torch.is_grad_enabled()"),
        body=cst.IndentedBlock(body=[cst.SimpleStatementLine(body=[_fit_value(cst.Return(value=as_was), column + 4)])]),
        leading_lines=[*lead, cst.EmptyLine(comment=cst.Comment(_GRAD_NOTE))],
    )


# torch functions that make a tensor of their own, which requires grad only when asked to
_FACTORIES = words("empty zeros ones full tensor as_tensor arange eye empty_like zeros_like ones_like full_like")


def _without_grad_maybe(expr: cst.BaseExpression) -> bool:
    """The early return's value may not require grad where the rest's does: a tensor made
    without grad (`x.new_zeros(...)`, `torch.empty(...)`), or one a function of the
    program makes (`no_match(dm)`), whose body is out of sight."""
    values = [el.value for el in expr.elements] if isinstance(expr, cst.Tuple) else [expr]
    for v in values:
        if not isinstance(v, cst.Call):
            continue
        recv, name = called(v)
        if _made_without_grad(v) or (is_torch_call(v) and name in _FACTORIES) or (recv is None and name not in ("min", "max", "abs")):
            return True
    return False


def _fit_value(small: cst.Return, column: int) -> cst.Return:
    """`return <a if c else b>` in parentheses when one line is too long, and its parts a line
    each when the inner line is too, as black lays it out."""
    code = cst.Module([]).code_for_node(small)
    value = small.value
    if column + len(code) <= _WIDTH or not isinstance(value, cst.IfExp):
        return small
    if column + 4 + len(cst.Module([]).code_for_node(value)) > _WIDTH:
        value = value.with_changes(
            whitespace_before_if=_newline("    "), whitespace_after_if=cst.SimpleWhitespace(" "),
            whitespace_before_else=_newline("    "), whitespace_after_else=cst.SimpleWhitespace(" "),
        )
    value = value.with_changes(
        lpar=[cst.LeftParen(whitespace_after=_newline("    "))], rpar=[cst.RightParen(whitespace_before=_newline(""))]
    )
    return small.with_changes(value=value, whitespace_after_return=cst.SimpleWhitespace(" "))


def _cond_test(ctx: SiteContext) -> tuple[cst.If, SplitTest] | None:
    """The site's `if` and its test; a test Dynamo broke on that reads only shapes
    (`len(sel) == 0` on a data-dependent selection) is the predicate as written: a
    Python bool in eager, a symbolic one while tracing, both of which torch.cond takes."""
    found = site_branch(ctx)
    if found is not None:
        if_found, test = found
        return (if_found, test) if isinstance(if_found, cst.If) else None
    if_node = _site_if(ctx)
    if isinstance(if_node, cst.If) and static(if_node.test) and contains(if_node.test, (cst.Call, cst.Attribute), _reads_size):
        return if_node, SplitTest(None, if_node.test, _bare(if_node.test))
    return None


def _reads_size(n: cst.Call | cst.Attribute) -> bool:
    if isinstance(n, cst.Attribute):
        return n.attr.value == "shape"
    return called(n)[1] in ("len", "size", "numel")


def _rest_why(rest: Sequence[cst.BaseStatement]) -> str | None:
    """Why the statements after the `if` cannot become a nested function that torch.cond
    traces as one branch: other exits, scope declarations, or effects outside it."""
    body = cst.IndentedBlock(body=list(rest))
    inner = {id(n) for d in nodes(body, (cst.FunctionDef, cst.ClassDef, cst.Lambda)) for n in walk(d) if n is not d}
    for n in walk(body):
        if id(n) in inner:
            continue
        if isinstance(n, cst.Return) and n is not _single_small(rest[-1]):
            return "the rest of the function returns in more than one place"
        if isinstance(n, (cst.Yield, cst.Await, cst.Global, cst.Nonlocal, cst.Del)):
            return "the rest of the function yields, awaits, deletes or declares names"
        if isinstance(n, (cst.AssignTarget, cst.AnnAssign, cst.AugAssign)) and isinstance(n.target, (cst.Subscript, cst.Attribute)):
            return "the rest of the function assigns into an object (torch.cond's branches may not mutate)"
    return _branch_effects(body, "the rest of the function")


def _branch_effects(node: cst.CSTNode, what: str) -> str | None:
    """Why ``node`` may not run in a torch.cond branch: effects (in-place ops, I/O, random
    draws), or a call of a method or submodule of `self`, which may have some in another
    mode than the one verified (a BatchNorm's running statistics in training)."""
    if not local_effects_only(node):
        return f"{what} has effects (in-place ops, I/O, random draws)"
    if contains(node, cst.Call, lambda c: root_name(c.func) == "self"):
        return f"{what} calls a method or submodule of `self`, whose effects are out of sight"
    return None


def _single_small(stmt: cst.BaseStatement) -> cst.BaseSmallStatement | None:
    return stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 else None


def _fresh_locals(rest: Sequence[cst.BaseStatement]) -> set[str]:
    """Names the rest binds only by `name = <a call or arithmetic that makes a new tensor>` (`torch.cat(...)`):
    returning one (or a view of it) does not alias the branch's inputs."""
    values: dict[str, list[cst.BaseExpression]] = {}
    other: set[str] = set()
    for st in rest:
        for n in walk(st):
            if isinstance(n, cst.Assign) and len(n.targets) == 1 and isinstance(n.targets[0].target, cst.Name):
                values.setdefault(n.targets[0].target.value, []).append(n.value)
            elif isinstance(n, (cst.AugAssign, cst.For, cst.WithItem, cst.AnnAssign, cst.Assign)):
                other |= _bound_names(n)
    made = (cst.Call, cst.BinaryOperation, cst.UnaryOperation)
    return {k for k, vs in values.items() if k not in other and all(isinstance(v, made) and not may_alias(v) for v in vs)}


# ---------------------------------------------------------------- if mask.any(): x = x.masked_fill(mask, v)

# Calls that keep every element of an all-False mask False (views, copies, indexing).
# Views that keep every element of the mask (not narrow/select, which drop some).
_MASK_VIEWS = (SHAPE_VIEWS - words("narrow select view_as reshape_as")) | words("contiguous detach")
# Methods whose values are drawn from their receiver's: all False where it is.
_MASK_PICKS = words("gather index_select take take_along_dim")


def _is_bool(expr: cst.BaseExpression, scope: cst.CSTNode) -> bool:
    """``expr`` is a boolean tensor by construction: a comparison, a boolean-valued
    call, `~` of one, or a name bound once to one."""
    if isinstance(expr, cst.Name):
        value = single_binding(scope, expr.value)
        return value is not None and not _storage_replaced(scope, expr.value) and _is_bool(value, scope)
    if isinstance(expr, cst.Comparison):
        return len(expr.comparisons) == 1 and isinstance(expr.comparisons[0].operator, COMPARISONS)
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.BitInvert):
        return _is_bool(expr.expression, scope)
    if isinstance(expr, cst.Call):
        recv, name = called(expr)
        return name in _BOOL_CALLS or (name == "bool" and recv is not None and not expr.args)
    return False


def _storage_replaced(scope: cst.CSTNode, name: str) -> bool:
    """`name.data = ...` or `name.set_(...)`: what could change the tensor's dtype in place
    (an update in place, `name[i] = v` included, keeps it)."""
    for n in walk(scope):
        if isinstance(n, cst.AssignTarget) and m.matches(n.target, m.Attribute(value=m.Name(name), attr=m.Name("data"))):
            return True
        if isinstance(n, cst.Call) and m.matches(n.func, m.Attribute(value=m.Name(name), attr=m.Name("set_"))):
            return True
    return False


def _any_of(test: cst.BaseExpression) -> cst.BaseExpression | None:
    """M when the test is `M.any()` / `torch.any(M)`, or `M.sum() > 0` / `!= 0` (the
    same test for the boolean M the callers require)."""
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        (c,) = test.comparisons
        zero = isinstance(c.comparator, cst.Integer) and c.comparator.value == "0"
        if zero and isinstance(c.operator, (cst.GreaterThan, cst.NotEqual)) and isinstance(test.left, cst.Call):
            recv, name = called(test.left)
            if name == "sum" and recv is not None and not test.left.args and not is_torch_call(test.left):
                return recv
        return None
    if not isinstance(test, cst.Call) or called(test)[1] != "any":
        return None
    if is_torch_call(test):
        return test.args[0].value if len(test.args) == 1 and not test.args[0].keyword and not test.args[0].star else None
    return called(test)[0] if not test.args else None


def _bound_names(stmt: cst.CSTNode) -> set[str]:
    """Names ``stmt`` (re)binds anywhere inside it."""
    out: set[str] = set()
    for n in walk(stmt):
        if isinstance(n, (cst.AssignTarget, cst.AugAssign, cst.AnnAssign, cst.NamedExpr, cst.For, cst.CompFor)):
            out.update(target_names(n.target))
        elif isinstance(n, cst.AsName):
            out.update(target_names(n.name))
    return out


def _flag_value(ctx: SiteContext, flag: str, at: cst.CSTNode) -> cst.BaseExpression | None:
    """The value of `flag = value`, the flag's only binding, when it is an earlier
    statement of the block holding ``at`` and nothing between them rebinds or
    mutates what the value reads (it still describes the tensors at ``at``)."""
    scope = scope_of(ctx, at)
    value = single_binding(scope, flag)
    stmt = at
    for anc in ctx.ancestors(at):
        if isinstance(anc, (cst.IndentedBlock, cst.Module)):
            block = anc
            break
        stmt = anc
    else:
        return None
    if value is None:
        return None
    body = list(block.body)
    first = next((i for i, b in enumerate(body) if any(n is value for n in walk(b))), None)
    if first is None or stmt not in body or first >= body.index(stmt):
        return None
    reads = variable_names(value)
    if any(_bound_names(b) & reads for b in body[first + 1 : body.index(stmt)]):
        return None
    return None if any(mutated(scope, n) for n in reads) else value


def _from_mask(expr: cst.BaseExpression, mask: cst.BaseExpression) -> bool:
    """``expr`` is ``mask``, or a view or indexing of it: all False when the mask is."""
    expr, mask = _bare(expr), _bare(mask)
    if expr.deep_equals(mask):
        return True
    if isinstance(expr, cst.Subscript):
        return _from_mask(expr.value, mask)
    if isinstance(expr, cst.Call):
        recv, name = called(expr)
        if recv is None or not _from_mask(recv, mask):
            return False
        if name in _MASK_VIEWS or name in _MASK_PICKS:
            return True
        # `m.scatter(dim, index, m)`: the mask's values put at other places of the mask
        args = expr.args
        return name == "scatter" and len(args) == 3 and not any(a.keyword or a.star for a in args) and _from_mask(args[2].value, mask)
    if isinstance(expr, cst.Comparison) and isinstance(mask, cst.Comparison) and len(expr.comparisons) == len(mask.comparisons) == 1:
        # `a[:, None] == 0` of the mask `a == 0`: a comparison with a number commutes
        # with indexing and views, so it is a view of the mask's values
        mine, theirs = expr.comparisons[0], mask.comparisons[0]
        return (
            type(mine.operator) is type(theirs.operator)
            and _fill_value(mine.comparator) and mine.comparator.deep_equals(theirs.comparator)
            and _from_mask(expr.left, mask.left)
        )
    return False


def _fill_value(expr: cst.BaseExpression) -> bool:
    """A Python number: `0.0`, `-1e4`, `float("-inf")`, `torch.finfo(x.dtype).min`
    (a tensor value would get a zero gradient instead of None)."""
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        return _fill_value(expr.expression)
    if isinstance(expr, (cst.Integer, cst.Float)) or name_of(expr) in ("True", "False"):
        return True
    if isinstance(expr, cst.Call) and name_of(expr.func) == "float" and len(expr.args) == 1:
        return isinstance(expr.args[0].value, cst.SimpleString)
    if isinstance(expr, cst.Attribute) and expr.attr.value in ("min", "max", "eps", "tiny"):
        inner = expr.value
        return isinstance(inner, cst.Call) and cst.Module([]).code_for_node(inner.func) in ("torch.finfo", "torch.iinfo")
    return isinstance(expr, cst.Attribute) and cst.Module([]).code_for_node(expr) in ("math.inf", "math.nan")


def _identity_when_clear(value: cst.BaseExpression, target: str, mask: cst.BaseExpression) -> bool:
    """``value`` equals ``target`` bit for bit, with the same gradient, when ``mask``
    (a boolean tensor) is all False:
    `target.masked_fill(m, v)` and `torch.where(m, torch.zeros_like(target), target)`
    fill nothing; `target * (1 - m.type_as(target))`
    and `target * (~m).type_as(target)` multiply by exact ones (m a view or index of
    ``mask``)."""
    value = _bare(value)
    if isinstance(value, cst.Call):
        recv, name = called(value)
        args = [a for a in value.args if not a.star]
        if len(args) != len(value.args) or any(a.keyword is not None for a in args):
            return False
        if name == "masked_fill" and is_torch_call(value) and len(args) == 3:
            recv, args = args[0].value, args[1:]
        if name == "masked_fill" and recv is not None and name_of(recv) == target and len(args) == 2:
            return _from_mask(args[0].value, mask) and pure(args[0].value) and _fill_value(args[1].value)
        if name == "where" and is_torch_call(value) and len(args) == 3 and name_of(args[2].value) == target:
            # `torch.where(m, torch.zeros_like(x), x)`: a fill of x's own dtype, so no promotion
            fill = args[1].value
            like = isinstance(fill, cst.Call) and is_torch_call(fill) and called(fill)[1] in _LIKE and fill.args
            if not like or name_of(fill.args[0].value) != target or not _args_ok(fill.args[1:], _LIKE[called(fill)[1]]):
                return False
            return _from_mask(args[0].value, mask) and pure(args[0].value) and all(_fill_value(a.value) for a in fill.args[1:])
        return False
    if not (isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Multiply)):
        return False
    for this, other in ((value.left, value.right), (value.right, value.left)):
        if name_of(this) == target and pure(other) and _ones_when_clear(_bare(other), target, mask):
            return True
    return False


def _ones_when_clear(expr: cst.BaseExpression, target: str, mask: cst.BaseExpression) -> bool:
    """`1 - m.type_as(target)` or `(~m).type_as(target)`: ones of the target's dtype
    when the mask is all False (an int 1 keeps the dtype; a float 1.0 would not for
    an integer target)."""
    def cast(e: cst.BaseExpression) -> cst.BaseExpression | None:
        e = _bare(e)
        if isinstance(e, cst.Call) and len(e.args) == 1 and not e.args[0].keyword:
            recv, name = called(e)
            arg = cst.Module([]).code_for_node(e.args[0].value)
            if recv is not None and (name == "type_as" and arg == target or name == "to" and arg == f"{target}.dtype"):
                return recv
        return None

    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Subtract):
        m_ = cast(expr.right)
        return isinstance(expr.left, cst.Integer) and expr.left.value == "1" and m_ is not None and _from_mask(m_, mask)
    m_ = cast(expr)
    while isinstance(m_, cst.Call) and called(m_)[1] in _MASK_VIEWS and called(m_)[0] is not None:
        m_ = called(m_)[0]  # a view of the inverted mask is all True too
    if m_ is None:
        return False
    m_ = _bare(m_)
    if isinstance(m_, cst.UnaryOperation) and isinstance(m_.operator, cst.BitInvert):
        return _from_mask(m_.expression, mask)
    return isinstance(m_, cst.Call) and called(m_)[1] == "logical_not" and not m_.args and _from_mask(called(m_)[0], mask)


def _finite_check(expr: cst.BaseExpression) -> str | None:
    """x when ``expr`` holds exactly when x has a NaN or an infinity:
    `not torch.isfinite(x).all()`, `not x.isfinite().all()`, `(~torch.isfinite(x)).any()`,
    `torch.isnan(x).any() or torch.isinf(x).any()` (or `|`)."""
    def tested(call: cst.BaseExpression, *names: str) -> str | None:
        if isinstance(call, cst.Call) and called(call)[1] in names:
            recv, _ = called(call)
            if is_torch_call(call) and len(call.args) == 1 and not call.args[0].keyword:
                return name_of(call.args[0].value)
            return name_of(recv) if recv is not None and not is_torch_call(call) and not call.args else None
        return None

    def reduced(call: cst.BaseExpression, how: str) -> cst.BaseExpression | None:
        if isinstance(call, cst.Call) and called(call)[1] == how and not call.args and called(call)[0] is not None:
            return _bare(called(call)[0])
        return None

    expr = _bare(expr)
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Not):
        inner = reduced(expr.expression, "all")
        return tested(inner, "isfinite") if inner is not None else None
    inner = reduced(expr, "any")
    if isinstance(inner, cst.UnaryOperation) and isinstance(inner.operator, cst.BitInvert):
        return tested(_bare(inner.expression), "isfinite")
    either = isinstance(expr, cst.BooleanOperation) and isinstance(expr.operator, cst.Or)
    if either or (isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.BitOr)):
        sides = [reduced(side, "any") for side in (expr.left, expr.right)]
        found = {tested(side, "isnan") for side in sides[:1]} | {tested(side, "isinf") for side in sides[1:]}
        swapped = {tested(side, "isinf") for side in sides[:1]} | {tested(side, "isnan") for side in sides[1:]}
        for names in (found, swapped):
            if len(names) == 1 and None not in names:
                return names.pop()
    return None


def _nan_to_num_of(value: cst.BaseExpression, target: str) -> bool:
    """`torch.nan_to_num(target, ...)` / `target.nan_to_num(...)` with number arguments:
    ``target`` itself, bit for bit and for gradients, when it is all finite."""
    value = _bare(value)
    if not isinstance(value, cst.Call) or called(value)[1] != "nan_to_num":
        return False
    args = list(value.args)
    if is_torch_call(value):
        if not args or args[0].keyword or name_of(args[0].value) != target:
            return False
        args = args[1:]
    elif name_of(called(value)[0]) != target:
        return False
    return all(not a.star and _fill_value(a.value) for a in args)


class BranchToGeneralPath(BranchRecipe):
    """`if M.any(): x = x.masked_fill(M, v)` -> `x = x.masked_fill(M, v)`: the general
    path, which leaves x as it is when the boolean mask M is all False; likewise
    `if not torch.isfinite(x).all(): x = torch.nan_to_num(x)`, and the conditional
    expression `x.masked_fill(M, v) if M.any() else x`. Values and gradients are
    the same by construction; not seen here is whether the update is valid for
    x at all (a mask that broadcasts x to a larger shape, a fill value x's dtype
    cannot hold): the original would then fail or change x's shape whenever it
    takes the branch, and the verifier's runs would show it."""

    name = "branch-to-general-path"
    summary = "drop an `if mask.any():` / `if not x.isfinite().all():` around an update that is then the identity (masked_fill, `x * (1 - mask)`, nan_to_num)"

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        found = site_branch(ctx)
        if found is None:
            return None
        node, test = found
        cond, negated = test.cond, False
        if isinstance(node, cst.IfExp):
            # `G if c else x`, or `x if not c else G` / `x if x.isfinite().all() else G`
            if isinstance(cond, cst.UnaryOperation) and isinstance(cond.operator, cst.Not):
                negated, cond = True, _bare(cond.expression)
            elif _finite_check(cst.UnaryOperation(operator=cst.Not(), expression=cond)) is not None:
                negated, cond = True, cst.UnaryOperation(operator=cst.Not(), expression=cond)
            kept, value = (node.body, node.orelse) if negated else (node.orelse, node.body)
            if name_of(kept) is None or not _general(ctx, node, cond, kept.value, value):
                return None
        else:
            assign = single(node.body)
            if node.orelse is not None or assign is None or not general_update(ctx, node, cond, assign):
                return None
        # G whatever c is: a Python part P still decides where c did not (with `and`,
        # G only under P; with `or`, x only under P), and `or` with G taken always goes.
        keep = test.prefix is not None and (test.kind == "and") != negated
        if isinstance(node, cst.IfExp):
            plan = node.with_changes(test=test.prefix) if keep else value
            self._plan = plan if keep or not node.lpar else plan.with_changes(lpar=node.lpar, rpar=node.rpar)
        else:
            self._plan = _replace_if(ctx, node, test if keep else replace(test, prefix=None), assign)
        return node


def general_update(ctx: SiteContext, at: cst.CSTNode, cond: cst.BaseExpression, small: cst.BaseSmallStatement) -> bool:
    """``small`` is `x = <update of x>` in the body of the `if` at ``at`` that leaves x
    as it is, bit for bit, where ``cond`` (the tensor test) is false: run whatever the
    test says, it changes nothing there (branch-to-general-path's updates; report-if
    keeps such updates beside its reports)."""
    if not m.matches(small, m.Assign(targets=[m.AssignTarget(target=m.Name())])):
        return False
    assign = cast(cst.Assign, small)
    return _general(ctx, at, cond, cast(cst.Name, assign.targets[0].target).value, assign.value)


def _general(ctx: SiteContext, at: cst.CSTNode, cond: cst.BaseExpression, target: str, value: cst.BaseExpression) -> bool:
    """`target = value` under the test at ``at`` is the identity where ``cond`` is false."""
    if not bound_before(ctx, target, at) or mutated(scope_of(ctx, at), target):
        return False  # the general path makes a new tensor where the original kept x itself
    if not all(bound_before(ctx, n, at) for n in variable_names(value)):
        return False
    if isinstance(cond, cst.Name):  # a flag: `has_pads = M.any()` earlier in the block
        flag = _flag_value(ctx, cond.value, at)
        if flag is None:
            return False
        cond = flag
    if _finite_check(cond) == target:
        return _nan_to_num_of(value, target)
    mask = _any_of(cond)
    return mask is not None and pure(mask) and _is_bool(mask, scope_of(ctx, at)) and _identity_when_clear(value, target, mask)


# ---------------------------------------------------------------- if c: x = None / return None


class BranchDropShortcut(BranchRecipe):
    """`if (mask == 1).all(): mask = None` / `if c: return None` -> removed, and
    `mask if has_pads else None` -> `mask`: the general path runs with the value
    instead of None."""

    name = "branch-drop-shortcut"
    # None and a tensor cannot meet in torch.where or torch.cond; what follows must
    # treat the value as it treats None (an all-ones mask adds 0), which only the
    # verifier's comparison of outputs can tell.
    safety = "unsafe"
    summary = "drop an `if <tensor>: x = None` / `return None` shortcut: the general path runs (equal only if it treats the value as None)"

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        found = site_branch(ctx)
        if found is not None and isinstance(found[0], cst.IfExp):
            return self._expression(*found)
        if found is None or not isinstance(found[0], cst.If) or found[0].orelse is not None or _is_elif(ctx, found[0]):
            return None
        node, test = found
        small = single(node.body)
        block = ctx.file.parent(node)
        if small is None or not isinstance(block, cst.IndentedBlock) or len(block.body) < 2 or not pure(test.cond):
            return None
        if isinstance(small, cst.Return):
            if small.value is not None and name_of(small.value) != "None" or block.body[-1] is node:
                return None
        elif m.matches(small, m.Assign(targets=[m.AssignTarget(target=m.Name())], value=m.Name("None"))):
            if not bound_before(ctx, small.targets[0].target.value, node):
                return None
        else:
            return None
        # `if P or c:` keeps `if P:`; `if P and c:` goes with its test
        self._plan = node.with_changes(test=test.prefix) if test.kind == "or" and test.prefix else cst.RemovalSentinel.REMOVE
        return node

    def _expression(self, node: cst.IfExp, test: SplitTest) -> cst.CSTNode | None:
        """`v if c else None` / `None if c else v` -> `v`; a Python part of the test keeps
        its own choice (`v if P and c else None` -> `v if P else None`)."""
        none_when_true = name_of(node.body) == "None"
        value = node.orelse if none_when_true else node.body
        if name_of(value) == "None" or (not none_when_true and name_of(node.orelse) != "None"):
            return None
        if not (pure(value) and pure(test.cond)):
            return None
        # The tensor part decides only while the Python part leaves the choice open:
        # with `and` when P holds, with `or` when it does not.
        keep = test.prefix is not None and (test.kind == "and") != none_when_true
        plan = node.with_changes(test=test.prefix) if keep else value
        self._plan = plan.with_changes(lpar=node.lpar, rpar=node.rpar) if node.lpar else plan
        return node


RECIPES = (BranchToCheck, BranchToGeneralPath, BranchToWhere, BranchToCond, BranchToWhereUnchecked, BranchDropShortcut)
