"""Numpy math on Python numbers reaching a Python test: the ``math`` module's instead.

Dynamo traces numpy as tensor code (``torch._numpy``): ``np.lcm(a, b)`` of two
Python ints is a tensor inside compiled code, and a Python test on it breaks
(GB0170; ``int()`` of it GB0208, ``range()`` of it GB0059). Checked on torch
2.13: ``np.lcm``, ``np.gcd``, ``np.sqrt``, ``np.log``, ``np.exp``, ``np.floor``,
``np.ceil``, ``np.prod``, ``np.maximum``, ``np.minimum``, ``np.abs`` and
``np.power`` on ints/floats all become tensors; ``np.pi * 2`` stays a Python
float (no break). ``math.lcm(a, b)`` is a Python int that Dynamo folds::

    def _lcm_chunk_len(config):
        return np.lcm(config.lsh_chunk, config.local_chunk)   # the test `n % _lcm_chunk_len(cfg) != 0` breaks

The numpy call is found where the test reads it: inline, in a local of the
same function, or returned by a helper of the file (a module-level function
or a method of the class) that the test or a local calls, up to three such
steps. Every argument must be a Python number: a literal, ``len``/``int``/
``float`` of anything, a shape entry, a config attribute, a ``self``
attribute this file only ever sets to numbers, names bound once to those,
and arithmetic of them. A tensor or array argument, or a result used as an
array (``.astype``, indexing), is declined.

What changes: the value is a Python ``int``/``float`` instead of a numpy
scalar. ``str``/f-strings/``%d`` print the same (``repr`` does not:
``np.int64(64)``); ``isinstance(v, int)`` turns true; and where numpy warns
and carries on the Python value raises: a later ``n % v`` with ``v == 0``
(numpy: ``RuntimeWarning`` and 0), an overflow past int64 (numpy wraps),
``sqrt``/``log`` outside their domain (nan/-inf), ``floor``/``ceil`` of
inf/nan. And ``np.log``/``np.exp`` may use numpy's own SIMD loops, which can
round the last bit differently from libm. So:

- ``numpy-to-math-under-compile`` (safe): ``(math.lcm(a, b) if
  torch.compiler.is_compiling() else np.lcm(a, b))``. Eager runs numpy exactly
  as before; Dynamo folds ``is_compiling()`` to True and computes the math
  value, numpy's for every argument numpy takes without a warning or an
  overflow. Only for functions that are total there: ``lcm``, ``gcd``;
  ``prod``, ``abs``, ``maximum``/``minimum`` (as ``max``/``min``) on
  arguments shown to be ints; ``sqrt`` of one shown to be non-negative.
- ``numpy-to-math`` (unsafe): ``math.lcm(a, b)`` in place, for those and for
  ``sqrt``, ``log``, ``log2``, ``log10``, ``exp``, ``floor``/``ceil`` (as
  ``float(math.floor(x))``: numpy returns a float) on any Python numbers.
"""

from __future__ import annotations

import libcst as cst

from gbfix.recipes.analysis import (
    builtin_at,
    called,
    global_bindings,
    name_of,
    qualified_names,
    single_binding,
)
from gbfix.recipes.base import Decline, Recipe, Replacement, SiteContext
from gbfix.recipes.tree import nodes, walk

