"""GB0170: an `if` on a tensor's value. Rewrite the branch into compiled control flow.

    if cond: raise E("msg")             -> torch._assert_async(torch.logical_not(cond), "E: msg")
    if cond: x = a  [elif/else: x = b]  -> x = torch.where(cond, a, b)        (b defaults to x)
    a if cond else b                    -> torch.where(cond, a, b)
    if cond: return a  (else:) return b -> return torch.cond(cond, lambda: a, lambda: b)

Dynamo reports the `if` test (or, when the body returns or raises, the whole
`if`). A leading Python part of an `and` chain (`self.training and x.mean() > t`)
stays an ordinary `if` around the rewrite. Everything here is syntactic, so each
recipe declines whatever it cannot prove equivalent; shapes and dtypes it cannot
see are left to the verifier, which compares outputs.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m

from gbfix.recipes.base import Recipe, Replacement, SiteContext
from gbfix.recipes.tree import contains, param_names, variable_names, walk

_WIDTH = 88  # longer generated calls get one argument a line, as black would lay them out
# Calls that return a boolean tensor: a test made of them needs no proof that it is a tensor.
_BOOL_CALLS = frozenset(
    "any all isnan isinf isfinite isneginf isposinf isreal logical_and logical_or logical_not"
    " logical_xor eq ne gt ge lt le greater greater_equal less less_equal".split()
)
# Reductions over all elements: a 0-dim tensor, usable as a scalar operand.
_REDUCTIONS = frozenset("sum mean max min amax amin norm std var prod nansum nanmean".split())
# Calls that are never pure: randomness, host syncs, I/O, logging, container mutation.
IMPURE_CALLS = frozenset(
    "bernoulli multinomial rand randn randint randperm rand_like randn_like randint_like normal"
    " poisson dropout dropout1d dropout2d dropout3d alpha_dropout feature_alpha_dropout rrelu"
    " gumbel_softmax empty empty_like empty_strided manual_seed seed item tolist numpy backward"
    " register_hook retain_grad append extend insert pop popleft remove clear update setdefault"
    " discard write writelines flush print info debug warning warn error critical exception"
    " sample rsample shuffle choice send throw close step zero_grad".split()
)
_PURE_BUILTINS = frozenset({"abs", "min", "max", "len"})
# Elementwise maps that keep their input's shape and dtype and have a finite
# gradient everywhere: `torch.where` evaluates both arms, and the unselected one
# still gets a zero gradient, which turns into NaN through a singular derivative.
_ELEMENTWISE = {
    "abs": (), "neg": (), "negative": (), "relu": (), "sigmoid": (), "tanh": (), "sign": (),
    "sgn": (), "round": ("decimals",), "floor": (), "ceil": (), "trunc": (), "frac": (),
    "square": (), "clone": (), "contiguous": (), "clamp": ("min", "max"),
    "clip": ("min", "max"), "clamp_min": (), "clamp_max": (), "masked_fill": ("mask", "value"),
    "nan_to_num": ("nan", "posinf", "neginf"), "add": ("alpha",), "sub": ("alpha",), "mul": (),
}
_LIKE = {"zeros_like": (), "ones_like": (), "full_like": ("fill_value",)}  # torch.*_like(x, ...)
# Methods that may return a view of their receiver; torch.cond refuses branch outputs that alias inputs.
_VIEWS = frozenset(
    "view view_as reshape reshape_as transpose permute t squeeze unsqueeze expand expand_as narrow"
    " select unflatten flatten contiguous detach to float half double bfloat16 long int bool type_as"
    " unbind split chunk movedim swapaxes".split()
)


def name_of(expr: cst.BaseExpression) -> str | None:
    return expr.value if isinstance(expr, cst.Name) else None


def called(call: cst.Call) -> tuple[cst.BaseExpression | None, str | None]:
    """(receiver, name) of `recv.name(...)`, or (None, name) of `name(...)`."""
    if isinstance(call.func, cst.Attribute):
        return call.func.value, call.func.attr.value
    return None, name_of(call.func)


def _root(expr: cst.BaseExpression) -> str | None:
    """`x` for `x`, `x.a.b`, `x[i]`, `x.f().g`: the name an access chain starts from."""
    while isinstance(expr, (cst.Attribute, cst.Subscript, cst.Call)):
        expr = expr.func if isinstance(expr, cst.Call) else expr.value
    return name_of(expr)


def _is_torch_call(call: cst.Call) -> bool:
    return isinstance(call.func, cst.Attribute) and name_of(call.func.value) == "torch"


def _bare(expr: cst.BaseExpression) -> cst.BaseExpression:
    """Without its own parentheses, for use as a call argument."""
    return expr.with_changes(lpar=[], rpar=[]) if getattr(expr, "lpar", None) else expr


def make_call(func: str, *args: cst.BaseExpression) -> cst.Call:
    return cst.Call(func=cst.parse_expression(func), args=[cst.Arg(_bare(a)) for a in args])


# ---------------------------------------------------------------- purity


def _pure_call(call: cst.Call) -> bool:
    recv, name = called(call)
    if name is None or name in IMPURE_CALLS or (name.endswith("_") and not name.startswith("__")):
        return False  # in-place ops end in `_`
    if recv is None:
        return name in _PURE_BUILTINS
    # `self.f(...)` runs a method or submodule whose body is out of sight.
    return name_of(recv) != "self" and not any(a.keyword is not None and a.keyword.value == "out" for a in call.args)


def pure(expr: cst.CSTNode) -> bool:
    """No side effects and no randomness: safe to evaluate when the original did not."""
    for n in walk(expr):
        if isinstance(n, (cst.NamedExpr, cst.Await, cst.Yield, cst.Lambda, cst.FormattedString)):
            return False
        if isinstance(n, (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)):
            return False
        if isinstance(n, cst.Call) and not _pure_call(n):
            return False
    return True


# ---------------------------------------------------------------- conditions


def and_operands(expr: cst.BaseExpression) -> list[cst.BaseExpression]:
    if isinstance(expr, cst.BooleanOperation) and isinstance(expr.operator, cst.And) and not expr.lpar:
        return [*and_operands(expr.left), *and_operands(expr.right)]
    return [expr]


def _has_call(expr: cst.CSTNode) -> bool:
    return contains(expr, (cst.Call, cst.Subscript))


def _tensor_cond(expr: cst.BaseExpression, known: bool, path: set[int]) -> cst.BaseExpression | None:
    """``expr`` as a tensor expression with the same truth value, or None.

    ``known``: the break proves ``expr`` is a tensor. Of the operands of
    `and`/`or`, only the one holding the break (``path``: ids of the break node
    and its ancestors) is known to be one: Dynamo breaks on the first tensor
    operand, so those before it were Python values. The others must show they
    are tensors by their shape (a comparison involving a call, or a
    boolean-valued call).
    """
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Not):
        inner = _tensor_cond(expr.expression, known, path)
        return inner and make_call("torch.logical_not", inner)
    if isinstance(expr, cst.BooleanOperation):
        # Python short-circuits; the tensor form evaluates both sides, so both must be pure.
        left = _tensor_cond(expr.left, id(expr.left) in path, path)
        right = _tensor_cond(expr.right, id(expr.right) in path, path)
        if left is None or right is None or not pure(expr):
            return None
        op = "and" if isinstance(expr.operator, cst.And) else "or"
        return make_call(f"torch.logical_{op}", left, right)
    if isinstance(expr, cst.Comparison):
        ops = (cst.LessThan, cst.GreaterThan, cst.LessThanEqual, cst.GreaterThanEqual, cst.Equal, cst.NotEqual)
        if len(expr.comparisons) != 1 or not isinstance(expr.comparisons[0].operator, ops):
            return None  # chained `a < t < b` is an `and`; `is` / `in` are not elementwise
        return expr if known or _has_call(expr) else None
    if known:
        return expr
    if isinstance(expr, cst.Call) and called(expr)[1] in _BOOL_CALLS:
        return expr
    return None


@dataclass(frozen=True)
class SplitTest:
    """An `if` test split into a Python prefix that stays an `if`, and a tensor condition."""

    prefix: cst.BaseExpression | None
    cond: cst.BaseExpression  # the tensor part as written
    tensor: cst.BaseExpression  # the same as a tensor expression


def _split_test(if_node: cst.If | cst.IfExp, at: cst.CSTNode, ctx: SiteContext) -> SplitTest | None:
    ops = and_operands(if_node.test)
    inside = [i for i, op in enumerate(ops) if op is at or op in ctx.ancestors(at)]
    if inside:
        k = inside[0]
    else:  # the break covers the whole `if`: Python operands are the leading ones without calls
        k = next((i for i, op in enumerate(ops) if _has_call(op)), len(ops))
    if k == len(ops) or (k and isinstance(if_node, cst.IfExp)):
        return None
    rest = ops[k:]
    cond = rest[0]
    for op in rest[1:]:
        cond = cst.BooleanOperation(left=cond, operator=cst.And(), right=op)
    tensor = _tensor_cond(cond, True, {id(n) for n in (at, *ctx.ancestors(at))})
    if tensor is None:
        return None
    prefix = None
    if k:
        prefix = ops[0]
        for op in ops[1:k]:
            prefix = cst.BooleanOperation(left=prefix, operator=cst.And(), right=op)
    return SplitTest(prefix, cond, tensor)


def site_branch(ctx: SiteContext) -> tuple[cst.If | cst.IfExp, SplitTest] | None:
    """The `if` (or conditional expression) whose test the break is in."""
    node = ctx.node
    if isinstance(node, (cst.If, cst.IfExp)):
        found = node
    else:
        found, prev = None, node
        for anc in ctx.ancestors():
            if isinstance(anc, (cst.If, cst.IfExp)):
                found = anc if prev is anc.test else None
                break
            if isinstance(anc, (cst.BaseStatement, cst.BaseSmallStatement, cst.Lambda, cst.BaseSuite)):
                break
            prev = anc
        if found is None:
            return None
    test = _split_test(found, node, ctx)
    return (found, test) if test else None


# ---------------------------------------------------------------- scope


def target_names(target: cst.BaseExpression) -> Iterator[str]:
    if isinstance(target, cst.Name):
        yield target.value
    elif isinstance(target, (cst.Tuple, cst.List)):
        for el in target.elements:
            yield from target_names(el.value)
    elif isinstance(target, cst.StarredElement):
        yield from target_names(target.value)


def _binds(stmt: cst.CSTNode, name: str) -> bool:
    """Whether ``stmt`` always binds ``name`` when it completes."""
    if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
        return stmt.name.value == name
    if not isinstance(stmt, cst.SimpleStatementLine):
        return False  # bindings inside if/for/try/with may not happen
    for small in stmt.body:
        if isinstance(small, cst.Assign) and any(name in target_names(t.target) for t in small.targets):
            return True
        if isinstance(small, (cst.AnnAssign, cst.AugAssign)) and name_of(small.target) == name:
            return not isinstance(small, cst.AnnAssign) or small.value is not None
        if isinstance(small, (cst.Import, cst.ImportFrom)) and not isinstance(small.names, cst.ImportStar):
            for alias in small.names:
                bound = alias.asname.name if alias.asname else alias.name
                if cst.Module([]).code_for_node(bound).split(".")[0] == name:
                    return True
    return False


def bound_before(ctx: SiteContext, name: str, node: cst.CSTNode) -> bool:
    """Whether ``name`` is certainly bound when ``node`` runs: a parameter, an
    unconditional assignment earlier in an enclosing block, a loop or `with`
    target around it, a module-level binding, or a builtin."""
    child, in_function = node, False
    for anc in ctx.ancestors(node):
        if isinstance(anc, (cst.IndentedBlock, cst.Module)):
            if isinstance(anc, cst.Module) and in_function:
                if any(_binds(s, name) for s in anc.body):
                    return True
            elif not (in_function and isinstance(ctx.file.parent(anc), cst.ClassDef)):
                for stmt in anc.body:
                    if stmt is child:
                        break
                    if _binds(stmt, name):
                        return True
        elif isinstance(anc, cst.FunctionDef):
            if name in param_names(anc):
                return True
            in_function = True
        elif isinstance(anc, cst.For) and child is anc.body and name in target_names(anc.target):
            return True
        elif isinstance(anc, cst.With) and child is anc.body:
            if any(it.asname and name in target_names(it.asname.name) for it in anc.items):
                return True
        child = anc
    return name in dir(builtins)


def scope_of(ctx: SiteContext, node: cst.CSTNode) -> cst.CSTNode:
    return ctx.enclosing(cst.FunctionDef, node=node) or ctx.module


def mutated(scope: cst.CSTNode, name: str) -> bool:
    """Whether the scope mutates ``name``'s object in place or declares it global.

    The rewrites bind a new tensor where the original kept the old object, so
    an in-place update after them would stop reaching the original object.
    """
    for n in walk(scope):
        if isinstance(n, (cst.Global, cst.Nonlocal)) and any(name_of(a.name) == name for a in n.names):
            return True
        if isinstance(n, cst.AugAssign) and _root(n.target) == name:
            return True
        if isinstance(n, (cst.AssignTarget, cst.AnnAssign)) and isinstance(n.target, (cst.Subscript, cst.Attribute)):
            if _root(n.target) == name:
                return True
        if isinstance(n, cst.Call):
            recv, fn = called(n)
            in_place = fn is not None and fn.endswith("_") and not fn.startswith("__")
            if in_place and (recv is not None and _root(recv) == name or any(name_of(a.value) == name for a in n.args)):
                return True
            if any(a.keyword is not None and a.keyword.value == "out" and name_of(a.value) == name for a in n.args):
                return True
    return False


# ---------------------------------------------------------------- statements


def single(suite: cst.BaseSuite) -> cst.BaseSmallStatement | None:
    """The one small statement a block holds, or None."""
    body = suite.body
    if isinstance(suite, cst.IndentedBlock):
        if len(body) != 1 or not isinstance(body[0], cst.SimpleStatementLine):
            return None
        body = body[0].body
    return body[0] if len(body) == 1 else None


def _is_elif(ctx: SiteContext, if_node: cst.If) -> bool:
    parent = ctx.file.parent(if_node)
    return isinstance(parent, cst.If) and parent.orelse is if_node


def _comments(if_node: cst.If) -> list[cst.EmptyLine]:
    """The comments around the `if` line and its one-statement body, so the
    statement that replaces them keeps them."""
    lines = list(if_node.leading_lines)
    body = if_node.body
    header = body.header if isinstance(body, cst.IndentedBlock) else body.trailing_whitespace
    if header.comment is not None:
        lines.append(cst.EmptyLine(comment=header.comment))
    if isinstance(body, cst.IndentedBlock):
        lines += body.body[0].leading_lines
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


def _replace_if(ctx: SiteContext, if_node: cst.If, test: SplitTest, small: cst.BaseSmallStatement) -> Replacement:
    """Put ``small`` where the `if` was: inside `if <prefix>:` when there is one,
    in an `else:` when the `if` was an `elif`, else as a plain statement."""
    nested = test.prefix is not None or _is_elif(ctx, if_node)
    small = fit(small, ctx.file.span(if_node)[0][1] + 4 * nested)
    if test.prefix is not None:
        body = if_node.body
        if isinstance(body, cst.IndentedBlock):
            line = body.body[0].with_changes(body=[small])
            return if_node.with_changes(test=test.prefix, body=body.with_changes(body=[line]))
        return if_node.with_changes(test=test.prefix, body=body.with_changes(body=[small]))
    if _is_elif(ctx, if_node):
        inner = _comments(if_node)[len(if_node.leading_lines) :]
        line = statement(small, if_node, leading_lines=inner)
        return cst.Else(body=cst.IndentedBlock(body=[line]), leading_lines=if_node.leading_lines)
    return statement(small, if_node)


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


def _scalar(expr: cst.BaseExpression) -> bool:
    """A number or a 0-dim value: broadcasts against x without changing its shape."""
    if isinstance(expr, (cst.Integer, cst.Float, cst.Name, cst.Attribute)):
        return True
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, (cst.Minus, cst.Plus)):
        return _scalar(expr.expression)
    if isinstance(expr, cst.BinaryOperation):
        return _scalar(expr.left) and _scalar(expr.right) and _safe_operator(expr)
    if isinstance(expr, cst.Call):
        recv, name = called(expr)
        return recv is not None and name in _REDUCTIONS and not expr.args
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


def _args_ok(rest: Sequence[cst.Arg], keywords: tuple[str, ...]) -> bool:
    return all(
        _scalar(a.value) and not a.star and (a.keyword is None or a.keyword.value in keywords) for a in rest
    )


def _like(expr: cst.BaseExpression) -> set[str]:
    """The names x such that ``expr`` has x's shape and dtype when x is a tensor
    and the other names are scalars (an elementwise function of x and scalars)."""
    if isinstance(expr, cst.Name):
        return set() if expr.value in ("True", "False", "None") else {expr.value}
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, (cst.Minus, cst.Plus)):
        return _like(expr.expression)
    if isinstance(expr, cst.BinaryOperation) and _safe_operator(expr):
        left, right = _like(expr.left), _like(expr.right)
        out = left & right
        if _scalar(expr.right):
            out |= left
        if _scalar(expr.left) and not isinstance(expr.operator, (cst.Divide, cst.Power)):
            out |= right
        return out
    if isinstance(expr, cst.Call):
        recv, name = called(expr)
        if _is_torch_call(expr):
            if name == "where" and len(expr.args) == 3 and not any(a.keyword for a in expr.args):
                # what this recipe writes: an `elif` chain folds into nested wheres
                return _like(expr.args[1].value) & _like(expr.args[2].value)
            if not expr.args or expr.args[0].keyword is not None:
                return set()
            first, rest = expr.args[0].value, expr.args[1:]
            if name in _LIKE and _args_ok(rest, _LIKE[name]) and isinstance(first, cst.Name):
                return {first.value}
            if name in _ELEMENTWISE and _args_ok(rest, _ELEMENTWISE[name]):
                return _like(first)
        elif recv is not None and name in _ELEMENTWISE and _args_ok(expr.args, _ELEMENTWISE[name]):
            return _like(recv)
        elif recv is not None and name == "masked_fill" and len(expr.args) == 2 and _args_ok(expr.args[1:], ()):
            # The mask must broadcast to the receiver, so the result has the
            # receiver's shape and dtype whatever the mask expression is.
            if expr.args[0].keyword is None and not expr.args[0].star:
                return _like(recv)
    return set()


def tensor_evidence(name: str, scope: cst.CSTNode) -> bool:
    """Whether the scope uses ``name`` as a tensor (`name.method(...)` or
    `torch.f(name, ...)`): arithmetic alone would also fit a Python number,
    which torch.where would turn into a tensor."""
    for n in walk(scope):
        if isinstance(n, cst.Call):
            recv, _ = called(n)
            if _is_torch_call(n) and n.args and name_of(n.args[0].value) == name:
                return True
            if recv is not None and name_of(recv) == name:
                return True
    return False


def _same_constructor(a: cst.BaseExpression, b: cst.BaseExpression) -> bool:
    """`torch.tensor(p, dtype=D, ...)` on both arms with the same keywords and an
    explicit dtype: two tensors of one dtype. (Phi-3's long/short RoPE factors.)
    Their shapes come from the data; arms of different lengths would broadcast
    or fail, which changes the program's outputs and the verifier sees that."""
    calls = [e for e in (a, b) if isinstance(e, cst.Call) and _is_torch_call(e) and called(e)[1] == "tensor"]
    if len(calls) != 2:
        return False
    (pa, *ka), (pb, *kb) = calls[0].args, calls[1].args
    if pa.keyword is not None or pb.keyword is not None or pa.star or pb.star:
        return False
    keywords = [k.keyword.value for k in ka if k.keyword is not None]
    same = len(ka) == len(kb) and all(x.deep_equals(y) for x, y in zip(ka, kb))
    return same and len(keywords) == len(ka) and "dtype" in keywords


def _where_ok(ctx: SiteContext, at: cst.CSTNode, test: SplitTest, a: cst.BaseExpression, b: cst.BaseExpression) -> bool:
    """Both arms of `torch.where(cond, a, b)` are evaluated, broadcast and promoted:
    they must be pure, bound, and of one tensor's shape and dtype."""
    if not (pure(a) and pure(b)):
        return False
    scope = scope_of(ctx, at)
    if not (_same_constructor(a, b) or any(tensor_evidence(root, scope) for root in _like(a) & _like(b))):
        return False
    if not all(bound_before(ctx, n, at) for n in variable_names(a) | variable_names(b)):
        return False
    return not any(mutated(scope, n) for n in (name_of(a), name_of(b)) if n)


def _assigned(suite: cst.BaseSuite, target: str) -> cst.BaseExpression | None:
    """``v`` when the block is exactly `target = v`."""
    small = single(suite)
    if small is None or not m.matches(small, m.Assign(targets=[m.AssignTarget(target=m.Name(target))])):
        return None
    return small.value


def _else_value(ctx: SiteContext, if_node: cst.If, target: str) -> cst.BaseExpression | None:
    """What ``target`` holds when the `if` test is false: its `else` value, the
    value the `elif` chain picks (as nested `torch.where`), or ``target`` itself."""
    orelse = if_node.orelse
    if orelse is None:
        return cst.Name(target) if bound_before(ctx, target, if_node) else None
    if isinstance(orelse, cst.Else):
        return _assigned(orelse.body, target)
    # An `elif` test now runs whenever the `if` test is false: it must be pure and
    # visibly a tensor (the break says nothing about it).
    value, rest = _assigned(orelse.body, target), _else_value(ctx, orelse, target)
    cond = _tensor_cond(orelse.test, False, set()) if pure(orelse.test) else None
    if value is None or rest is None or cond is None:
        return None
    return make_call("torch.where", cond, value, rest)


class BranchToWhere(BranchRecipe):
    """`if cond: x = a else: x = b` (or `a if cond else b`) -> torch.where(cond, a, b)."""

    name = "branch-to-where"
    summary = "replace a data-dependent `if` that picks a tensor by torch.where"

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        found = site_branch(ctx)
        if found is None:
            return None
        node, test = found
        if isinstance(node, cst.IfExp):
            if not _where_ok(ctx, node, test, node.body, node.orelse):
                return None
            self._plan = make_call("torch.where", test.tensor, node.body, node.orelse).with_changes(
                lpar=node.lpar, rpar=node.rpar
            )
            return node
        assign = single(node.body)
        if assign is None or not m.matches(assign, m.Assign(targets=[m.AssignTarget(target=m.Name())])):
            return None
        target = assign.targets[0].target.value
        if node.orelse is not None and test.prefix is not None:
            return None
        other = _else_value(ctx, node, target)
        if other is None:
            return None
        if not _where_ok(ctx, node, test, assign.value, other) or mutated(scope_of(ctx, node), target):
            return None
        where = make_call("torch.where", test.tensor, assign.value, other)
        self._plan = _replace_if(ctx, node, test, assign.with_changes(value=where))
        return node


# ---------------------------------------------------------------- if cond: return a; return b


def _may_alias(expr: cst.BaseExpression) -> bool:
    """Whether ``expr`` may be an existing tensor or a view of one."""
    if isinstance(expr, cst.Name):
        return True
    if isinstance(expr, (cst.Attribute, cst.Subscript)):
        return _may_alias(expr.value)
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute):
        return expr.func.attr.value in _VIEWS and _may_alias(expr.func.value)
    return False


