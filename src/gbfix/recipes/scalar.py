"""GB0124: a scalar read from a tensor (`t.item()`, `float(t)`, `int(t)`) whose value only
feeds tensor arithmetic. Keep it a 0-dim tensor, so the read never leaves the graph.

    scale = self.temperature.item()        ->  scale = self.temperature.detach()
    probs = torch.softmax(scores / scale, -1)  (unchanged: `scores / scale` is a tensor either way)

    x = x / (x.abs().max().item() + 1e-6)  ->  x = x / (x.abs().max().detach().double() + 1e-6)

Only the read is rewritten; the uses then see a tensor instead of a Python number. What
the replacement keeps of `.item()`:
- `.detach()`: `.item()` cuts autograd; a tensor would let gradients reach the source.
- `.reshape(())`: `.item()` takes any one-element tensor (and raises on others, as reshape
  does); a `[1]`-shaped tensor would broadcast and promote like a full tensor. Left out when
  the source is visibly 0-dim (a full reduction, a `torch.tensor(number)` buffer).
- `.double()`, only when arithmetic with literals follows (`s + 1e-6`): Python did it in
  float64, and float64 tensor arithmetic rounds the same way, bit for bit.
- `.clone()`: `.item()` is a snapshot; a tensor that may share memory with the source sees
  in-place updates made before the use. Left out when the source is freshly computed, or
  when the uses sit in the next statement and nothing in it could write in place.

Type promotion: a Python scalar never sets the dtype of a tensor op unless its category
(bool < int < float) is higher than the tensor's; a 0-dim tensor likewise yields to a
*dimensioned* tensor of the same or higher category. So `x op s` and `x op t` give the same
dtype, and the same values, whenever `x` is a dimensioned floating tensor, whatever `t`'s
dtype. Checked on torch 2.13 for float16/bfloat16/float32/float64 `x` against every float,
int and bool `t`, with and without literal arithmetic, for + - * // % and `x / s`, clamp,
masked_fill, where and the comparisons `< <= > >= == !=` (either side; the bool result
then feeds tensor code, `x.masked_fill(x > s, 0)`): bit-identical except `s * x` in half
precision (one rounding apart). `x ** s` (pow special-cases Python exponents) and `s / x` (Python computes
x.reciprocal() * s) are not, and are declined. The other operand must therefore be
visibly a tensor, and the recipe declines when it shows an integer/bool dtype or may be
0-dim (a full reduction, a loss, an integer index). A dtype the source does not reveal is
taken to be floating: that residue is left to the verifier, which compares output dtypes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast

import libcst as cst
from libcst.metadata import Access, Assignment, FunctionScope, QualifiedNameSource

from gbfix.recipes.analysis import COMPARISONS
from gbfix.recipes.base import Decline, Recipe, Replacement, SiteContext
from gbfix.recipes.vocabulary import (
    CASTS,
    ELEMENTWISE,
    FULL_REDUCTIONS,
    PREDICATES,
    SHAPE_VIEWS,
    TUPLE_WITH_DIM,
    words,
)

_ARITH = (cst.Add, cst.Subtract, cst.Multiply, cst.Divide, cst.FloorDivide, cst.Modulo, cst.Power)
# Ops where a Python scalar operand and a 0-dim tensor give bitwise the same result for a
# floating tensor on the other side (`**` does not: pow special-cases Python exponents).
_SCALAR_OPS = (cst.Add, cst.Subtract, cst.Multiply, cst.Divide, cst.FloorDivide, cst.Modulo)
# `x > s` compares in the promoted dtype, which a 0-dim tensor leaves as a Python scalar does.
_SCALAR_ASSIGN_OPS = (
    cst.AddAssign, cst.SubtractAssign, cst.MultiplyAssign, cst.DivideAssign, cst.FloorDivideAssign, cst.ModuloAssign,
)
_BITWISE = (cst.BitAnd, cst.BitOr, cst.BitXor, cst.LeftShift, cst.RightShift)

# Calls with an integral (or boolean) result.
_INT_CALLS = PREDICATES | words(
    "long int short byte char bool argmax argmin argsort nonzero count_nonzero bucketize searchsorted"
    " bitwise_and bitwise_or bitwise_xor bitwise_not arange randint randint_like randperm one_hot"
)
_FLOAT_CALLS = words(
    "float double half bfloat16 mean nanmean std var norm softmax log_softmax sigmoid tanh exp expm1 log log1p"
    " sqrt rsqrt erf sin cos rand randn rand_like randn_like linspace"
)
# Calls whose result keeps the dtype of their tensor receiver / first argument.
_DTYPE_KEEP = SHAPE_VIEWS | words(
    "clone contiguous detach abs neg negative sum prod max min amax amin cumsum cumprod clamp clip clamp_min"
    " clamp_max masked_fill repeat repeat_interleave roll flip cpu cuda sign square where index_select"
    " masked_select tril triu"
)
# Methods whose result is a tensor when their receiver is one.
_TENSOR_METHODS = FULL_REDUCTIONS | ELEMENTWISE | CASTS | SHAPE_VIEWS | _INT_CALLS | _FLOAT_CALLS | words(
    "masked_fill matmul bmm mm mv cumsum cumprod logsumexp where lerp masked_select index_select tril triu"
    " repeat repeat_interleave new_zeros new_ones new_full new_empty roll flip"
)
# Methods that no builtin, numpy array or nn.Module has: calling one shows the receiver is a tensor.
_TENSOR_ONLY = words(
    "abs masked_fill unsqueeze permute contiguous detach softmax log_softmax view_as expand expand_as type_as"
    " new_zeros new_ones new_full new_empty sigmoid relu rsqrt matmul bmm clamp clamp_min clamp_max unflatten"
    " amax amin masked_select index_select repeat_interleave tril triu reciprocal nan_to_num isnan isinf isfinite"
)
# torch.<fn> that return one tensor (others return tuples, dtypes, bools, ...).
_TORCH_FNS = (_TENSOR_METHODS - CASTS - words("new_zeros new_ones new_full new_empty")) | words(
    "tensor as_tensor scalar_tensor zeros ones full empty rand randn randint arange linspace logspace eye"
    " zeros_like ones_like full_like empty_like rand_like randn_like randint_like cat concat concatenate"
    " stack einsum outer maximum minimum fmax fmin atan2 hypot addmm baddbmm randperm"
)
_LINALG_FNS = words("norm vector_norm matrix_norm")
_INT_DTYPES = words("long int int64 int32 int16 int8 uint8 uint16 uint32 uint64 short bool")
_FLOAT_DTYPES = words("float float32 float64 double half float16 bfloat16")
_TENSOR_ANNOTATIONS = words("Tensor FloatTensor DoubleTensor HalfTensor BFloat16Tensor Parameter")
_INT_ANNOTATIONS = words("LongTensor IntTensor ShortTensor ByteTensor CharTensor BoolTensor")
# torch.nn layers whose forward returns one tensor.
_TENSOR_MODULES = words(
    "Linear Bilinear LazyLinear Conv1d Conv2d Conv3d ConvTranspose1d ConvTranspose2d ConvTranspose3d Embedding"
    " LayerNorm GroupNorm RMSNorm BatchNorm1d BatchNorm2d BatchNorm3d InstanceNorm1d InstanceNorm2d InstanceNorm3d"
    " Dropout Dropout1d Dropout2d Dropout3d Identity Flatten Unflatten ReLU GELU SiLU Mish Tanh Sigmoid Softmax"
    " LogSoftmax LeakyReLU ELU Hardswish Softplus Upsample AvgPool1d AvgPool2d AdaptiveAvgPool1d AdaptiveAvgPool2d"
)
_PARAMETER_CLASSES = words("torch.nn.Parameter torch.nn.parameter.Parameter torch.nn.Buffer torch.nn.parameter.Buffer")
_LOSSES = words("cross_entropy nll_loss binary_cross_entropy binary_cross_entropy_with_logits kl_div")
# What the other operand of a use is (see ItemToTensor._feeds_tensor).
_DIMENSIONED = "dimensioned"
_ZERO_DIM_FLOAT = "0-dim float"
_FILL = "fill"

def _number(expr: cst.BaseExpression) -> float | int | None:
    """The value of a real numeric literal (`2`, `1e-6`, `-0.5`), else None."""
    sign = 1
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, (cst.Minus, cst.Plus)):
        sign = -1 if isinstance(expr.operator, cst.Minus) else 1
        expr = expr.expression
    if isinstance(expr, (cst.Integer, cst.Float)):
        return sign * expr.evaluated_value
    return None


def _clamp_bound(f: _Facts, call: cst.CSTNode | None, value: cst.BaseExpression) -> float | int | None:
    """``c`` when ``call`` is the builtin `max(value, c)` or `min(value, c)` with a literal ``c``."""
    if not isinstance(call, cst.Call) or not isinstance(call.func, cst.Name) or call.func.value not in ("max", "min"):
        return None
    if len(call.args) != 2 or any(a.keyword is not None or a.star for a in call.args) or call.args[0].value is not value:
        return None
    scope = f.scopes.get(call.func)
    if scope is None or {q.name for q in scope.get_qualified_names_for(call.func)} != {f"builtins.{call.func.value}"}:
        return None
    return _number(call.args[1].value)


def _last_binding_uses(f: _Facts, assign: cst.Assign, target: cst.Name, scope: FunctionScope) -> list[Access] | None:
    """The reads of ``target`` that see this assignment's value: all of them when it is the
    name's one binding in the function; when it rebinds the name (`s = max(s.max().item(), 1.0)`
    after `s = torch.quantile(...)`), the reads after it, provided every other binding comes
    before it and no loop encloses it (so no read after it sees another value). None otherwise."""
    bound = scope.assignments[target.value]
    if len(bound) == 1:
        return list(next(iter(bound)).references)
    end = f.ctx.file.span(assign)[1]
    if any(not isinstance(b, Assignment) or f.ctx.file.span(b.node)[1] >= f.ctx.file.span(target)[0] for b in bound if b.node is not target):
        return None
    fn = f.ctx.enclosing(cst.FunctionDef, node=assign)
    for anc in f.ctx.ancestors(assign):
        if anc is fn:
            break
        if isinstance(anc, (cst.For, cst.While)):
            return None
    mine = next(b for b in bound if b.node is target)
    return [r for r in mine.references if f.ctx.file.span(r.node)[0] > end]


class _Clamp(cst.CSTTransformer):
    """The read replaced, and each `max(v, c)` / `min(v, c)` around it made `v.clamp(min=c)` / `v.clamp(max=c)`."""

    def __init__(self, read: cst.Call, new: cst.BaseExpression, clamps: list[cst.Call]) -> None:
        super().__init__()
        self.read, self.new, self.clamps = read, new, {id(c) for c in clamps}

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if original is self.read:
            return self.new
        if id(original) not in self.clamps:
            return updated
        value, bound = updated.args[0].value, updated.args[1].value
        if not isinstance(value, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)) and not value.lpar:
            value = value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        side = "min" if cast(cst.Name, original.func).value == "max" else "max"
        arg = cst.Arg(bound, keyword=cst.Name(side), equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))
        clamp = cst.Call(cst.Attribute(value, cst.Name("clamp")), [arg])
        return clamp.with_changes(lpar=updated.lpar, rpar=updated.rpar)


def _dotted(expr: cst.BaseExpression) -> bool:
    """`a` or `a.b.c`: what can name a module function (`x.sum().item` cannot)."""
    while isinstance(expr, cst.Attribute):
        expr = expr.value
    return isinstance(expr, cst.Name)


def _is_self_attr(expr: cst.BaseExpression, attr: str) -> bool:
    return (
        isinstance(expr, cst.Attribute)
        and expr.attr.value == attr
        and isinstance(expr.value, cst.Name)
        and expr.value.value == "self"
    )


def _positional(call: cst.Call) -> list[cst.BaseExpression]:
    return [a.value for a in call.args if a.keyword is None and not a.star]


def _keywords(call: cst.Call) -> dict[str, cst.BaseExpression]:
    return {a.keyword.value: a.value for a in call.args if a.keyword is not None}


class _Facts:
    """What the source shows about expressions of one file: tensor or not, int or float
    dtype, 0-dim or not, fresh storage or a possible alias. Everything is evidence-based:
    an answer of False / None means "not shown", never "shown not"."""

    def __init__(self, ctx: SiteContext) -> None:
        self.ctx = ctx
        self.scopes = ctx.file.scopes
        self._active: set[int] = set()  # bindings under evaluation (recursion through `x = x * 2`)

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self.ctx.file.parent(node)

    # ---- calls ----

    def callee(self, call: cst.Call) -> tuple[cst.BaseExpression | None, str | None, str | None]:
        """(receiver, method) for `recv.m(...)`, or (None, None, "torch.fn") for a torch function."""
        func = call.func
        if _dotted(func):
            scope = self.scopes.get(func)
            names = scope.get_qualified_names_for(func) if scope is not None else set()
            imported = [q.name for q in names if q.source is not QualifiedNameSource.LOCAL]
            if imported:  # a module function or builtin, never a tensor method
                return None, None, next((n for n in imported if n.startswith("torch.")), None)
        if isinstance(func, cst.Attribute):
            return func.value, func.attr.value, None
        return None, None, None

    @staticmethod
    def _torch_fn(qualified: str) -> tuple[str, str]:
        module, _, fn = qualified.rpartition(".")
        return module, fn

    def _explicit_dtype(self, call: cst.Call) -> str | None:
        """'int'/'float' when a `torch.<dtype>` argument fixes the result dtype."""
        for arg in call.args:
            if isinstance(arg.value, cst.Attribute) and self.ctx.code(arg.value.value) == "torch":
                if arg.value.attr.value in _INT_DTYPES:
                    return "int"
                if arg.value.attr.value in _FLOAT_DTYPES:
                    return "float"
        return None

    # ---- names ----

    def bindings(self, name: cst.Name) -> list[cst.CSTNode] | None:
        """What each binding of `name` assigns: a value expression, a Param, or an AugAssign;
        None when some binding is out of reach (imports, loop targets, unpacking, builtins)."""
        scope = self.scopes.get(name)
        if scope is None:
            return None
        found = scope[name.value]
        if not found:
            return None
        out: list[cst.CSTNode] = []
        for a in found:
            if not isinstance(a, Assignment):
                return None
            node, up = a.node, self.parent(a.node)
            if isinstance(node, cst.Param):
                out.append(node)
            elif isinstance(up, cst.AugAssign):
                out.append(up)
            elif isinstance(up, cst.AssignTarget) and len(self.parent(up).targets) == 1:
                out.append(self.parent(up).value)
            elif isinstance(up, (cst.AnnAssign, cst.NamedExpr)) and up.value is not None:
                out.append(up.value)
            else:
                return None
        return out

    def _each_binding(self, name: cst.Name, test, circular: bool) -> Iterator[bool]:
        for b in self.bindings(name) or ():
            if id(b) in self._active:
                yield circular
                continue
            self._active.add(id(b))
            try:
                yield test(b)
            finally:
                self._active.discard(id(b))

    def _self_attr_values(self, attr: cst.Attribute) -> list[cst.BaseExpression]:
        """Values `self.<a>` gets in its class: `self.a = v` and `self.register_buffer("a", v)`."""
        if not (isinstance(attr.value, cst.Name) and attr.value.value == "self"):
            return []
        cls = self.ctx.enclosing(cst.ClassDef, node=attr)
        if cls is None:
            return []
        values: list[cst.BaseExpression] = []
        ok = True
        want = attr.attr.value

        class _Walk(cst.CSTVisitor):
            def visit_Assign(self, node: cst.Assign) -> None:
                nonlocal ok
                for t in node.targets:
                    if _is_self_attr(t.target, want):
                        if len(node.targets) != 1:
                            ok = False
                        values.append(node.value)

            def visit_AugAssign(self, node: cst.AugAssign) -> None:
                nonlocal ok
                if _is_self_attr(node.target, want):
                    ok = False

            def visit_Call(self, node: cst.Call) -> None:
                f = node.func
                if isinstance(f, cst.Attribute) and f.attr.value in ("register_buffer", "register_parameter"):
                    args = _positional(node)
                    if len(args) >= 2 and isinstance(args[0], cst.SimpleString) and args[0].evaluated_value == want:
                        values.append(args[1])

        cls.visit(_Walk())
        return values if ok else []

    # ---- facts ----

    def tensor(self, e: cst.BaseExpression) -> bool:
        """Shown to evaluate to a torch.Tensor."""
        if isinstance(e, cst.Name):
            iterable = self.iterated(e)
            if iterable is not None:  # `for e in experts`, `zip(ws, experts)`: an element of experts
                return isinstance(iterable, cst.Name) and self._tensor_sequence(iterable)
            results = list(self._each_binding(e, self._binding_tensor, circular=True))
            return bool(results) and all(results)
        if isinstance(e, cst.Attribute):
            if e.attr.value in ("T", "mT", "H", "mH", "real", "imag", "data"):
                return self.tensor(e.value)
            values = self._self_attr_values(e)
            return bool(values) and all(self.tensor(v) for v in values)
        if isinstance(e, cst.Subscript):
            return self.tensor(e.value)
        if isinstance(e, cst.UnaryOperation):
            return not isinstance(e.operator, cst.Not) and self.tensor(e.expression)
        if isinstance(e, cst.BinaryOperation):
            if isinstance(e.operator, cst.MatrixMultiply):
                return True
            return isinstance(e.operator, _ARITH + _BITWISE) and (self.tensor(e.left) or self.tensor(e.right))
        if isinstance(e, cst.Comparison):  # chained comparisons would call bool(); one is elementwise
            return len(e.comparisons) == 1 and (self.tensor(e.left) or self.tensor(e.comparisons[0].comparator))
        if isinstance(e, cst.IfExp):
            return self.tensor(e.body) and self.tensor(e.orelse)
        if isinstance(e, cst.Call):
            return self._call_tensor(e)
        return False

    def _call_tensor(self, call: cst.Call) -> bool:
        recv, method, fn = self.callee(call)
        kws = _keywords(call)
        if fn is not None:
            module, name = self._torch_fn(fn)
            if fn in _PARAMETER_CLASSES:
                return True
            if module == "torch.nn.functional":
                return "multi_head" not in name and "return_indices" not in kws
            if module == "torch.linalg":
                return name in _LINALG_FNS
            if module not in ("torch", "torch.special", "torch.fft") or name not in _TORCH_FNS:
                return False
            return name not in TUPLE_WITH_DIM or (len(_positional(call)) == 1 and not kws)
        if isinstance(recv, cst.Name) and recv.value == "self" and method not in _TENSOR_METHODS:
            return self._self_call_tensor(call.func)
        if isinstance(call.func, cst.Name):
            local = self._local_def(call.func)
            return isinstance(local, cst.FunctionDef) and self._returns_tensor(local)
        if method is None or method not in _TENSOR_METHODS:
            return False
        if method in TUPLE_WITH_DIM and call.args:
            return False
        return method in _TENSOR_ONLY or self.tensor(recv)

    def _self_call_tensor(self, func: cst.Attribute) -> bool:
        """`self.m(...)`: a method of this class annotated `-> Tensor`, or a submodule built
        from a torch.nn layer or from a class of this file whose forward is so annotated."""
        cls = self.ctx.enclosing(cst.ClassDef, node=func)
        if cls is None:
            return False
        for stmt in cls.body.body:
            if isinstance(stmt, cst.FunctionDef) and stmt.name.value == func.attr.value:
                return self._returns_tensor(stmt)
        values = self._self_attr_values(func)
        return bool(values) and all(self._tensor_module(v) for v in values)

    def _tensor_module(self, value: cst.BaseExpression) -> bool:
        if not isinstance(value, cst.Call):
            return False
        _, _, fn = self.callee(value)
        if fn is not None:
            module, name = self._torch_fn(fn)
            return module.startswith("torch.nn") and name in _TENSOR_MODULES
        local = self._local_def(value.func) if isinstance(value.func, cst.Name) else None
        forward = next(
            (s for s in local.body.body if isinstance(s, cst.FunctionDef) and s.name.value == "forward"), None
        ) if isinstance(local, cst.ClassDef) else None
        return forward is not None and self._returns_tensor(forward)

    def _local_def(self, name: cst.Name) -> cst.CSTNode | None:
        """The class or function of this file that `name` refers to, if that is all it can be."""
        scope = self.scopes.get(name)
        found = scope[name.value] if scope is not None else set()
        if len(found) != 1:
            return None
        (a,) = found
        return a.node if isinstance(a, Assignment) and isinstance(a.node, (cst.ClassDef, cst.FunctionDef)) else None

    def _returns_tensor(self, fdef: cst.FunctionDef) -> bool:
        if fdef.returns is None:
            return False
        return self.ctx.code(fdef.returns.annotation).strip("'\"").rpartition(".")[2] in _TENSOR_ANNOTATIONS

    def iterated(self, name: cst.Name) -> cst.BaseExpression | None:
        """The iterable whose elements ``name`` takes, when its only binding is the target of a
        `for` (statement or comprehension): `for w in ws` -> ws, `for w, e in zip(ws, es)` ->
        ws for w, es for e."""
        scope = self.scopes.get(name)
        found = scope[name.value] if scope is not None else ()
        if len(found) != 1 or not isinstance(next(iter(found)), Assignment):
            return None
        target = next(iter(found)).node
        loop = self.parent(target)
        k = None
        if isinstance(loop, cst.Element):  # one name of a tuple target
            tup = self.parent(loop)
            if not isinstance(tup, cst.Tuple) or loop.value is not target:
                return None
            k, loop = list(tup.elements).index(loop), self.parent(tup)
            target = tup
        if not isinstance(loop, (cst.For, cst.CompFor)) or loop.target is not target:
            return None
        if k is None:
            return loop.iter
        it = loop.iter
        zipped = isinstance(it, cst.Call) and isinstance(it.func, cst.Name) and it.func.value == "zip"
        scope = self.scopes.get(it.func) if zipped else None
        if not zipped or scope is None or {q.name for q in scope.get_qualified_names_for(it.func)} != {"builtins.zip"}:
            return None
        args = [a for a in it.args if not a.star]
        if len(args) != len(it.args) or k >= len(args) or any(a.keyword is not None for a in args):
            return None
        return args[k].value

    def _tensor_sequence(self, name: cst.Name) -> bool:
        """A parameter annotated as a list, tuple or sequence of tensors, bound only there."""
        found = self.bindings(name) or []
        if len(found) != 1 or not isinstance(found[0], cst.Param) or found[0].annotation is None:
            return False
        ann = self.ctx.code(found[0].annotation.annotation).strip("'\"").replace(" ", "")
        outer, _, inner = ann.partition("[")
        item = inner.rstrip("]").removesuffix(",...")
        containers = ("list", "List", "tuple", "Tuple", "Sequence", "Iterable")
        return outer.rpartition(".")[2] in containers and item.rpartition(".")[2] in _TENSOR_ANNOTATIONS

    def _binding_tensor(self, b: cst.CSTNode) -> bool:
        if isinstance(b, cst.AugAssign):
            return True  # `x op= v` keeps a tensor a tensor; x's other bindings decide
        if isinstance(b, cst.Param):
            return self._param_tensor(b)
        return self.tensor(b)

    def _param_tensor(self, p: cst.Param) -> bool:
        if isinstance(p.default, cst.Name) and p.default.value == "None":
            return False
        if p.annotation is not None:
            ann = self.ctx.code(p.annotation.annotation).strip("'\"")
            return ann.rpartition(".")[2] in _TENSOR_ANNOTATIONS | _INT_ANNOTATIONS
        # Unannotated: a tensor if it receives a tensor-only method call while it still
        # holds the argument: before any other binding of the name, outside any loop.
        scope = self.scopes.get(p.name)
        if scope is None:
            return False
        bindings = list(scope[p.name.value])
        mine = [a for a in bindings if a.node is p]
        if len(mine) != 1:
            return False
        others = [self.ctx.file.span(a.node)[0] for a in bindings if a.node is not p]
        for ref in mine[0].references:
            attr = self.parent(ref.node)
            call = self.parent(attr) if isinstance(attr, cst.Attribute) else None
            if (
                isinstance(call, cst.Call)
                and call.func is attr
                and attr.value is ref.node
                and attr.attr.value in _TENSOR_ONLY
                and all(self.ctx.file.span(ref.node)[0] < at for at in others)
                and (not others or not any(isinstance(a, (cst.For, cst.While)) for a in self.ctx.ancestors(ref.node)))
            ):
                return True
        return False

    def dtype(self, e: cst.BaseExpression) -> str | None:
        """'int' (integer or bool), 'float', or None when the source does not show it."""
        if isinstance(e, (cst.Integer, cst.Float)):
            return "int" if isinstance(e, cst.Integer) else "float"
        if isinstance(e, cst.Name):
            found = list(self._each_binding(e, self._binding_dtype, circular=None))
            if "int" in found:
                return "int"
            return "float" if found and all(d == "float" for d in found) else None
        if isinstance(e, cst.Comparison):
            return "int"
        if isinstance(e, cst.UnaryOperation):
            if isinstance(e.operator, (cst.BitInvert, cst.Not)):
                return "int"
            return self.dtype(e.expression)
        if isinstance(e, cst.BinaryOperation):
            if isinstance(e.operator, _BITWISE):
                return "int"
            if isinstance(e.operator, cst.Divide):
                return "float"
            sides = {self.dtype(e.left), self.dtype(e.right)}
            if "float" in sides:
                return "float"
            both_literals = _number(e.left) is not None and _number(e.right) is not None
            return "int" if sides == {"int"} and not both_literals else None
        if isinstance(e, cst.Subscript):
            return self.dtype(e.value)
        if isinstance(e, cst.IfExp):
            body = self.dtype(e.body)
            return body if body == self.dtype(e.orelse) else ("int" if "int" in (body, self.dtype(e.orelse)) else None)
        if isinstance(e, cst.Call):
            explicit = self._explicit_dtype(e)
            if explicit:
                return explicit
            recv, method, fn = self.callee(e)
            name = fn.rpartition(".")[2] if fn else method
            if name in _INT_CALLS:
                return "int"
            if name in _FLOAT_CALLS or (fn or "").startswith("torch.nn.functional."):
                return "float"
            if name in _DTYPE_KEEP:
                pos = _positional(e)
                if fn == "torch.where":  # the condition is bool; the branches decide
                    branches = {self.dtype(p) for p in pos[1:3]} if len(pos) == 3 else {None}
                    return "int" if "int" in branches else ("float" if branches == {"float"} else None)
                source = recv if fn is None else next(iter(pos), None)
                return self.dtype(source) if source is not None else None
        return None

    def _binding_dtype(self, b: cst.CSTNode) -> str | None:
        if isinstance(b, cst.AugAssign):
            return "int" if isinstance(b.operator, (cst.BitAndAssign, cst.BitOrAssign, cst.BitXorAssign)) else None
        if isinstance(b, cst.Param):
            if b.annotation is not None:
                ann = self.ctx.code(b.annotation.annotation).strip("'\"").rpartition(".")[2]
                return "int" if ann in _INT_ANNOTATIONS else None
            return None
        return self.dtype(b)

    def zero_dim(self, e: cst.BaseExpression, maybe: bool = False) -> bool:
        """Shown to be 0-dim; with `maybe`, also anything that could be (`x[i]`, a loss)."""
        if isinstance(e, cst.Name):
            def test(b: cst.CSTNode) -> bool:  # parameters and `x op= v` show nothing
                return not isinstance(b, (cst.Param, cst.AugAssign)) and self.zero_dim(b, maybe)

            found = list(self._each_binding(e, test, circular=False))
            return any(found) if maybe else bool(found) and all(found)
        if isinstance(e, cst.UnaryOperation):
            return self.zero_dim(e.expression, maybe)
        if isinstance(e, cst.BinaryOperation):
            sides = [_number(s) is not None or self.zero_dim(s, maybe) for s in (e.left, e.right)]
            return all(sides) and not (_number(e.left) is not None and _number(e.right) is not None)
        if isinstance(e, cst.Subscript):
            return maybe and all(isinstance(s.slice, cst.Index) for s in e.slice)
        if isinstance(e, cst.Attribute):  # `self.temperature`: what the class stores there
            values = self._self_attr_values(e)
            return bool(values) and (any if maybe else all)(self.zero_dim(v, maybe) for v in values)
        if not isinstance(e, cst.Call):
            return False
        recv, method, fn = self.callee(e)
        pos, kws = _positional(e), _keywords(e)
        if fn is not None:
            module, name = self._torch_fn(fn)
            if module == "torch.nn.functional" and (name.endswith("_loss") or name in _LOSSES):
                reduction = kws.get("reduction")
                if not isinstance(reduction, (cst.SimpleString, type(None))):
                    return maybe  # reduction=<variable>
                return reduction is None or reduction.evaluated_value != "none"
            if name in FULL_REDUCTIONS or (module == "torch.linalg" and name in _LINALG_FNS):
                return len(pos) == 1 and set(kws) <= {"dtype"}
            if name in ("tensor", "scalar_tensor", "as_tensor"):
                return bool(pos) and self._python_number(pos[0])
            if name in ("Parameter", "Buffer"):
                return bool(pos) and self.zero_dim(pos[0], maybe)
            if name in ELEMENTWISE | CASTS and pos:
                return self.zero_dim(pos[0], maybe)
            return False
        if method in FULL_REDUCTIONS:
            return not pos and set(kws) <= {"dtype"}
        if method in ELEMENTWISE | CASTS:
            return self.zero_dim(recv, maybe)
        return False

    def _python_number(self, e: cst.BaseExpression) -> bool:
        """A numeric literal, or a name bound only to parameters annotated int/float/bool."""
        if _number(e) is not None:
            return True
        if not isinstance(e, cst.Name):
            return False
        found = self.bindings(e) or []
        return bool(found) and all(
            isinstance(b, cst.Param)
            and b.annotation is not None
            and self.ctx.code(b.annotation.annotation) in ("int", "float", "bool")
            for b in found
        )

    def fresh(self, e: cst.BaseExpression) -> bool:
        """Shown to be newly allocated (or a view of something newly allocated), so no
        other name can mutate it in place."""
        if isinstance(e, cst.BinaryOperation):
            return isinstance(e.operator, _ARITH + (cst.MatrixMultiply,))
        if isinstance(e, cst.UnaryOperation):
            return isinstance(e.operator, (cst.Minus, cst.BitInvert))
        if isinstance(e, cst.Subscript):
            return self.fresh(e.value)
        if not isinstance(e, cst.Call):
            return False
        recv, method, fn = self.callee(e)
        if fn is not None:
            module, name = self._torch_fn(fn)
            return module == "torch" and name in (FULL_REDUCTIONS | ELEMENTWISE) and bool(_positional(e))
        if method in CASTS | SHAPE_VIEWS:
            return self.fresh(recv)
        return method in FULL_REDUCTIONS | ELEMENTWISE | _INT_CALLS | _FLOAT_CALLS

    def pure(self, node: cst.CSTNode) -> bool:
        """Runs no code that could mutate a tensor in place: only torch functions and tensor
        methods that do not end in `_`, no augmented assignment, no walrus, no await."""
        facts = self
        ok = True

        class _Walk(cst.CSTVisitor):
            def visit_Call(self, call: cst.Call) -> None:
                nonlocal ok
                recv, method, fn = facts.callee(call)
                name = fn.rpartition(".")[2] if fn else method
                if name is None or name.endswith("_") or not (fn or method in _TENSOR_METHODS):
                    ok = False

            def visit_AugAssign(self, node: cst.AugAssign) -> None:
                nonlocal ok
                ok = False

            def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
                nonlocal ok
                ok = False

            def visit_Await(self, node: cst.Await) -> None:
                nonlocal ok
                ok = False

        node.visit(_Walk())
        return ok


class ItemToTensor(Recipe):
    name = "item-to-tensor"
    codes = ("GB0124",)
    safety = "safe"
    summary = "keep a scalar read by .item()/float()/int() as a 0-dim tensor: it only feeds tensor arithmetic"
    rule = "GB0124"
    clamps = True  # `max(v, c)` around the read becomes `.clamp(min=c)` (its rewrite replaces that call)

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        self._new: cst.BaseExpression | None = None
        f = _Facts(ctx)
        read = self._read(ctx, f)
        if read is None:
            return None
        call, source, is_float = read
        self._clamps: list[cst.Call] = []
        climbed = self._climb(f, call, is_float, self._clamps if self.clamps else None)
        if climbed is None:
            return None
        int_read = not is_float and f.dtype(source) == "int"
        top, chained, is_float = climbed
        holder = f.parent(top)
        feeds = self._feeds_tensor(f, top)
        if feeds:  # inline: `x * t.item()`
            # `x op= ...` writes in place, and x may share memory with the source
            quiet = not isinstance(holder, cst.AugAssign) and all(f.pure(n) for n in self._evaluated_after(f, top))
            partners = {feeds}
        elif isinstance(holder, cst.Assign) and holder.value is top:
            uses = self._uses(f, holder, is_float)
            if uses is None:
                return None
            chained = chained or any(c for _, c, _ in uses)
            quiet = self._quiet_until(f, holder, [u for u, _, _ in uses])
            partners = {p for _, _, p in uses}
        else:
            self._passed_on(f, top, source)
            return None
        # A 0-dim floating partner sets the result dtype for a Python int and an integer
        # 0-dim tensor alike; a float64 one (`.double()` below) would win over float32.
        if _ZERO_DIM_FLOAT in partners and not (int_read and not chained):
            return None
        if _FILL in partners and chained:
            return None  # `.double()` would make an int's fill a float
        self._new = self._as_tensor(
            call, source, zero_dim=f.zero_dim(source), double=chained or self.double_for(partners),
            snapshot=not (f.fresh(source) or quiet),
        )
        self._read_call = call
        return self._clamps[-1] if self._clamps else call

    def rewrite(self, node: cst.CSTNode) -> Replacement | None:
        if not self._clamps:
            return self._new
        return node.visit(_Clamp(self._read_call, self._new, self._clamps))

    # ---- the read ----

    @staticmethod
    def _read(ctx: SiteContext, f: _Facts) -> tuple[cst.Call, cst.BaseExpression, bool] | None:
        """The innermost `t.item()` / `float(t)` / `int(t)` at the site: (call, t, whether
        the Python value is shown to be a float)."""
        stop = ctx.enclosing(cst.BaseStatement, cst.BaseSmallStatement)
        for node in (ctx.node, *ctx.ancestors()):
            if node is stop:
                return None
            if not isinstance(node, cst.Call):
                continue
            recv, method, fn = f.callee(node)
            if method == "item" and not node.args:  # a method call: recv is its receiver
                return node, cast(cst.BaseExpression, recv), f.dtype(recv) == "float"
            pos = _positional(node)
            builtin = node.func.value if isinstance(node.func, cst.Name) else None
            if builtin in ("float", "int") and len(node.args) == 1 and len(pos) == 1:
                scope = f.scopes.get(node.func)
                names = {q.name for q in scope.get_qualified_names_for(node.func)} if scope else set()
                # float(x)/int(x) of something not shown to be a tensor may be a plain number on other calls
                if names == {f"builtins.{builtin}"} and f.tensor(pos[0]):
                    # int() truncates: only an integer tensor keeps its value
                    if builtin == "float" or f.dtype(pos[0]) == "int":
                        return node, pos[0], builtin == "float"
        return None

    # ---- where the value goes ----

    @staticmethod
    def _climb(
        f: _Facts, node: cst.BaseExpression, is_float: bool, clamps: list[cst.Call] | None = None
    ) -> tuple[cst.BaseExpression, bool, bool] | None:
        """Follow the value through arithmetic with numeric literals (`s + 1e-6`, `-s`) and
        with parameters annotated int/float/bool (`s * scale`, no division by one):
        (the outermost such expression, whether there was any, whether Python's value is a
        float by then), or None to decline. The rewrite runs that arithmetic in float64,
        which matches Python's float (and int, below 2**53) arithmetic bit for bit, except
        that a Python int 0 negated stays +0 where float64 gives -0.

        With ``clamps``, also through `max(v, c)` / `min(v, c)` with a literal ``c``
        (appended there, for the rewrite to make `v.clamp(min=c)` / `v.clamp(max=c)`):
        Python returns ``v`` unless ``c`` is beyond it, NaN ``v`` included, as clamp
        does. The value first only (`max(c, v)` returns ``c`` for a NaN ``v``); not 0
        (`max(-0.0, 0)` is -0.0, which clamp need not keep). Clamping is monotonic, so
        it is exact in the read's dtype when its result meets a tensor; a float literal
        (not a number of an integer dtype) or more arithmetic runs it in float64."""
        chained = False
        while True:
            up = f.parent(node)
            around = f.parent(up) if clamps is not None and isinstance(up, cst.Arg) else None
            bound = _clamp_bound(f, around, node)
            if bound is not None:
                if bound == 0:
                    return None
                assert clamps is not None and isinstance(around, cst.Call)
                clamps.append(around)
                chained = chained or isinstance(bound, float)
                is_float = is_float or isinstance(bound, float)
                node = around
                continue
            if isinstance(up, cst.UnaryOperation) and isinstance(up.operator, cst.Minus):
                if not is_float:
                    return None
            elif isinstance(up, cst.BinaryOperation) and _number(up.right if up.left is node else up.left) is not None:
                op, literal = up.operator, _number(up.right if up.left is node else up.left)
                if not isinstance(op, (cst.Add, cst.Subtract, cst.Multiply, cst.Divide)):
                    return None
                if isinstance(op, cst.Multiply) and literal < 0 and not is_float:
                    return None
                # Python raises ZeroDivisionError for `c / s` with s == 0; a tensor gives inf.
                if isinstance(op, cst.Divide) and (up.right is node or literal == 0):
                    return None
                is_float = is_float or isinstance(literal, float) or isinstance(op, cst.Divide)
            elif isinstance(up, cst.BinaryOperation) and f._python_number(up.right if up.left is node else up.left):
                # a parameter annotated int/float/bool: its value (and sign) is not known
                op, kind = up.operator, f.ctx.code(f.bindings(up.right if up.left is node else up.left)[0].annotation.annotation)
                if not isinstance(op, (cst.Add, cst.Subtract, cst.Multiply)):
                    return None  # `/` by it: 0 raises ZeroDivisionError in Python, a tensor gives inf
                if isinstance(op, cst.Multiply) and not is_float and kind != "float":
                    return None  # Python's int 0 * -n is 0; float64 gives -0.0
                is_float = is_float or kind == "float"
            else:
                return node, chained, is_float
            chained = True
            node = up

    @staticmethod
    def _feeds_tensor(f: _Facts, top: cst.BaseExpression) -> str | None:
        """How the value at ``top`` meets a tensor: `_DIMENSIONED` (an operand whose dtype
        wins over any 0-dim tensor), `_ZERO_DIM_FLOAT` (a 0-dim floating tensor: only an
        integer read keeps the result dtype), `_FILL` (`torch.full`'s fill, whose category
        alone picks the dtype), or None (another use)."""
        up = f.parent(top)
        if isinstance(up, cst.BinaryOperation) and isinstance(up.operator, _SCALAR_OPS):
            # `s / x` runs as x.reciprocal() * s for a Python s: one rounding more than div
            if isinstance(up.operator, cst.Divide) and up.left is top:
                return None
            return ItemToTensor._partner(f, up.right if up.left is top else up.left)
        if isinstance(up, cst.Comparison) and len(up.comparisons) == 1:  # a chain would call bool()
            (target,) = up.comparisons
            if isinstance(target.operator, COMPARISONS):
                return ItemToTensor._partner(f, target.comparator if up.left is top else up.left)
            return None
        if isinstance(up, cst.ComparisonTarget) and isinstance(up.operator, COMPARISONS):
            comparison = f.parent(up)
            return ItemToTensor._partner(f, comparison.left) if len(comparison.comparisons) == 1 else None
        if isinstance(up, cst.AugAssign) and up.value is top and isinstance(up.operator, _SCALAR_ASSIGN_OPS):
            # in place: the target keeps its dtype, so any tensor target behaves the same
            return _DIMENSIONED if isinstance(up.target, cst.Name) and f.tensor(up.target) else None
        if isinstance(up, cst.Arg) and up.value is top and not up.star:
            call = f.parent(up)
            fill = ItemToTensor._fill(f, call, up) if isinstance(call, cst.Call) else None
            if fill is not None:
                return fill
            subject = ItemToTensor._arg_subject(f, call, up) if isinstance(call, cst.Call) else None
            return None if subject is None else ItemToTensor._partner(f, subject)
        return None

    @staticmethod
    def _partner(f: _Facts, e: cst.BaseExpression) -> str | None:
        """Whether the other operand makes promotion ignore the scalar's being a tensor."""
        if not f.tensor(e):
            return None
        if f.dtype(e) != "int" and not f.zero_dim(e, maybe=True):
            return _DIMENSIONED
        return _ZERO_DIM_FLOAT if f.dtype(e) == "float" else None

    @staticmethod
    def _fill(f: _Facts, call: cst.Call, arg: cst.Arg) -> str | None:
        """`torch.full(size, s)`: the fill's category (bool/int/float) picks the dtype, the same
        for a Python number and a 0-dim tensor (`_FILL`); `x.fill_(s)` keeps x's dtype."""
        recv, method, fn = f.callee(call)
        pos = _positional(call)
        index = next((i for i, v in enumerate(pos) if v is arg.value), None)
        key = arg.keyword.value if arg.keyword is not None else None
        if fn == "torch.full" and (index == 1 or key == "fill_value"):
            return _FILL
        if fn is None and method == "fill_" and (index == 0 or key == "value") and f.tensor(recv):
            return _DIMENSIONED
        return None

    @staticmethod
    def _arg_subject(f: _Facts, call: cst.Call, arg: cst.Arg) -> cst.BaseExpression | None:
        """For `clamp`/`clip` bounds, a `masked_fill` value and a `torch.where` branch: the
        tensor operand the scalar is combined with."""
        recv, method, fn = f.callee(call)
        pos = _positional(call)
        index = next((i for i, v in enumerate(pos) if v is arg.value), None)
        key = arg.keyword.value if arg.keyword is not None else None
        if fn in ("torch.clamp", "torch.clip") and pos and (index in (1, 2) or key in ("min", "max")):
            return pos[0]
        if fn is None and method in ("clamp", "clip") and (index in (0, 1) or key in ("min", "max")):
            return recv
        if fn is None and method == "masked_fill" and (index == 1 or key == "value"):
            return recv
        if fn == "torch.where" and len(pos) == 3 and index in (1, 2):
            return pos[3 - index]
        return None

    def _uses(self, f: _Facts, assign: cst.Assign, is_float: bool) -> list[tuple[cst.Name, bool, str]] | None:
        """The loads of `name = <read>`, each with whether it goes through literal
        arithmetic and its partner (see `_feeds_tensor`), when every one feeds tensor
        arithmetic; None otherwise."""
        if len(assign.targets) != 1 or not isinstance(assign.targets[0].target, cst.Name):
            return None
        target = assign.targets[0].target
        scope = f.scopes.get(target)
        if not isinstance(scope, FunctionScope):
            return None
        references = _last_binding_uses(f, assign, target, scope)
        if references is None:  # another binding could put a Python number back under the name
            return None
        uses: list[tuple[cst.Name, bool, str]] = []
        for ref in references:
            climbed = self._climb(f, ref.node, is_float) if isinstance(ref.node, cst.Name) else None
            partner = None if climbed is None else self._feeds_tensor(f, climbed[0])
            if partner is None and isinstance(ref.node, cst.Name):
                partner = self.branch_use(f, ref.node, assign, is_float)
                climbed = (ref.node, False, is_float)
            if partner is None or climbed is None:
                self._passed_on(f, ref.node, None)
                return None
            uses.append((ref.node, climbed[1], partner))
        return uses or None

    @staticmethod
    def _passed_on(f: _Facts, node: cst.CSTNode, source: cst.BaseExpression | None) -> None:
        """Decline, saying so, when the value is an argument of a call that is no torch
        function or tensor method (a helper of the user's, maybe in another module): the
        recipe does not follow a value into another function's body, where only its uses
        would show whether a 0-dim tensor does the same."""
        up = f.parent(node)
        call = f.parent(up) if isinstance(up, cst.Arg) and up.value is node else None
        if not isinstance(call, cst.Call):
            return
        _, method, fn = f.callee(call)
        scope = f.scopes.get(call.func)
        builtin = scope is not None and any(q.source is QualifiedNameSource.BUILTIN for q in scope.get_qualified_names_for(call.func))
        if fn is not None or method in _TENSOR_METHODS or builtin:
            return  # a torch op, whose use ``_feeds_tensor`` judged, or a builtin (`int(s)`)
        name = f.ctx.code(call.func)
        what = f"`{f.ctx.code(node)}`" if source is None else "the value"
        raise Decline(
            f"{what} is passed to `{name}(...)`, whose uses of it are not followed; if it only does "
            "tensor arithmetic with it, keep it a 0-dim tensor by hand (`.detach()` for `.item()`, "
            "`.double()` too where it meets Python numbers)"
        )

    def branch_use(self, f: _Facts, name: cst.Name, assign: cst.Assign, is_float: bool) -> str | None:
        """The partner of a use that feeds no tensor op (item-then-where takes an `if` test's); None: declined."""
        return None

    def double_for(self, partners: set[str]) -> bool:
        """Whether the uses' partners need the read in float64 besides literal arithmetic."""
        return False

    @staticmethod
    def _evaluated_after(f: _Facts, top: cst.BaseExpression) -> list[cst.CSTNode]:
        """What runs between the read and the op that consumes it (inline form)."""
        up = f.parent(top)
        if isinstance(up, cst.BinaryOperation):
            return [up.right] if up.left is top else []
        if isinstance(up, cst.Arg):
            call = f.parent(up)
            return list(call.args[call.args.index(up) + 1 :])
        return []

    @staticmethod
    def _quiet_until(f: _Facts, assign: cst.Assign, uses: list[cst.Name]) -> bool:
        """Every use sits in the statement right after the assignment, and that statement
        runs nothing that could mutate the source in place."""
        line = f.parent(assign)
        block = f.parent(line) if isinstance(line, cst.SimpleStatementLine) and line.body[-1] is assign else None
        body = getattr(block, "body", None)
        if not isinstance(body, (list, tuple)) or line not in body:
            return False
        i = body.index(line)
        if i + 1 >= len(body) or not isinstance(body[i + 1], cst.SimpleStatementLine):
            return False
        nxt = body[i + 1]
        return all(nxt in f.ctx.ancestors(u) for u in uses) and f.pure(nxt)

    # ---- the replacement ----

    @staticmethod
    def _as_tensor(
        call: cst.Call, source: cst.BaseExpression, zero_dim: bool, double: bool, snapshot: bool
    ) -> cst.BaseExpression:
        if not isinstance(source, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)) and not source.lpar:
            source = source.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])

        def method(value: cst.BaseExpression, name: str, *args: cst.Arg) -> cst.Call:
            return cst.Call(cst.Attribute(value, cst.Name(name)), list(args))

        out = method(source, "detach")
        if not zero_dim:
            out = method(out, "reshape", cst.Arg(cst.Tuple([])))
        if double:
            out = method(out, "double")
        if snapshot:
            out = method(out, "clone")
        return out.with_changes(lpar=call.lpar, rpar=call.rpar)