# numpy function -> (replacement as a format of the argument list, how many
# arguments, what the safe recipe needs of them: "any" number, "int"s, "nonneg",
# or None: the unsafe recipe only).
_FUNCS: dict[str, tuple[str, int, str | None]] = {
    "lcm": ("math.lcm({})", 2, "any"),  # numpy and math both raise TypeError on floats
    "gcd": ("math.gcd({})", 2, "any"),
    "prod": ("math.prod({})", 1, "int"),
    "abs": ("abs({})", 1, "int"),
    "absolute": ("abs({})", 1, "int"),
    "maximum": ("max({})", 2, "int"),  # floats: numpy propagates nan from either side, max() does not
    "minimum": ("min({})", 2, "int"),
    "sqrt": ("math.sqrt({})", 1, "nonneg"),  # correctly rounded in both
    "log": ("math.log({})", 1, None),
    "log2": ("math.log2({})", 1, None),
    "log10": ("math.log10({})", 1, None),
    "exp": ("math.exp({})", 1, None),
    "floor": ("float(math.floor({}))", 1, None),
    "ceil": ("float(math.ceil({}))", 1, None),
}
_STEPS = 3  # names and helper returns followed back from the test
_WIDTH = 88  # a longer guarded form is laid out one part a line
_INT_CALLS = frozenset({"len", "int", "round"})
_NUMBER_CALLS = _INT_CALLS | {"float", "abs", "min", "max"}
_SHAPE_METHODS = frozenset({"size", "dim", "numel", "ndimension", "nelement"})
_SHAPE_ATTRS = frozenset({"shape", "ndim"})
_SETTERS = frozenset({"register_buffer", "register_parameter", "setattr"})


def _numpy_name(ctx: SiteContext, call: cst.Call) -> str | None:
    """``lcm`` for a call of ``numpy.lcm`` (however imported) this recipe knows."""
    found = {q.removeprefix("numpy.") for q in qualified_names(ctx, call.func) if q.startswith("numpy.")}
    return found.pop() if len(found) == 1 and next(iter(found)) in _FUNCS else None


class _Finder:
    """The numpy calls whose values reach an expression, through locals and helper returns."""

    def __init__(self, ctx: SiteContext) -> None:
        self.ctx = ctx
        self.seen: set[int] = set()
        self.found: list[cst.Call] = []

    def expression(self, expr: cst.CSTNode, steps: int) -> None:
        if id(expr) in self.seen:
            return
        self.seen.add(id(expr))
        for n in walk(expr, nested=False):
            if isinstance(n, cst.Call):
                if _numpy_name(self.ctx, n):
                    self.found.append(n)
                elif steps:
                    for fn in self.helpers(n):
                        for ret in nodes(fn.body, cst.Return, nested=False):
                            if ret.value is not None:
                                self.expression(ret.value, steps - 1)
            elif isinstance(n, cst.Name) and steps:
                value = self.local(n)
                if value is not None:
                    self.expression(value, steps - 1)

    def local(self, name: cst.Name) -> cst.BaseExpression | None:
        """The value of the one assignment to ``name`` in its function."""
        fn = self.ctx.enclosing(cst.FunctionDef, node=name)
        return None if fn is None else single_binding(fn, name.value)

    def helpers(self, call: cst.Call) -> list[cst.FunctionDef]:
        """The function of this file ``call`` runs: a module-level ``f(...)`` or ``self.f(...)``."""
        recv, fname = called(call)
        if fname is None:
            return []
        if recv is None:
            if builtin_at(self.ctx, call, fname):
                return []
            defs = [b for b in global_bindings(self.ctx, fname) if isinstance(b, cst.FunctionDef)]
            return defs if len(defs) == len(global_bindings(self.ctx, fname)) == 1 else []
        if name_of(recv) != "self":
            return []
        cls = self.ctx.enclosing(cst.ClassDef, node=call)
        if cls is None:
            return []
        return [s for s in cls.body.body if isinstance(s, cst.FunctionDef) and s.name.value == fname][:1]


