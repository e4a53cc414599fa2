"""Calls Dynamo cannot trace, answered by making the function around them opaque.

A skipped function (GB0007: ``torch.manual_seed``, ``zlib.crc32``), a numpy
routine or ``ndarray`` method that ``torch._numpy`` lacks (GB0294, GB0158), a
method Dynamo does not model (GB0156: ``io.BytesIO``) or a context manager it
cannot enter (GB0142: ``torch.random.fork_rng()``, ``threading.Lock``) has no
traceable equivalent. When the call sits in a small helper that takes and
returns tensors, the helper can become one opaque node of the graph: the
compiled caller runs it eagerly at run time, so its effects happen exactly as
before, once per call, and the graph no longer breaks. The compiler only needs
to know what it returns; that comes from a fake implementation written from
the helper's calls in an uncompiled run of the program (``Recipe.observe``)::

    def seeded_noise(like, seed):
        torch.manual_seed(seed)
        return torch.randn_like(like)

becomes::

    @torch.library.custom_op(f"gbfix::seeded_noise_{__name__.replace('.', '_')}", mutates_args=())
    def seeded_noise(like: torch.Tensor, seed: int) -> torch.Tensor:
        torch.manual_seed(seed)
        return torch.randn_like(like)


    @seeded_noise.register_fake
    def _seeded_noise_fake(like, seed):
        return torch.empty((like.shape[0], like.shape[1]), dtype=like.dtype, device=like.device)

Each output dimension is, in order of preference, a tensor argument's
dimension that matched it in every observed call (so a new batch size still
works), an int argument that did, or a constant that did not change. The
device and a floating dtype likewise come from an argument, else a constant;
an integer or bool dtype (ids, counts, masks) from the constant first.
Anything else is declined, never guessed. Two recipes:

- ``wrap-custom-op`` (preferred; any backend, inductor included):
  ``torch.library.custom_op`` on a module-level function. Every argument must
  be a tensor, int, float, bool, str, None, or a list of tensors, ints or
  floats (a tuple would arrive as a list), of one kind in every call (None
  aside); the annotations the schema needs are
  added (existing ones are kept, and must agree with the calls). The op has no
  autograd formula: declined when a tensor argument or the result requires
  grad (``register_autograd`` could lift that). Custom ops may not return
  their inputs or views of them: torch raises at run time, which the verifier
  sees; a function visibly returning an argument is declined up front.
- ``wrap-leaf-function`` (fallback; offered when every compile uses the eager
  backend): ``torch._dynamo.decorators.leaf_function``, which needs no
  annotations, also takes nn.Modules (methods of module-level classes too,
  ``self`` being an nn.Module) and supports autograd. Declined when the result
  requires grad but no argument could carry it (a closed-over parameter would
  get no gradient).

Both need tensor outputs (a tensor, or a tuple/list of them): a Python value
returned by a leaf function is frozen at compile time, and control flow on a
value cannot become part of a graph. A call in the file that discards the
result is declined too: aot_eager and inductor drop an op whose output is
unused, and its effects with it. Both decline when the site is not inside
such a function (nested functions, lambdas, decorated, async or generator
functions, a ``forward``, the compiled function itself: passed to
``torch.compile`` in the file, or called straight from module-level code or
from torch in the break's stack), on ``*args``,
``**kwargs`` or positional-only parameters, on ``global``/``nonlocal``, and on
what a wrapped call would do differently: mutating an argument or module
state (in-place ``*_`` methods, item/attribute assignment, ``append``,
``register_buffer``, ``out=``), ``torch.compiler.is_compiling()``, frame
introspection and ``warnings.warn`` with a ``stacklevel`` (torch's frames
would stand between the function and its caller), and returning a global or
an attribute visibly (the fake says a fresh tensor).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import ClassVar

import libcst as cst

from gbfix.recipes.base import Recipe, Replacement, SiteContext
from gbfix.recipes.print_call import global_bindings, qualified_names
from gbfix.recipes.tree import nodes
from gbfix.records import ObservedCall, ValueSpec

# Methods whose result may share memory with their receiver.
_VIEWS = frozenset(
    "view view_as reshape reshape_as flatten unflatten squeeze unsqueeze t transpose permute expand expand_as"
    " narrow select unbind split chunk tensor_split detach contiguous to type float double half bfloat16 int"
    " long bool cpu cuda as_strided diagonal movedim moveaxis swapaxes swapdims unfold view_as_real"
    " view_as_complex broadcast_to numpy".split()
)
# Methods that change their receiver (besides the in-place ``*_`` ones).
_MUTATING = frozenset(
    "append extend insert pop remove clear update setdefault popitem"
    " register_buffer register_parameter register_module add_module apply".split()
)
_BUILTIN_PASS_THROUGH = frozenset("enumerate zip iter reversed list tuple sorted next".split())
# Names whose meaning changes inside an opaque op: what Dynamo folds, what reads the caller's frame.
_TRACE_AWARE = frozenset(
    {"torch.compiler.is_compiling", "torch._dynamo.is_compiling", "torch._utils.is_compiling"}
    | {"torch.compiler.is_dynamo_compiling", "torch._dynamo.external_utils.is_compiling"}
    | {"sys._getframe", "inspect.stack", "inspect.currentframe", "inspect.getouterframes", "traceback.extract_stack"}
)
_LITERAL_DEFAULTS = (cst.Integer, cst.Float, cst.SimpleString)
_PRIMITIVE = {"int": "int", "float": "float", "bool": "bool", "str": "str"}
_ITEM_TYPES = {"tensor": "torch.Tensor", "int": "int", "float": "float"}
_MAX_ITEMS = 64  # the observer describes the first 64 items of a sequence
_FLOATING = re.compile(r"(torch\.)?(float|bfloat|half|double|complex|cfloat|cdouble)")


class _Decline(Exception):
    """The function cannot be wrapped with the same behaviour."""


class _Wrap(Recipe):
    """What both recipes share: finding the function, checking it, deriving the fake."""

    codes = ("GB0007", "GB0294", "GB0158", "GB0156", "GB0142")
    safety = "safe"
    rule = "GB0007"
    methods: ClassVar[bool]  # methods of module-level classes may be wrapped
    kinds: ClassVar[frozenset[str]]  # argument kinds (ValueSpec.kind) the wrapper takes

    def observe(self, ctx: SiteContext) -> cst.FunctionDef | None:
        try:
            return self._function(ctx)
        except _Decline:
            return None

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        try:
            fn = self._function(ctx)
            calls = ctx.observed.get((ctx.site.path, ctx.file.span(fn)[0][0]), ())
            if not calls:
                return None  # not observed yet, or never called in the uncompiled run
            self._fn, self._calls = fn, calls
            self._check_calls(fn, calls)
            self._returns = _returns(calls)
            self._check_state(ctx, fn, calls)
            self._fakes = [_fake_tensor(calls, i) for i in range(self._returns[1])]
            self._prepare(ctx, fn, calls)
        except _Decline:
            return None
        return fn

    # ---- what a recipe adds ----

    def _prepare(self, ctx: SiteContext, fn: cst.FunctionDef, calls: Sequence[ObservedCall]) -> None:
        """Recipe-specific checks and plans; raises _Decline."""

    def _decorate(self, fn: cst.FunctionDef) -> cst.FunctionDef:
        raise NotImplementedError

    def rewrite(self, node: cst.CSTNode) -> Replacement | None:
        self.need_import("torch")
        fn = self._fn
        fake = _parse_def(
            f"@{fn.name.value}.register_fake\n"
            f"def {_fake_name(fn)}({_plain_params(fn)}):\n"
            f"    # Added by gbfix: the shapes, dtypes and devices of what {fn.name.value} returned"
            f" in {len(self._calls)} uncompiled call{'s' if len(self._calls) > 1 else ''}.\n"
            f"    return {self._fake_result()}\n"
        )
        blank = [cst.EmptyLine(indent=False)] * (1 if self._in_class else 2)
        return cst.FlattenSentinel([self._decorate(fn), fake.with_changes(leading_lines=blank)])

    def _fake_result(self) -> str:
        kind = self._returns[0]
        if kind == "tensor":
            return self._fakes[0]
        opening, closing = "[]" if kind == "list" else "()"
        joined = ", ".join(self._fakes) + ("," if len(self._fakes) == 1 and kind == "tuple" else "")
        if len(joined) <= 80:
            return f"{opening}{joined}{closing}"
        # one output a line (libcst adds a class body's indentation)
        return opening + "".join(f"\n        {f}," for f in self._fakes) + f"\n    {closing}"

    # ---- the function ----

    def _function(self, ctx: SiteContext) -> cst.FunctionDef:
        scope = ctx.enclosing(cst.FunctionDef, cst.Lambda, cst.ClassDef)
        if not isinstance(scope, cst.FunctionDef) or not any(a is scope.body for a in (ctx.node, *ctx.ancestors())):
            raise _Decline("not in a function's body")
        fn = scope
        self._in_class = _placement(ctx, fn)
        if self._in_class is None or (self._in_class and not self.methods):
            raise _Decline("not a module-level function")
        if fn.decorators or fn.asynchronous or nodes(fn.body, cst.Yield, nested=False):
            raise _Decline("decorated, async or a generator")
        if fn.name.value in ("forward", "__call__") or fn.name.value.startswith("__"):
            raise _Decline("a module's forward, or a special method")
        if _compiled(ctx, fn) or _entered_from_eager(ctx):
            raise _Decline("the compiled function itself")
        params = fn.params
        if isinstance(params.star_arg, cst.Param) or params.star_kwarg is not None or params.posonly_params:
            raise _Decline("*args, **kwargs or positional-only parameters")
        if nodes(fn.body, (cst.Global, cst.Nonlocal)):
            raise _Decline("rebinds a global")
        if any(qualified_names(ctx, n) & _TRACE_AWARE for n in nodes(fn.body, (cst.Name, cst.Attribute))):
            raise _Decline("asks whether it is being compiled, or reads its caller's frame")
        if any(_warns_above(ctx, c) for c in nodes(fn.body, cst.Call)):
            raise _Decline("a warning attributed to a caller")
        if _names_taken(ctx, fn):
            raise _Decline("the function's name is rebound, or the fake's is taken")
        if _result_dropped(ctx, fn):
            raise _Decline("a call discards the result")
        return fn

    def _check_calls(self, fn: cst.FunctionDef, calls: Sequence[ObservedCall]) -> None:
        names = [p.name.value for p in _all_params(fn)]
        for call in calls:
            if [n for n, _ in call.args] != names:
                raise _Decline("the observed arguments do not match the signature")
            for _, spec in call.args:
                if not _kind_ok(spec, self.kinds):
                    raise _Decline(f"an argument of kind {spec.kind} {spec.type_name}")

    def _check_state(self, ctx: SiteContext, fn: cst.FunctionDef, calls: Sequence[ObservedCall]) -> None:
        """No visible mutation of what the caller passed (or of ``self``); no aliasing return."""
        flow = _Flow(ctx, fn)
        mutable = {n for call in calls for n, s in call.args if s.kind not in ("int", "float", "bool", "str", "none")}
        if flow.mutates(mutable):
            raise _Decline("mutates an argument or module state")
        held = flow.derived({p.name.value for p in _all_params(fn)} | flow.globals)
        if any(r.value is None or flow.aliases(r.value, held) for r in nodes(fn.body, cst.Return, nested=False)):
            raise _Decline("returns an argument, a global or a view of one")


class WrapCustomOp(_Wrap):
    name = "wrap-custom-op"
    requires = frozenset({"custom_op"})
    summary = "make the function around the untraceable call a custom op, with a fake from its observed calls"
    methods = False
    kinds = frozenset({"tensor", "int", "float", "bool", "str", "none", "list", "tuple"})

    def _prepare(self, ctx: SiteContext, fn: cst.FunctionDef, calls: Sequence[ObservedCall]) -> None:
        for call in calls:
            specs = [s for _, s in call.args] + [call.result]
            if any(t.requires_grad for s in specs for t in _tensors(s)):
                raise _Decline("autograd: a custom op without register_autograd has no gradient")
        for p in _all_params(fn):
            if p.default is not None and not _literal_default(p.default):
                raise _Decline("a default the op schema may not take")
        self._annotations = {p.name.value: _annotation(ctx, p, calls) for p in _all_params(fn)}
        self._return_annotation = _return_annotation(ctx, fn, self._returns)

    def _decorate(self, fn: cst.FunctionDef) -> cst.FunctionDef:
        op = fn.name.value.lstrip("_")  # an op name starting with `__` is mangled in inductor's code
        # Named after the module at run time, as several modules may wrap a function of one name.
        decorator = f"torch.library.custom_op(f\"gbfix::{op}_{{__name__.replace('.', '_')}}\", mutates_args=())"
        annotations = self._annotations

        class _Annotate(cst.CSTTransformer):
            def leave_Param(self, original: cst.Param, updated: cst.Param) -> cst.Param:
                new = annotations.get(original.name.value)
                if new is None:
                    return updated
                return updated.with_changes(annotation=_annotation_node(new), equal=_equal(updated, " "))

        returns = fn.returns if self._return_annotation is None else _annotation_node(self._return_annotation)
        decorators = [cst.Decorator(cst.parse_expression(decorator))]
        annotated = fn.with_changes(decorators=decorators, params=fn.params.visit(_Annotate()), returns=returns)
        return _one_param_a_line(annotated)


class WrapLeafFunction(_Wrap):
    name = "wrap-leaf-function"
    requires = frozenset({"leaf_function"})
    summary = "make the function around the untraceable call a leaf_function, with a fake from its observed calls"
    methods = True
    kinds = frozenset({"tensor", "int", "float", "bool", "str", "none", "list", "tuple", "module"})

    def _prepare(self, ctx: SiteContext, fn: cst.FunctionDef, calls: Sequence[ObservedCall]) -> None:
        for call in calls:
            carriers = [t for _, s in call.args for t in _tensors(s) if t.requires_grad]
            modules = [s for _, s in call.args if s.kind == "module"]
            if any(t.requires_grad for t in _tensors(call.result)) and not carriers and not modules:
                raise _Decline("the result's gradient would come from a closed-over tensor")

    def _decorate(self, fn: cst.FunctionDef) -> cst.FunctionDef:
        leaf = cst.parse_expression("torch._dynamo.decorators.leaf_function")
        return fn.with_changes(decorators=[cst.Decorator(leaf)])


# ---- where the function is -------------------------------------------------------------


def _placement(ctx: SiteContext, fn: cst.FunctionDef) -> bool | None:
    """False: at module level; True: in a module-level class's body; None: anywhere else."""
    chain = [a for a in ctx.ancestors(fn) if not isinstance(a, cst.IndentedBlock)]
    if chain and isinstance(chain[0], cst.Module):
        return False
    if len(chain) >= 2 and isinstance(chain[0], cst.ClassDef) and isinstance(chain[1], cst.Module):
        return not chain[0].decorators or None
    return None