class AssertItemToTensor(Recipe):
    """`assert t.max().item() <= n, "msg"` -> `assert t.max().double() <= n, "msg"`.

    Eager runs it as before: the comparison is exact in float64 (Python compared a float or
    an int below 2**53 with the number) and `assert` calls bool() on the 0-dim result.
    Dynamo traces an assert on a tensor as `torch._assert_async`, so a failing check under
    compile raises RuntimeError (with the same message) instead of AssertionError:
    unsafe. Only a literal message or none: Dynamo breaks on any other (an f-string
    message is evaluated from the tensor). `python -O` drops both forms alike.
    """

    name = "assert-item-to-tensor"
    codes = ("GB0124",)
    safety = "unsafe"
    summary = "assert t.item() <= n, 'msg' -> assert t.double() <= n, 'msg': traced, but a failure under compile raises RuntimeError"
    rule = "GB0124"

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        found = item_assert(ctx)
        if found is None:
            return None
        stmt, call, self._source = found
        if stmt.msg is not None and not _literal_string(stmt.msg):
            raise Decline("the message is not a string literal: Dynamo breaks on it")
        return call

    def rewrite(self, node: cst.CSTNode) -> Replacement:
        return as_double(self._source)


def item_assert(ctx: SiteContext) -> tuple[cst.Assert, cst.Call, cst.BaseExpression] | None:
    """`assert t.item() <op> n[, msg]` at the site (the read on either side of one
    elementwise comparison, the other side not shown to be a tensor): (the assert, the
    read, t). In float64, `t.double() <op> n` compares as Python compared the float (or
    the int below 2**53) with the number."""
    f = _Facts(ctx)
    read = ItemToTensor._read(ctx, f)
    if read is None:
        return None
    call, source, _ = read
    comparison = f.parent(call)
    if isinstance(comparison, cst.ComparisonTarget):
        other, comparison = comparison.comparator, f.parent(comparison)
        other = comparison.left if comparison.left is not call else other
    elif isinstance(comparison, cst.Comparison):
        other = comparison.comparisons[0].comparator
    else:
        return None
    stmt = f.parent(comparison)
    if not isinstance(stmt, cst.Assert) or stmt.test is not comparison or len(comparison.comparisons) != 1:
        return None
    if not isinstance(comparison.comparisons[0].operator, COMPARISONS):
        return None
    if f.tensor(other):
        raise Decline("compared with a tensor: the comparison's dtype would change")
    return stmt, call, source