class _Numbers:
    """Whether an expression is shown to be a Python number (an int, non-negative)."""

    def __init__(self, ctx: SiteContext) -> None:
        self.ctx = ctx
        self.active: set[int] = set()

    def kind(self, e: cst.BaseExpression) -> set[str] | None:
        """None: not shown to be a number; else what else is shown of it ({"int", "nonneg"})."""
        if id(e) in self.active:
            return None
        self.active.add(id(e))
        try:
            return self._kind(e)
        finally:
            self.active.discard(id(e))

    def _kind(self, e: cst.BaseExpression) -> set[str] | None:
        if isinstance(e, cst.Integer):
            return {"int", "nonneg"}
        if isinstance(e, cst.Float):
            return {"nonneg"}
        if isinstance(e, cst.UnaryOperation) and isinstance(e.operator, (cst.Minus, cst.Plus)):
            inner = self.kind(e.expression)
            return None if inner is None else inner & ({"int", "nonneg"} if isinstance(e.operator, cst.Plus) else {"int"})
        if isinstance(e, cst.BinaryOperation):
            return self._arithmetic(e)
        if isinstance(e, cst.Call):
            return self._call(e)
        if isinstance(e, cst.Subscript):
            return self._shape_entry(e)
        if isinstance(e, cst.Attribute):
            return self._attribute(e)
        if isinstance(e, cst.Name):
            return self._name(e)
        return None

    def _arithmetic(self, e: cst.BinaryOperation) -> set[str] | None:
        ops = (cst.Add, cst.Subtract, cst.Multiply, cst.Divide, cst.FloorDivide, cst.Modulo)
        if not isinstance(e.operator, ops):
            return None
        left, right = self.kind(e.left), self.kind(e.right)
        if left is None or right is None:
            return None
        both = left & right
        if isinstance(e.operator, cst.Divide):
            both.discard("int")
        if isinstance(e.operator, cst.Subtract):
            both.discard("nonneg")
        return both

    def _call(self, e: cst.Call) -> set[str] | None:
        recv, fname = called(e)
        if recv is None and fname in _NUMBER_CALLS and builtin_at(self.ctx, e, fname):
            if fname == "len":
                return {"int", "nonneg"}
            if fname in ("int", "round"):
                return {"int"}
            return set()  # float(), abs(), min(), max() of anything: a number, or a raise as before
        if recv is not None and fname in _SHAPE_METHODS:
            return {"int", "nonneg"}
        return None

    def _shape_entry(self, e: cst.Subscript) -> set[str] | None:
        """``x.shape[i]``, ``x.size()[i]``, ``shape[-1]`` of a local bound to a shape."""
        if len(e.slice) != 1 or not isinstance(e.slice[0].slice, cst.Index):
            return None
        return {"int", "nonneg"} if self._shape(e.value) else None

    def _shape(self, e: cst.BaseExpression) -> bool:
        if isinstance(e, cst.Attribute):
            return e.attr.value == "shape"
        if isinstance(e, cst.Call):
            recv, fname = called(e)
            return recv is not None and fname == "size" and not e.args
        if isinstance(e, cst.Name):
            fn = self.ctx.enclosing(cst.FunctionDef, node=e)
            value = None if fn is None else single_binding(fn, e.value)
            return value is not None and self._shape(value)
        return False

    def _attribute(self, e: cst.Attribute) -> set[str] | None:
        """``x.ndim``, a config attribute, or a ``self`` attribute this file sets only to numbers."""
        if e.attr.value in _SHAPE_ATTRS:
            return {"int", "nonneg"} if e.attr.value == "ndim" else None
        chain = self.ctx.code(e).split(".")
        if any(part.isidentifier() is False for part in chain):
            return None  # a call or an index in the chain: not a plain attribute read
        values = self._attribute_values(e.attr.value)
        if values is None:
            return None
        if not values:  # never set here: a config attribute is a number (or None, which both reject)
            return set() if any("config" in p or p == "cfg" for p in chain[:-1]) else None
        kinds = [self.kind(v) for v in values]
        if any(k is None for k in kinds):
            return None
        return set.intersection(*kinds)

    def _attribute_values(self, attr: str) -> list[cst.BaseExpression] | None:
        """The values this file assigns to ``<anything>.attr``; None if it is also a buffer,
        a parameter or bound otherwise (``+=``, unpacking, ``setattr``)."""
        out = []
        for n in walk(self.ctx.module):
            if isinstance(n, cst.Assign):
                for t in n.targets:
                    if isinstance(t.target, cst.Attribute) and t.target.attr.value == attr:
                        if len(n.targets) != 1:
                            return None
                        out.append(n.value)
                    elif any(isinstance(x, cst.Attribute) and x.attr.value == attr for x in walk(t.target)):
                        return None
            elif isinstance(n, (cst.AugAssign, cst.AnnAssign)) and isinstance(n.target, cst.Attribute):
                if n.target.attr.value == attr:
                    return None
            elif isinstance(n, cst.Call) and called(n)[1] in _SETTERS and any(
                isinstance(a.value, cst.SimpleString) and a.value.evaluated_value == attr for a in n.args
            ):
                return None
        return out

    def _name(self, e: cst.Name) -> set[str] | None:
        fn = self.ctx.enclosing(cst.FunctionDef, node=e)
        if fn is not None:
            for p in nodes(fn.params, cst.Param):
                if p.name.value == e.value:
                    annotated = p.annotation is not None and self.ctx.code(p.annotation.annotation)
                    return {"int"} if annotated == "int" else set() if annotated == "float" else None
            value = single_binding(fn, e.value)
            if value is not None:
                return self.kind(value)
        bound = [] if builtin_at(self.ctx, e, e.value) else global_bindings(self.ctx, e.value)
        if len(bound) == 1 and isinstance(bound[0], cst.Name):
            up = self.ctx.file.parent(self.ctx.file.parent(bound[0]))
            if isinstance(up, cst.Assign) and len(up.targets) == 1:
                return self.kind(up.value)
        return None

    def sequence(self, e: cst.BaseExpression) -> set[str] | None:
        """``np.prod``'s argument: a list/tuple of numbers, or a shape (ints)."""
        if isinstance(e, (cst.List, cst.Tuple)):
            if not e.elements or any(isinstance(el, cst.StarredElement) for el in e.elements):
                return None
            kinds = [self.kind(el.value) for el in e.elements]
            return None if any(k is None for k in kinds) else set.intersection(*kinds)
        if self._shape(e):
            return {"int", "nonneg"}
        return None