def _compiled(ctx: SiteContext, fn: cst.FunctionDef) -> bool:
    """The module hands the function to torch.compile (``torch.compile(fn)``, ``torch.compile(self.fn)``)."""
    for call in nodes(ctx.module, cst.Call):
        if call.args and qualified_names(ctx, call.func) == {"torch.compile"}:
            target = call.args[0].value
            if isinstance(target, cst.Attribute):
                target = target.attr
            if isinstance(target, cst.Name) and target.value == fn.name.value:
                return True
    return False


def _entered_from_eager(ctx: SiteContext) -> bool:
    """The break's frame was called by module-level code or by torch (a compiled
    module's ``__call__``, a hook): Dynamo compiled that frame itself, the root of
    its region, so wrapping it would leave nothing to compile. (A function
    compiled in another file is found this way, ``_compiled`` finds the others.)"""
    stack = ctx.site.brk.stack
    at = [i for i, f in enumerate(stack) if f.line == ctx.site.line and Path(os.path.realpath(f.file)) == ctx.site.path]
    if not at or at[-1] == 0:
        return False  # no caller recorded
    caller = stack[at[-1] - 1]
    return caller.name == "<module>" or "torch" in Path(caller.file).parts


def _result_dropped(ctx: SiteContext, fn: cst.FunctionDef) -> bool:
    """A call in this file discards the function's result: the compiler would drop the
    op as dead code (aot_eager and inductor do), and its effects with it."""
    for call in nodes(ctx.module, cst.Call):
        func = call.func.attr if isinstance(call.func, cst.Attribute) else call.func
        if isinstance(func, cst.Name) and func.value == fn.name.value and isinstance(ctx.file.parent(call), cst.Expr):
            return True
    return False