def _branch_value(expr: cst.BaseExpression) -> cst.BaseExpression | None:
    """A returned value as a torch.cond branch body: tensors only, and fresh ones
    (torch.cond rejects a branch that returns an input or a view of it)."""
    if isinstance(expr, cst.Tuple):
        values = [_branch_value(el.value) for el in expr.elements]
        if not values or any(v is None or isinstance(el, cst.StarredElement) for v, el in zip(values, expr.elements)):
            return None
        elements = [el.with_changes(value=v) for el, v in zip(expr.elements, values)]
        return expr.with_changes(elements=elements, lpar=expr.lpar or [cst.LeftParen()], rpar=expr.rpar or [cst.RightParen()])
    if isinstance(expr, (cst.BaseNumber, cst.BaseString, cst.List, cst.Dict, cst.Set, cst.Lambda)):
        return None
    if name_of(expr) in ("None", "True", "False"):
        return None
    if _may_alias(expr):
        return cst.Call(func=cst.Attribute(value=expr, attr=cst.Name("clone")))
    return expr


def _returned(suite: cst.BaseSuite) -> cst.BaseExpression | None:
    ret = single(suite)
    return ret.value if isinstance(ret, cst.Return) else None


class BranchToCond(BranchRecipe):
    """`if cond: return a` + `else: return b` / `return b` -> return torch.cond(...)."""

    name = "branch-to-cond"
    requires = frozenset({"cond"})
    summary = "replace a data-dependent `if` between two returns by torch.cond"

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        found = site_branch(ctx)
        if found is None or not isinstance(found[0], cst.If):
            return None
        if_node, test = found
        a = _returned(if_node.body)
        if a is None:
            return None
        if isinstance(if_node.orelse, cst.Else) and test.prefix is None:
            b, block, following = _returned(if_node.orelse.body), None, None
        elif if_node.orelse is None and not _is_elif(ctx, if_node):
            block = ctx.file.parent(if_node)
            if not isinstance(block, cst.IndentedBlock):
                return None
            i = block.body.index(if_node)
            following = block.body[i + 1] if i + 1 < len(block.body) else None
            b = _returned(cst.IndentedBlock(body=[following])) if following is not None else None
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
        ret = cst.Return(value=make_call("torch.cond", test.tensor, *branches))
        if block is None or test.prefix is not None:
            # if/else, or `if P and c: return a` whose `return b` must stay for `not P`
            self._plan = _replace_if(ctx, if_node, test, ret)
            return if_node
        ret = fit(ret, ctx.file.span(if_node)[0][1])
        line = statement(ret, if_node, trailing_whitespace=following.trailing_whitespace)
        line = line.with_changes(leading_lines=[*line.leading_lines, *following.leading_lines])
        body = list(block.body)
        body[i : i + 2] = [line]
        self._plan = block.with_changes(body=body)
        return block


RECIPES = (BranchToCheck, BranchToWhere, BranchToCond)