def _args(call: cst.Call, count: int) -> list[cst.BaseExpression]:
    if len(call.args) != count or any(a.keyword is not None or a.star for a in call.args):
        raise Decline(f"numpy call `{cst.Module([]).code_for_node(call)}` has keyword, starred or extra arguments")
    return [a.value for a in call.args]


def _uses_as_array(ctx: SiteContext, call: cst.Call) -> bool:
    """The result is used as an array: an attribute or an index of it, directly or of
    the local it is stored in."""
    parent = ctx.file.parent(call)
    if isinstance(parent, (cst.Attribute, cst.Subscript)) and parent.value is call:
        return True
    if isinstance(parent, cst.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0].target, cst.Name):
        fn = ctx.enclosing(cst.FunctionDef, node=call)
        name = parent.targets[0].target.value
        for n in nodes(fn or ctx.module, (cst.Attribute, cst.Subscript)):
            if name_of(n.value) == name:
                return True
    return False


def _bound_elsewhere(ctx: SiteContext, call: cst.Call, names: set[str]) -> bool:
    """``math`` (or a builtin the replacement calls) means something else at ``call``."""
    scope = ctx.file.scopes.get(call)
    if scope is None:
        return True
    if "math" in names and scope["math"] and {q.name for q in scope.get_qualified_names_for("math")} != {"math"}:
        return True
    return any(not builtin_at(ctx, call, b) for b in names - {"math"})