def _names_taken(ctx: SiteContext, fn: cst.FunctionDef) -> bool:
    if _placement(ctx, fn):
        body = ctx.enclosing(cst.ClassDef, node=fn).body.body
        names = [_bound_name(s) for s in body]
        return names.count(fn.name.value) != 1 or _fake_name(fn) in names
    return len(global_bindings(ctx, fn.name.value)) != 1 or bool(global_bindings(ctx, _fake_name(fn)))


def _bound_name(stmt: cst.CSTNode) -> str | None:
    if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
        return stmt.name.value
    if isinstance(stmt, cst.SimpleStatementLine) and isinstance(stmt.body[0], cst.Assign):
        target = stmt.body[0].targets[0].target
        return target.value if isinstance(target, cst.Name) else None
    return None


def _fake_name(fn: cst.FunctionDef) -> str:
    return f"_{fn.name.value.lstrip('_')}_fake"


def _all_params(fn: cst.FunctionDef) -> list[cst.Param]:
    return [*fn.params.params, *fn.params.kwonly_params]


def _plain_params(fn: cst.FunctionDef) -> str:
    """The function's parameter list without annotations (defaults kept)."""

    class _Strip(cst.CSTTransformer):
        def leave_Param(self, original: cst.Param, updated: cst.Param) -> cst.Param:
            return updated.with_changes(annotation=None, equal=_equal(updated, ""))

    return cst.Module([]).code_for_node(fn.params.visit(_Strip()))