def as_double(source: cst.BaseExpression) -> cst.Call:
    """`source.double()`, parenthesised where needed: what replaces `source.item()` in a comparison."""
    if not isinstance(source, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)) and not source.lpar:
        source = source.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return cst.Call(cst.Attribute(source, cst.Name("double")), [])


class TolistToTensors(Recipe):
    """`ws = t.tolist()` whose elements only feed tensor arithmetic -> `ws = t.detach().unbind(0)`.

    Each element is then a 0-dim tensor where it was a Python number, used as item-to-tensor
    allows (`w * e` with a dimensioned floating tensor `e`, a clamp bound, ...), so the
    results are the same (see the module doc). The list is only iterated (`for w in ws`,
    `zip(ws, experts)`, `enumerate(ws)` in a loop or a comprehension), indexed (`ws[i]`) or measured
    (`len(ws)`), where a tuple of tensors behaves as the list does. `.double()` comes first
    when literal arithmetic follows (`w + 1e-6`), as for one read.
    """

    name = "tolist-to-tensors"
    codes = ("GB0109", "GB0033")
    safety = "safe"
    summary = "keep t.tolist() as t.detach().unbind(0): every element only feeds tensor arithmetic"
    rule = "GB0109"

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        f = _Facts(ctx)
        stop = ctx.enclosing(cst.BaseStatement, cst.BaseSmallStatement)
        calls = (n for n in (ctx.node, *ctx.ancestors()) if isinstance(n, cst.Call) or n is stop)
        call = next((n for n in calls if n is stop or (f.callee(n)[1] == "tolist" and not n.args)), None)
        if not isinstance(call, cst.Call):
            return None
        self._source = f.callee(call)[0]
        if not f.tensor(self._source):
            raise Decline("`.tolist()` of something not shown to be a tensor")
        assign = f.parent(call)
        if not (isinstance(assign, cst.Assign) and assign.value is call and len(assign.targets) == 1):
            raise Decline("the list is not bound to a name")
        target = assign.targets[0].target
        scope = f.scopes.get(target) if isinstance(target, cst.Name) else None
        if not isinstance(scope, FunctionScope) or len(scope.assignments[target.value]) != 1:
            raise Decline("the list's name is not a local bound once")
        is_float = f.dtype(self._source) == "float"
        self._double = False
        (assignment,) = scope.assignments[target.value]
        for ref in assignment.references:
            elements = self._elements(f, ref.node)
            if elements is None:
                raise Decline(f"`{target.value}` is used as a list, not only iterated, indexed or measured")
            for element in elements:
                climbed = ItemToTensor._climb(f, element, is_float)
                if climbed is None or ItemToTensor._feeds_tensor(f, climbed[0]) != _DIMENSIONED:
                    raise Decline("an element does not only feed arithmetic with a dimensioned tensor")
                self._double = self._double or climbed[1]
        return call

    def rewrite(self, node: cst.CSTNode) -> Replacement:
        source = self._source
        if not isinstance(source, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)) and not source.lpar:
            source = source.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        out = cst.Call(cst.Attribute(source, cst.Name("detach")), [])
        if self._double:
            out = cst.Call(cst.Attribute(out, cst.Name("double")), [])
        zero = cst.Arg(cst.Integer("0"))
        return cst.Call(cst.Attribute(out, cst.Name("unbind")), [zero]).with_changes(lpar=node.lpar, rpar=node.rpar)

    @staticmethod
    def _elements(f: _Facts, ref: cst.CSTNode) -> list[cst.BaseExpression] | None:
        """Where the elements of the list named at ``ref`` are used: the loads of a loop
        target, or the subscript itself; [] for `len(ref)`; None for any other use."""
        up = f.parent(ref)
        if isinstance(up, cst.Subscript) and up.value is ref and len(up.slice) == 1:
            index = up.slice[0].slice
            target = isinstance(f.parent(up), (cst.AssignTarget, cst.AugAssign, cst.Del))
            return [up] if isinstance(index, cst.Index) and not target else None
        if isinstance(up, cst.Arg) and up.value is ref and not up.star and up.keyword is None:
            call = f.parent(up)
            scope = f.scopes.get(call.func) if isinstance(call.func, cst.Name) else None
            names = {q.name for q in scope.get_qualified_names_for(call.func)} if scope is not None else set()
            if names == {"builtins.len"} and len(call.args) == 1:
                return []
            loop = f.parent(call) if names in ({"builtins.zip"}, {"builtins.enumerate"}) else None
            if not isinstance(loop, (cst.For, cst.CompFor)) or loop.iter is not call or not isinstance(loop.target, cst.Tuple):
                return None
            if names == {"builtins.enumerate"}:  # `for i, w in enumerate(ws)`: the second name
                k, width = (1, 2) if len(call.args) == 1 else (None, None)
            else:
                k, width = call.args.index(up), len(call.args)
            elements = loop.target.elements
            if k is None or len(elements) != width or not isinstance(elements[k].value, cst.Name):
                return None
            return TolistToTensors._loads(f, elements[k].value)
        if isinstance(up, (cst.For, cst.CompFor)) and up.iter is ref and isinstance(up.target, cst.Name):
            return TolistToTensors._loads(f, up.target)
        return None

    @staticmethod
    def _loads(f: _Facts, target: cst.Name) -> list[cst.BaseExpression] | None:
        """The reads of a loop target that the loop alone binds."""
        scope = f.scopes.get(target)
        found = scope.assignments[target.value] if scope is not None else ()
        if len(found) != 1:
            return None
        return [r.node for r in next(iter(found)).references]


def _literal_string(expr: cst.BaseExpression) -> bool:
    if isinstance(expr, cst.ConcatenatedString):
        return _literal_string(expr.left) and _literal_string(expr.right)
    return isinstance(expr, cst.SimpleString)


RECIPES = (ItemToTensor, TolistToTensors, AssertItemToTensor)