class _NumpyToMath(Recipe):
    codes = ("GB0170", "GB0208", "GB0059")  # the test, `int()` of the value, `range()` of it
    rule = "GB0170"
    _safe_only = True

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        start = ctx.node
        if isinstance(start, (cst.If, cst.While, cst.IfExp)):
            start = start.test
        elif isinstance(start, cst.For):
            start = start.iter
        elif isinstance(start, cst.BaseCompoundStatement):
            return None
        finder = _Finder(ctx)
        finder.expression(start, _STEPS)
        found = list({id(c): c for c in finder.found}.values())
        if not found:
            return None
        if len(found) > 1:
            raise Decline("several numpy values reach the test: rewriting one would leave the break")
        (call,) = found
        fname = _numpy_name(ctx, call)
        template, count, needs = _FUNCS[fname]
        if needs is None and self._safe_only:
            raise Decline(f"np.{fname} may differ from math's in the last bit or raise where numpy gives nan/inf")
        args = _args(call, count)
        numbers = _Numbers(ctx)
        kinds = [numbers.sequence(a) if fname == "prod" else numbers.kind(a) for a in args]
        code = ctx.code(call)
        if any(k is None for k in kinds):
            raise Decline(f"an argument of `{code}` is not shown to be a Python number (a tensor or an array stays numpy)")
        if self._safe_only and needs in ("int", "nonneg") and not all(needs in k for k in kinds):
            what = "an int" if needs == "int" else "non-negative"
            raise Decline(f"an argument of `{code}` is not shown to be {what}: numpy's and the math result may differ")
        if _uses_as_array(ctx, call):
            raise Decline(f"the result of `{code}` is used as an array")
        head = template.partition("(")[0]  # "math.lcm", "abs", "float"
        names = ({"math"} if "math." in template else set()) | ({head} if "." not in head else set())
        if _bound_elsewhere(ctx, call, names):
            raise Decline("`math` (or the builtin the replacement calls) means something else here")
        self._template = template
        return call

    def _math(self, node: cst.Call) -> cst.BaseExpression:
        if "math." in self._template:
            self.need_import("math")
        args = ", ".join(self.ctx.code(a.value) for a in node.args)
        return cst.parse_expression(self._template.format(args))


class NumpyToMathUnderCompile(_NumpyToMath):
    name = "numpy-to-math-under-compile"
    safety = "safe"
    summary = "numpy math on Python numbers -> `(math.f(...) if torch.compiler.is_compiling() else np.f(...))`"

    def rewrite(self, node: cst.CSTNode) -> Replacement | None:
        assert isinstance(node, cst.Call)
        self.need_import("torch")
        guarded = cst.IfExp(
            test=cst.parse_expression("torch.compiler.is_compiling()"),
            body=self._math(node),
            orelse=node.with_changes(lpar=[], rpar=[]),
            lpar=[cst.LeftParen()],
            rpar=[cst.RightParen()],
        )
        return _laid_out(self.ctx, node, guarded)


class NumpyToMath(_NumpyToMath):
    name = "numpy-to-math"
    safety = "unsafe"
    summary = "numpy math on Python numbers -> the math module's (`np.lcm(a, b)` -> `math.lcm(a, b)`)"
    _safe_only = False

    def rewrite(self, node: cst.CSTNode) -> Replacement | None:
        assert isinstance(node, cst.Call)
        return self._math(node).with_changes(lpar=node.lpar, rpar=node.rpar)


def _laid_out(ctx: SiteContext, node: cst.Call, guarded: cst.IfExp) -> cst.IfExp:
    """One part a line (as black would) when the guarded form does not fit the line of
    a ``return`` or an assignment."""
    (line, col), (end_line, end_col) = ctx.file.span(node)
    text = ctx.file.lines[line - 1]
    width = len(text) + len(cst.Module([]).code_for_node(guarded)) - (end_col - col)
    if width <= _WIDTH or end_line != line or not isinstance(ctx.file.parent(node), (cst.Return, cst.Assign)):
        return guarded
    part = cst.ParenthesizedWhitespace(indent=True, last_line=cst.SimpleWhitespace("    "))
    end = cst.ParenthesizedWhitespace(indent=True, last_line=cst.SimpleWhitespace(""))
    return guarded.with_changes(
        lpar=[cst.LeftParen(whitespace_after=part)],
        rpar=[cst.RightParen(whitespace_before=end)],
        whitespace_before_if=part,
        whitespace_before_else=part,
    )


RECIPES = (NumpyToMathUnderCompile, NumpyToMath)