def _one_param_a_line(fn: cst.FunctionDef) -> cst.FunctionDef:
    """A module-level def whose annotated header grew past 100 characters, laid out one parameter a line."""
    code = cst.Module([]).code_for_node
    returns = f" -> {code(fn.returns.annotation)}" if fn.returns is not None else ""
    params = code(fn.params)
    if len(f"def {fn.name.value}({params}){returns}:") <= 100 or "\n" in params:
        return fn
    items = [code(p.with_changes(comma=cst.MaybeSentinel.DEFAULT)) for p in fn.params.params]
    kwonly = [code(p.with_changes(comma=cst.MaybeSentinel.DEFAULT)) for p in fn.params.kwonly_params]
    items += ["*", *kwonly] if kwonly else []
    header = cst.parse_statement(f"def f(\n{''.join(f'    {i},{chr(10)}' for i in items)}){returns}:\n    pass\n")
    assert isinstance(header, cst.FunctionDef)
    return fn.with_changes(params=header.params, whitespace_before_params=header.whitespace_before_params)


def _equal(param: cst.Param, space: str) -> cst.AssignEqual | cst.MaybeSentinel:
    """The ``=`` before a default, spaced as PEP 8 has it with (" ") or without ("") an annotation."""
    if param.default is None:
        return param.equal
    ws = cst.SimpleWhitespace(space)
    return cst.AssignEqual(whitespace_before=ws, whitespace_after=ws)


def _parse_def(code: str) -> cst.FunctionDef:
    stmt = cst.parse_module(code).body[0]
    assert isinstance(stmt, cst.FunctionDef)
    return stmt


def _warns_above(ctx: SiteContext, call: cst.Call) -> bool:
    """``warnings.warn`` with a stacklevel: it would point into torch's frames."""
    if qualified_names(ctx, call.func) != {"warnings.warn"}:
        return False
    level = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == "stacklevel"), None)
    positional = [a for a in call.args if a.keyword is None]
    level = level if level is not None else positional[2].value if len(positional) > 2 else None
    return level is not None and not (isinstance(level, cst.Integer) and level.value == "1")


# ---- state: mutation and aliasing ------------------------------------------------------


class _Flow:
    """Which names of one function may hold an object the caller also holds (or a
    part or view of one), and what the function does to them."""

    def __init__(self, ctx: SiteContext, fn: cst.FunctionDef) -> None:
        self.fn = fn
        scope = ctx.file.scopes.get(ctx.module)
        assignments = [] if scope is None else list(scope.assignments)
        self.modules = {a.name for a in assignments if isinstance(a.node, (cst.Import, cst.ImportFrom))}
        own = ctx.file.scopes.get(fn.body.body[0]) if fn.body.body else None
        local = set() if own is None else {a.name for a in own.assignments}
        # the module's globals the function can see (not shadowed by its locals), imports aside
        self.globals = {a.name for a in assignments} - local - self.modules

    def root(self, expr: cst.BaseExpression) -> str | None:
        """The name an expression may be (part or view of): through attributes,
        subscripts, alias-returning methods (``x.view(...)``, ``torch.flatten(x)``)
        and ``enumerate``/``zip``/... of one. None: a fresh value (``x.sum()``, ``self.proj(x)``)."""
        while True:
            if isinstance(expr, (cst.Attribute, cst.Subscript)):  # `self.cache`, `x.T`, `x[0]`
                expr = expr.value
            elif isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value in _VIEWS:
                receiver = self.root(expr.func.value)
                if receiver not in self.modules:
                    return receiver
                if not expr.args:  # `torch.flatten(x)`: the function form
                    return None
                expr = expr.args[0].value
            elif isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.args:
                if expr.func.value not in _BUILTIN_PASS_THROUGH:
                    return None
                expr = expr.args[0].value
            else:
                return expr.value if isinstance(expr, cst.Name) else None

    def derived(self, seeds: set[str]) -> set[str]:
        """``seeds`` plus the locals bound to one of them (or a part or view of one)."""
        derived = set(seeds)
        bindings: list[tuple[cst.CSTNode, cst.BaseExpression]] = []
        for node in nodes(self.fn.body, (cst.Assign, cst.For, cst.WithItem)):
            if isinstance(node, cst.Assign):
                bindings += [(t.target, node.value) for t in node.targets]
            elif isinstance(node, cst.For):
                bindings.append((node.target, node.iter))
            elif node.asname is not None:
                bindings.append((node.asname.name, node.item))
        changed = True
        while changed:
            changed = False
            for target, value in bindings:
                values = [e.value for e in value.elements] if isinstance(value, (cst.Tuple, cst.List)) else [value]
                if any(self.root(v) in derived for v in values):
                    for name in nodes(target, cst.Name):
                        if name.value not in derived:
                            derived.add(name.value)
                            changed = True
        return derived

    def mutates(self, seeds: set[str]) -> bool:
        """Item/attribute assignment, ``+=``, an in-place or mutating method, ``out=``, on one of ``seeds``."""
        derived = self.derived(seeds)
        for node in nodes(self.fn.body, (cst.Assign, cst.AugAssign, cst.AnnAssign, cst.Del)):
            targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
            for target in _unpacked(targets):
                if isinstance(target, (cst.Attribute, cst.Subscript)) and self.root(target) in derived:
                    return True
                # `x += 1` on a tensor is in place
                if isinstance(node, cst.AugAssign) and isinstance(target, cst.Name) and target.value in derived:
                    return True
        for call in nodes(self.fn.body, cst.Call):
            if any(a.keyword is not None and a.keyword.value == "out" for a in call.args):
                return True
            func = call.func
            name = func.attr.value if isinstance(func, cst.Attribute) else getattr(func, "value", "")
            in_place = name.endswith("_") and not name.endswith("__") and name.strip("_") != ""
            if isinstance(func, cst.Attribute) and self.root(func.value) in derived and (in_place or name in _MUTATING):
                return True
            if (in_place or name in ("setattr", "delattr")) and any(self.root(a.value) in derived for a in call.args):
                return True  # `torch.nn.init.zeros_(w)`, `setattr(self, ...)`
        return False

    def aliases(self, expr: cst.BaseExpression, names: set[str]) -> bool:
        if isinstance(expr, (cst.Tuple, cst.List)):
            return any(self.aliases(e.value, names) for e in expr.elements)
        return self.root(expr) in names


def _unpacked(targets: list[cst.BaseExpression]) -> list[cst.BaseExpression]:
    """Assignment targets with tuple/list unpacking flattened."""
    out: list[cst.BaseExpression] = []
    for t in targets:
        if isinstance(t, (cst.Tuple, cst.List)):
            out += _unpacked([e.value for e in t.elements])
        else:
            out.append(t)
    return out


# ---- observations ----------------------------------------------------------------------


def _kind_ok(spec: ValueSpec, kinds: frozenset[str]) -> bool:
    if spec.kind not in kinds:
        return False
    return all(_kind_ok(i, kinds - {"module"}) for i in spec.items)


def _tensors(spec: ValueSpec) -> list[ValueSpec]:
    return [spec] if spec.kind == "tensor" else [t for i in spec.items for t in _tensors(i)]


def _returns(calls: Sequence[ObservedCall]) -> tuple[str, int]:
    """("tensor", 1), ("tuple", n) or ("list", n): the same in every call, tensors only."""
    shapes = set()
    for call in calls:
        r = call.result
        if r.kind == "tensor":
            shapes.add(("tensor", 1))
        elif r.kind in ("tuple", "list") and 0 < len(r.items) < _MAX_ITEMS and all(i.kind == "tensor" for i in r.items):
            shapes.add((r.kind, len(r.items)))
        else:
            raise _Decline(f"returns a {r.kind}: only tensors can leave an opaque op unfrozen")
    if len(shapes) != 1:
        raise _Decline("returns different structures")
    return shapes.pop()


def _outputs(calls: Sequence[ObservedCall], index: int) -> list[ValueSpec]:
    return [c.result if c.result.kind == "tensor" else c.result.items[index] for c in calls]


def _fake_tensor(calls: Sequence[ObservedCall], index: int) -> str:
    """``torch.empty(...)`` with the output's shape, dtype and device, each from an
    argument that matched it in every call, else a constant that never changed."""
    outs = _outputs(calls, index)
    ranks = {len(o.shape or ()) for o in outs}
    if len(ranks) != 1:
        raise _Decline("the output's rank changes")
    rank = ranks.pop()
    order = [n for n, _ in calls[0].args]
    tensors = [n for n in order if all(dict(c.args)[n].kind == "tensor" for c in calls)]
    ints = [n for n in order if all(dict(c.args)[n].kind == "int" for c in calls)]

    def arg(call: ObservedCall, name: str) -> ValueSpec:
        return dict(call.args)[name]

    def always(test: Callable[[ObservedCall, ValueSpec], bool]) -> bool:
        return all(test(c, o) for c, o in zip(calls, outs))

    arg_rank = {n: len(arg(calls[0], n).shape or ()) for n in tensors}
    tensors = [n for n in tensors if all(len(arg(c, n).shape or ()) == arg_rank[n] for c in calls)]
    dims = []
    for i in range(rank):
        # a tensor argument's same dim, then its same dim counted from the end, then any of its dims
        candidates = [
            *((n, i) for n in tensors),
            *((n, arg_rank[n] - rank + i) for n in tensors),
            *((n, j) for n in tensors for j in range(arg_rank[n])),
        ]
        candidates = [(n, j) for n, j in candidates if 0 <= j < arg_rank[n]]
        found = next(
            (f"{n}.shape[{j}]" for n, j in candidates if always(lambda c, o: arg(c, n).shape[j] == o.shape[i])),
            None,
        )
        if found is None:
            found = next((n for n in ints if always(lambda c, o: arg(c, n).value == o.shape[i])), None)
        if found is None and always(lambda c, o: o.shape[i] == outs[0].shape[i]):
            found = str(outs[0].shape[i])
        if found is None:
            raise _Decline("an output dimension that no argument predicts")
        dims.append(found)

    def pick(field: str, constant: Callable[[str], str], fixed_first: bool = False) -> str:
        values = {getattr(o, field) for o in outs}
        fixed = constant(next(iter(values))) if len(values) == 1 and None not in values else None
        if fixed_first and fixed is not None:
            return fixed
        for name in tensors:
            if always(lambda c, o: getattr(arg(c, name), field) == getattr(o, field)):
                return f"{name}.{field}"
        if fixed is None:
            raise _Decline(f"the output's {field} changes")
        return fixed

    # Integer and bool outputs (ids, counts, masks) keep their dtype whatever the
    # inputs'; floating ones usually follow an input's (a float16 model's).
    floating = all(_FLOATING.match(o.dtype or "") for o in outs)
    dtype = pick("dtype", lambda v: v if v.startswith("torch.") else f"torch.{v}", fixed_first=not floating)
    device = pick("device", lambda v: f'"{v}"')
    shape = f"({dims[0]},)" if rank == 1 else f"({', '.join(dims)})"
    return f"torch.empty({shape}, dtype={dtype}, device={device})"


# ---- annotations -----------------------------------------------------------------------


def _observed_type(specs: list[ValueSpec]) -> str | None:
    """The schema type of a parameter's observed values; None when all were None."""
    types = set()
    for s in specs:
        if s.kind in ("tuple", "list"):
            items = {i.kind for i in s.items}
            if len(items) != 1 or next(iter(items)) not in _ITEM_TYPES:
                raise _Decline("a sequence argument that is empty or not of one item type")
            types.add(f"list[{_ITEM_TYPES[items.pop()]}]")
        elif s.kind == "tensor":
            types.add("torch.Tensor")
        elif s.kind in _PRIMITIVE:
            types.add(_PRIMITIVE[s.kind])
        elif s.kind != "none":
            raise _Decline(f"an argument of kind {s.kind}")
    if len(types) > 1:
        raise _Decline("an argument of several kinds")
    if not types:
        return None
    t = types.pop()
    return f"{t} | None" if any(s.kind == "none" for s in specs) else t


def _annotation(ctx: SiteContext, param: cst.Param, calls: Sequence[ObservedCall]) -> str | None:
    """The annotation to write on ``param``: None keeps the one it has.

    A parameter that was None in every call gets ``torch.Tensor | None`` (what
    such a parameter usually is) unless it is annotated."""
    specs = [dict(c.args)[param.name.value] for c in calls]
    if any(s.kind == "tuple" for s in specs):
        raise _Decline("a tuple argument: the op would pass a list")
    observed = _observed_type(specs)
    if param.annotation is None:
        return observed or "torch.Tensor | None"
    existing = _canonical(ctx, param.annotation.annotation)
    if observed is None:
        fits = existing is not None and existing.endswith(" | None")
    else:
        fits = existing in (observed, f"{observed} | None")
    if not fits:
        raise _Decline("the annotation disagrees with the observed calls, or the op schema cannot take it")
    return None


def _return_annotation(ctx: SiteContext, fn: cst.FunctionDef, returns: tuple[str, int]) -> str | None:
    kind, n = returns
    wanted = {
        "tensor": "torch.Tensor",
        "tuple": f"tuple[{', '.join(['torch.Tensor'] * n)}]",
        "list": "list[torch.Tensor]",
    }[kind]
    if fn.returns is None:
        return wanted
    if _canonical(ctx, fn.returns.annotation) != wanted:
        raise _Decline("the return annotation disagrees with the observed calls")
    return None


def _canonical(ctx: SiteContext, node: cst.BaseExpression) -> str | None:
    """An annotation in the form ``_observed_type`` writes, or None when it is none of them."""
    if isinstance(node, (cst.Name, cst.Attribute)):
        names = qualified_names(ctx, node)
        if names == {"torch.Tensor"}:
            return "torch.Tensor"
        builtin = {f"builtins.{t}": t for t in ("int", "float", "bool", "str")}
        return builtin.get(next(iter(names)), None) if len(names) == 1 else None
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.BitOr):
        sides = [node.left, node.right]
        nones = [s for s in sides if isinstance(s, cst.Name) and s.value == "None"]
        others = [s for s in sides if s not in nones]
        if len(nones) == 1 and len(others) == 1:
            inner = _canonical(ctx, others[0])
            return None if inner is None or inner.endswith("None") else f"{inner} | None"
        return None
    if isinstance(node, cst.Subscript):
        base = qualified_names(ctx, node.value)
        args = [e.slice.value for e in node.slice if isinstance(e.slice, cst.Index)]
        inner = [_canonical(ctx, a) if not (isinstance(a, cst.Name) and a.value == "None") else "None" for a in args]
        if None in inner:
            return None
        if base == {"typing.Optional"} and len(inner) == 1 and inner[0] != "None":
            return f"{inner[0]} | None"
        if base == {"typing.Union"} and len(inner) == 2 and inner.count("None") == 1:
            return f"{next(i for i in inner if i != 'None')} | None"
        if base & {"builtins.tuple", "typing.Tuple"} and inner and all(i == "torch.Tensor" for i in inner):
            return f"tuple[{', '.join(inner)}]"
        seq = {"builtins.list", "typing.List", "typing.Sequence", "collections.abc.Sequence"}
        if base & seq and len(inner) == 1 and inner[0] in _ITEM_TYPES.values():
            return f"list[{inner[0]}]"
    return None


def _annotation_node(code: str) -> cst.Annotation:
    return cst.Annotation(cst.parse_expression(code))


def _literal_default(node: cst.BaseExpression) -> bool:
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        node = node.expression
    constant = isinstance(node, cst.Name) and node.value in ("None", "True", "False")
    return constant or isinstance(node, _LITERAL_DEFAULTS)


RECIPES = (WrapCustomOp, WrapLeafFunction)
