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
Anything else is declined, never guessed. Three recipes, in this order:

- ``wrap-nonstrict-trace`` (preferred where it applies):
  ``torch._dynamo.nonstrict_trace`` on a module-level function. Dynamo no
  longer reads the body, but AOTAutograd still traces its tensor code with
  fake tensors (inductor fuses it, gradients flow), so no fake is written;
  the Python around the tensors runs once per compile and its values become
  constants of the graph. So only for pure functions that read no tensor data
  (``crc32`` of a name, ``bisect`` over constants, numpy on Python lists; not
  ``.numpy()``, ``.item()``, ``.tolist()``), see ``_impure``, and declined
  when an int or float argument took several values in the observed calls:
  each value would be a recompile, where the break let Dynamo make it dynamic.
- ``wrap-custom-op`` (any backend, inductor included):
  ``torch.library.custom_op`` on a module-level function. Every argument must
  be a tensor, int, float, bool, str, None, or a list of tensors, ints or
  floats (a tuple would arrive as a list), of one kind in every call (None
  aside); the annotations the schema needs are
  added (existing ones are kept, and must agree with the calls). Custom ops
  may not return their inputs or views of them: torch raises at run time,
  which the verifier sees; a function visibly returning an argument is
  declined up front. When an observed call passed a tensor that requires
  grad, the op gets ``register_autograd`` with a recompute backward (see
  ``_Autograd``): a second op runs the function again under autograd on the
  saved inputs, which gives eager's gradients only for a pure function (see
  ``_impure``: no randomness, no I/O, logging or printing that would happen
  twice, no global state), of floating tensor arguments (not lists), with
  positional parameters only, returning a tensor or a tuple of floating
  tensors that all require grad whenever an input does; anything else with
  gradients is declined, as is a result that requires grad with no input
  that does (a closed-over parameter would get none). An input that requires
  grad but does not reach the result gets a zero gradient, where eager leaves
  ``.grad`` alone.
- ``wrap-leaf-function`` (fallback; offered when every compile uses the eager
  backend): ``torch._dynamo.decorators.leaf_function``, which needs no
  annotations, also takes nn.Modules (methods of module-level classes too,
  ``self`` being an nn.Module) and supports autograd (it records the
  function's own graph, effects run once). Declined when the result
  requires grad but no argument could carry it (a closed-over parameter would
  get no gradient).

All need tensor outputs (a tensor, or a tuple/list of them): a Python value
returned by a leaf function is frozen at compile time, and control flow on a
value cannot become part of a graph. A call in the file that discards the
result is declined too: aot_eager and inductor drop an op whose output is
unused, and its effects with it. All decline when the site is not inside
such a function (nested functions, lambdas, decorated, async or generator
functions, a ``forward``, the compiled function itself: passed to
``torch.compile`` in the file, or called straight from module-level code or
from torch in the break's stack), on ``*args``,
``**kwargs`` or positional-only parameters, on ``global``/``nonlocal``, and on
what a wrapped call would do differently: mutating an argument or module
state (in-place ``*_`` methods, item/attribute assignment, ``append``,
``register_buffer``, ``out=``, an ndarray's ``sort()``/``fill()``: an array
from ``t.numpy()`` shares the tensor's memory), ``torch.compiler.is_compiling()``, frame
introspection and ``warnings.warn`` with a ``stacklevel`` (torch's frames
would stand between the function and its caller), and returning a global or
an attribute visibly (the fake says a fresh tensor).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import libcst as cst
from libcst.metadata import BuiltinAssignment

from gbfix.recipes.analysis import global_bindings, qualified_names
from gbfix.recipes.base import Decline, Recipe, Replacement, SiteContext
from gbfix.recipes.tree import nodes, variables
from gbfix.recipes.vocabulary import ALIASING
from gbfix.records import ObservedCall, ValueSpec

# Methods that change their receiver (besides the in-place ``*_`` ones).
_MUTATING = frozenset(
    "append extend insert pop remove clear update setdefault popitem"
    " register_buffer register_parameter register_module add_module apply".split()
)
# ndarray methods that change the array (an array from `t.numpy()` shares the tensor's memory).
_NUMPY_IN_PLACE = frozenset("sort fill resize put partition itemset byteswap setfield".split())
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


class _Wrap(Recipe):
    """What the recipes share: finding the function, checking it, deriving the fake."""

    codes = ("GB0007", "GB0294", "GB0158", "GB0156", "GB0142")
    safety = "safe"
    rule = "GB0007"
    methods: ClassVar[bool]  # methods of module-level classes may be wrapped
    kinds: ClassVar[frozenset[str]]  # argument kinds (ValueSpec.kind) the wrapper takes
    fakes: ClassVar[bool] = True  # the wrapper needs a fake implementation of the function

    def observe(self, ctx: SiteContext) -> cst.FunctionDef | None:
        try:
            return self._function(ctx)
        except Decline:
            return None

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        fn = self._function(ctx)
        calls = ctx.observed.get((ctx.site.path, ctx.file.span(fn)[0][0]), ())
        if not calls:
            raise Decline(f"{fn.name.value} was not called in the uncompiled run")
        self._fn, self._calls = fn, calls
        self._check_calls(fn, calls)
        self._returns = _returns(calls)
        self._check_state(ctx, fn, calls)
        self._fakes = [_fake_tensor(calls, i) for i in range(self._returns[1])] if self.fakes else []
        self._prepare(ctx, fn, calls)
        return fn

    # ---- what a recipe adds ----

    def _prepare(self, ctx: SiteContext, fn: cst.FunctionDef, calls: Sequence[ObservedCall]) -> None:
        """Recipe-specific checks and plans; raises Decline."""

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
            raise Decline("not in a function's body")
        fn = scope
        self._in_class = _placement(ctx, fn)
        if self._in_class is None or (self._in_class and not self.methods):
            raise Decline("not a module-level function")
        if fn.decorators or fn.asynchronous or nodes(fn.body, cst.Yield, nested=False):
            raise Decline("decorated, async or a generator")
        if fn.name.value in ("forward", "__call__") or fn.name.value.startswith("__"):
            raise Decline("a module's forward, or a special method")
        if _compiled(ctx, fn) or _entered_from_eager(ctx):
            raise Decline("the compiled function itself")
        params = fn.params
        if isinstance(params.star_arg, cst.Param) or params.star_kwarg is not None or params.posonly_params:
            raise Decline("*args, **kwargs or positional-only parameters")
        if nodes(fn.body, (cst.Global, cst.Nonlocal)):
            raise Decline("rebinds a global")
        if any(qualified_names(ctx, n) & _TRACE_AWARE for n in nodes(fn.body, (cst.Name, cst.Attribute))):
            raise Decline("asks whether it is being compiled, or reads its caller's frame")
        if any(_warns_above(ctx, c) for c in nodes(fn.body, cst.Call)):
            raise Decline("a warning attributed to a caller")
        if _names_taken(ctx, fn):
            raise Decline("the function's name is rebound, or the fake's is taken")
        if _result_dropped(ctx, fn):
            raise Decline("a call discards the result")
        return fn

    def _check_calls(self, fn: cst.FunctionDef, calls: Sequence[ObservedCall]) -> None:
        names = [p.name.value for p in _all_params(fn)]
        for call in calls:
            if [n for n, _ in call.args] != names:
                raise Decline("the observed arguments do not match the signature")
            for _, spec in call.args:
                if not _kind_ok(spec, self.kinds):
                    raise Decline(f"an argument of kind {spec.kind} {spec.type_name}")

    def _check_state(self, ctx: SiteContext, fn: cst.FunctionDef, calls: Sequence[ObservedCall]) -> None:
        """No visible mutation of what the caller passed (or of ``self``); no aliasing return."""
        flow = _Flow(ctx, fn)
        mutable = {n for call in calls for n, s in call.args if s.kind not in ("int", "float", "bool", "str", "none")}
        if flow.mutates(mutable):
            raise Decline("mutates an argument or module state")
        held = flow.derived({p.name.value for p in _all_params(fn)} | flow.globals)
        if any(r.value is None or flow.aliases(r.value, held) for r in nodes(fn.body, cst.Return, nested=False)):
            raise Decline("returns an argument, a global or a view of one")


class WrapNonstrictTrace(_Wrap):
    name = "wrap-nonstrict-trace"
    requires = frozenset({"nonstrict_trace"})
    summary = "mark the pure function around the untraceable call nonstrict_trace: its tensor code is still traced"
    methods = False
    kinds = frozenset({"tensor", "int", "float", "bool", "str", "none", "list", "tuple"})
    fakes = False  # the trace runs the function itself on fake tensors

    def _prepare(self, ctx: SiteContext, fn: cst.FunctionDef, calls: Sequence[ObservedCall]) -> None:
        # Its Python values are constants of the graph: each new one is a recompile, and
        # a number that changes from call to call (a step, a length, a sigma) would
        # recompile every call, where the break let Dynamo make it dynamic.
        for name, _ in calls[0].args:
            if len({_numbers(dict(c.args)[name]) for c in calls}) > 1:
                raise Decline(f"the number {name} changes between calls")
        why = _impure(ctx, fn, calls, reads_data=False)
        if why is not None:
            raise Decline(f"the trace runs it once for all calls: {why}")

    def rewrite(self, node: cst.CSTNode) -> Replacement | None:
        self.need_import("torch")
        return self._fn.with_changes(decorators=[cst.Decorator(cst.parse_expression("torch._dynamo.nonstrict_trace"))])


class WrapCustomOp(_Wrap):
    name = "wrap-custom-op"
    requires = frozenset({"custom_op"})
    summary = "make the function around the untraceable call a custom op, with a fake from its observed calls"
    methods = False
    kinds = frozenset({"tensor", "int", "float", "bool", "str", "none", "list", "tuple"})

    def _prepare(self, ctx: SiteContext, fn: cst.FunctionDef, calls: Sequence[ObservedCall]) -> None:
        for p in _all_params(fn):
            if p.default is not None and not _literal_default(p.default):
                raise Decline("a default the op schema may not take")
        self._annotations = {p.name.value: _annotation(ctx, p, calls) for p in _all_params(fn)}
        self._return_annotation = _return_annotation(ctx, fn, self._returns)
        self._autograd = _plan_autograd(ctx, fn, calls)

    def rewrite(self, node: cst.CSTNode) -> Replacement | None:
        out = super().rewrite(node)
        assert isinstance(out, cst.FlattenSentinel)
        if self._autograd is None:
            return out
        header = {p.name.value: p.annotation for p in out.nodes[0].params.params}
        code = cst.Module([]).code_for_node
        schema = {name: code(a.annotation) for name, a in header.items() if a is not None}
        blank = [cst.EmptyLine(indent=False)] * 2
        extra = [s.with_changes(leading_lines=blank) for s in self._autograd.statements(schema)]
        return cst.FlattenSentinel([*out.nodes, *extra])

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
                raise Decline("the result's gradient would come from a closed-over tensor")

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


# ---- autograd: a recompute backward ----------------------------------------------------

# Names the generated backward code binds or reads: a parameter of one of these names is declined.
_BACKWARD_NAMES = frozenset(
    "ctx inputs output results outputs grad grads grad_outputs needs_grad wrt autograd_on torch".split()
)
# What autograd's ctx object has already: a parameter kept as ``ctx.<name>`` must not shadow it.
_CTX_ATTRIBUTES = frozenset(
    "saved_tensors saved_variables needs_input_grad to_save non_differentiable dirty_tensors materialize_grads"
    " mark_dirty mark_non_differentiable save_for_backward save_for_forward set_materialize_grads apply"
    " apply_jvp metadata".split()
)


# The recompute op; `{{...}}` is the f-string that names the op after its module at run time.
_GRAD_OP = """\
@torch.library.custom_op(f"gbfix::{op}_grad_{{__name__.replace('.', '_')}}", mutates_args=())
def _{op}_grad(grad_outputs: list[torch.Tensor], needs_grad: list[bool], {typed}) -> list[torch.Tensor]:
    # Added by gbfix: the gradients of {fn}, from running it again under autograd
    # on the same inputs. Autograd is off inside a custom op: the guard turns it back on.
    autograd_on = torch._C._SetExcludeDispatchKeyGuard(torch._C.DispatchKey.AutogradFunctionality, False)
    with autograd_on, torch.enable_grad():
        inputs = [t.detach().requires_grad_(n) for t, n in zip({diff}, needs_grad)]
        {target} = inputs
        results = {results}
        outputs = [o for o in results if o.requires_grad]
        grads = [g for o, g in zip(results, grad_outputs) if o.requires_grad]
        wrt = [t for t in inputs if t.requires_grad]
        if outputs:
            grads = torch.autograd.grad(outputs, wrt, grads, allow_unused=True, materialize_grads=True)
        else:
            grads = [t.new_zeros(t.shape) for t in wrt]
    grads = iter(grads)
    # fresh and contiguous, as the fake says (an op may not return its inputs)
    return [
        next(grads).clone(memory_format=torch.contiguous_format) if t.requires_grad else t.new_zeros(t.shape)
        for t in inputs
    ]
"""


@dataclass(frozen=True)
class _Autograd:
    """The custom op's backward: run the function again under autograd, on the saved inputs.

    For a function of its arguments alone (no randomness, no effects, no state:
    see ``_impure``) this gives what eager's autograd recorded. The recompute
    is itself a custom op, as AOTAutograd traces a backward formula and the
    function is what it cannot trace; autograd is off inside a custom op, so
    that op turns it back on (``_SetExcludeDispatchKeyGuard``, the guard
    torch's own leaf_function uses in its form ``_ForceDispatchKeyGuard``)."""

    fn: str
    params: tuple[str, ...]  # positional, in order
    diff: tuple[str, ...]  # floating tensors: what gets a gradient
    saved: tuple[str, ...]  # tensors (or None): saved for backward; the others stay on ctx
    outputs: int  # 0: one tensor; n: a tuple of n

    def statements(self, schema: dict[str, str]) -> list[cst.CSTNode]:
        op = self.fn.lstrip("_")
        diff, saved = self.diff, self.saved

        def seq(names: Sequence[str]) -> str:  # a target: `(x,) = ...`, `x, y = ...`
            return _tuple(names) if len(names) == 1 else ", ".join(names)

        args = ", ".join(self.params)
        results = f"[{self.fn}._init_fn({args})]" if not self.outputs else f"list({self.fn}._init_fn({args}))"
        typed = ", ".join(f"{n}: {schema[n]}" for n in self.params)
        code = _GRAD_OP.format(op=op, fn=self.fn, typed=typed, diff=_tuple(diff), target=seq(diff), results=results)
        grad_op = _one_param_a_line(_parse_def(code))
        fakes = ", ".join(f"{n}.new_empty({n}.shape)" for n in diff)
        fake = _parse_def(
            f"@_{op}_grad.register_fake\n"
            f"def _{op}_grad_fake(grad_outputs, needs_grad, {args}):\n"
            f"    return [{fakes}]\n"
        )
        kept = "".join(f"    ctx.{n} = {n}\n" for n in self.params if n not in saved)
        setup = _parse_def(
            f"def _{op}_setup(ctx, inputs, output):\n"
            f"    {seq(self.params)} = inputs\n"
            f"    ctx.save_for_backward({', '.join(saved)})\n" + kept
        )
        positions = _tuple([str(self.params.index(n)) for n in diff])
        passed = ", ".join(n if n in saved else f"ctx.{n}" for n in self.params)
        index = {n: i for i, n in enumerate(diff)}
        returned = ", ".join(f"grads[{index[n]}]" if n in index else "None" for n in self.params)
        backward = _parse_def(
            f"def _{op}_backward(ctx, {'*grads' if self.outputs else 'grad'}):\n"
            f"    {seq(saved)} = ctx.saved_tensors\n"  # the differentiated tensors at least
            f"    needs_grad = [ctx.needs_input_grad[i] for i in {positions}]\n"
            f"    grads = _{op}_grad({'list(grads)' if self.outputs else '[grad]'}, needs_grad, {passed})\n"
            f"    return {returned}{',' if len(self.params) == 1 else ''}\n"
        )
        register = cst.parse_statement(f"{self.fn}.register_autograd(_{op}_backward, setup_context=_{op}_setup)\n")
        return [grad_op, fake, setup, backward, register]


def _tuple(items: Sequence[str]) -> str:
    return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"


def _plan_autograd(ctx: SiteContext, fn: cst.FunctionDef, calls: Sequence[ObservedCall]) -> _Autograd | None:
    """The backward the custom op needs; None when no observed call passed a tensor that requires grad."""
    needed = False
    for call in calls:
        carried = any(t.requires_grad for _, s in call.args for t in _tensors(s))
        outs = _tensors(call.result)
        if any(o.requires_grad for o in outs) and not carried:
            raise Decline("the result's gradient would come from a closed-over tensor")
        if carried and not all(o.requires_grad and _FLOATING.match(o.dtype or "") for o in outs):
            raise Decline("an output eager leaves without a gradient: the op would give it one")
        needed = needed or carried
    if not needed:
        return None
    if "custom_op_autograd" not in ctx.capabilities:
        raise Decline("gradients, and this torch has no way to recompute them inside a custom op")
    result = calls[0].result
    if fn.params.kwonly_params or result.kind == "list":
        raise Decline("keyword-only parameters or a list result: not supported by the recompute")
    params = tuple(p.name.value for p in fn.params.params)
    kinds = {n: {dict(c.args)[n].kind for c in calls} for n in params}
    floating = {n for n in params if all(_FLOATING.match(dict(c.args)[n].dtype or "") for c in calls)}
    diff = tuple(n for n in params if kinds[n] == {"tensor"} and n in floating)
    if any(t.requires_grad for c in calls for n, s in c.args if n not in diff for t in _tensors(s)):
        raise Decline("a gradient into a list of tensors or an optional tensor")
    saved = tuple(n for n in params if "tensor" in kinds[n] and kinds[n] <= {"tensor", "none"})
    if set(params) & (_BACKWARD_NAMES | {fn.name.value}) or any(
        n.startswith("_") or n in _CTX_ATTRIBUTES for n in params if n not in saved
    ):
        raise Decline("a parameter named like what the generated backward uses")
    op = fn.name.value.lstrip("_")
    if any(global_bindings(ctx, f"_{op}_{h}") for h in ("grad", "grad_fake", "setup", "backward")):
        raise Decline("a name the backward would take is bound")
    why = _impure(ctx, fn, calls, reads_data=True)
    if why is not None:
        raise Decline(f"running it again in backward could differ: {why}")
    return _Autograd(fn.name.value, params, diff, saved, 0 if result.kind == "tensor" else len(result.items))


# ---- purity: what may run again, or once for every call --------------------------------

# Functions whose result depends on their arguments alone and that change nothing:
# a recompute backward runs them a second time, a nonstrict trace once for all calls.
_PURE_BUILTINS = frozenset(
    "abs all any bool bytes chr complex dict divmod enumerate filter float format frozenset getattr hasattr"
    " hash int isinstance issubclass iter len list map max min ord pow range repr reversed round set slice"
    " sorted str sum tuple type zip".split()
)
_PURE_FUNCTIONS = frozenset(
    {"zlib.crc32", "zlib.adler32", "binascii.crc32", "bisect.bisect", "bisect.bisect_left", "bisect.bisect_right"}
    | {"struct.pack", "struct.unpack", "struct.calcsize", "functools.reduce", "functools.partial"}
    | {"copy.copy", "copy.deepcopy", "operator.itemgetter", "operator.attrgetter"}
    | {f"hashlib.{h}" for h in ("md5", "sha1", "sha224", "sha256", "sha384", "sha512", "blake2b", "blake2s", "new")}
)
_PURE_MODULES = ("math.", "cmath.", "itertools.", "numpy.", "scipy.", "einops.")
_PURE_TORCH_MODULES = ("torch.nn.functional.", "torch.linalg.", "torch.fft.", "torch.special.", "torch.Tensor.")
# ... but not what draws random numbers, does I/O or writes into its argument.
_IMPURE_PARTS = frozenset({"random", "io", "testing"})
_IMPURE_FUNCTIONS = frozenset(
    "rand rand_like randn randn_like randint randint_like randperm normal bernoulli multinomial poisson"
    " manual_seed seed initial_seed get_rng_state set_rng_state save load compile dropout dropout1d dropout2d"
    " dropout3d alpha_dropout feature_alpha_dropout gumbel_softmax rrelu rrelu_ savez savez_compressed savetxt"
    " loadtxt genfromtxt fromfile memmap copyto put putmask place fill_diagonal seterr".split()
)
# Methods that draw random numbers or reach beyond their receiver, whatever it is.
_IMPURE_METHODS = frozenset(
    "normal_ uniform_ random_ bernoulli_ bernoulli exponential_ cauchy_ log_normal_ geometric_ multinomial"
    " rvs shuffle permutation backward register_hook retain_grad".split()
)
# Methods that read a tensor's data: a trace with fake tensors cannot run them.
_DATA_METHODS = frozenset("numpy item tolist data_ptr untyped_storage storage tobytes __array__".split())


def _impure(ctx: SiteContext, fn: cst.FunctionDef, calls: Sequence[ObservedCall], *, reads_data: bool) -> str | None:
    """Why running ``fn`` again (or once, for every later call) could differ from
    running it each time; None for a function of its arguments alone. Every call
    must be to a known pure function or a method of a local value, and every
    global it reads a constant: literal, bound once, never changed."""
    flow = _Flow(ctx, fn)
    primitive = {"int", "float", "bool", "str", "none"}
    mutable = {n for call in calls for n, s in call.args if s.kind not in primitive}
    if flow.mutates(mutable | flow.globals):
        return "writes into an argument or a global"
    for name in variables(fn.body):
        if _binding(ctx, name) == "global" and not _constant_global(ctx, name.value):
            return f"reads `{name.value}`, a global that is not a literal constant"
    for call in nodes(fn.body, cst.Call):
        why = _impure_call(ctx, call, reads_data)
        if why is not None:
            return why
    return None


def _impure_call(ctx: SiteContext, call: cst.Call, reads_data: bool) -> str | None:
    func = call.func
    method = func.attr.value if isinstance(func, cst.Attribute) else None
    if method in _IMPURE_METHODS or (not reads_data and method in _DATA_METHODS):
        return f"calls `.{method}()`"
    root = func
    while isinstance(root, cst.Attribute):
        root = root.value
    if not isinstance(root, cst.Name):
        return None  # a method of a value computed here: only its name could tell
    where = _binding(ctx, root)
    if where == "local":
        return None if method is not None else f"calls `{root.value}`, a local callable"
    names = qualified_names(ctx, func) if where in ("import", "builtin") else set()
    if len(names) != 1 or not _pure_function(next(iter(names)), call):
        return f"calls `{ctx.code(func)}`"
    return None


def _pure_function(name: str, call: cst.Call) -> bool:
    parts = name.split(".")
    if _IMPURE_PARTS & set(parts) or parts[-1] in _IMPURE_FUNCTIONS or parts[-1] in _IMPURE_METHODS:
        return False
    if parts[0] == "builtins":
        return len(parts) == 2 and parts[1] in _PURE_BUILTINS
    if parts[-1] == "scaled_dot_product_attention":  # dropout_p > 0 draws random numbers
        dropout = [a.value for a in call.args if a.keyword is not None and a.keyword.value == "dropout_p"]
        dropout += [a.value for a in call.args if a.keyword is None][4:5]
        return all(isinstance(d, (cst.Integer, cst.Float)) and float(d.value) == 0 for d in dropout)
    if name in _PURE_FUNCTIONS or name.startswith(_PURE_MODULES + _PURE_TORCH_MODULES):
        return True
    # torch's own functions (`torch.tanh`, `torch.no_grad`), not its submodules' (`torch.cuda`, `torch.nn.init`)
    return len(parts) == 2 and parts[0] == "torch" and not parts[1].startswith(("_", "set_"))


def _binding(ctx: SiteContext, name: cst.Name) -> str:
    """What ``name`` refers to: "import", "builtin", "local" (a parameter or a
    variable of the function), "global" (a module-level variable), "definition"
    (a module-level def or class) or "unknown"."""
    scope = ctx.file.scopes.get(name)
    if scope is None:
        return "unknown"
    referents = [r for a in scope.accesses[name.value] if a.node is name for r in a.referents]
    if all(isinstance(r, BuiltinAssignment) for r in referents):
        return "builtin" if qualified_names(ctx, name) == {f"builtins.{name.value}"} else "unknown"
    if any(isinstance(r.node, (cst.Import, cst.ImportFrom)) for r in referents):
        return "import"
    if all(r.scope is not scope.globals for r in referents):
        return "local"
    if all(isinstance(r.node, (cst.FunctionDef, cst.ClassDef)) for r in referents):
        return "definition"
    return "global"


def _constant_global(ctx: SiteContext, name: str, depth: int = 0) -> bool:
    """A module-level name bound once, to a literal or to what a pure function makes of
    literals (``np.linspace(0, 1, 17)``, ``torch.tensor([...])``, no ``requires_grad``),
    that nothing in the module changes."""
    bound = global_bindings(ctx, name)
    if len(bound) != 1 or depth > 3:
        return False
    target = ctx.file.parent(bound[0])
    stmt = ctx.file.parent(target) if isinstance(target, cst.AssignTarget) else target
    if not isinstance(stmt, (cst.Assign, cst.AnnAssign)) or stmt.value is None:
        return False
    if not _constant(ctx, stmt.value, depth):
        return False
    for node in nodes(ctx.module, (cst.Global, cst.Call, cst.Assign, cst.AugAssign, cst.Del)):
        if isinstance(node, cst.Global) and any(n.name.value == name for n in node.names):
            return False
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
            receiver, method = node.func.value, node.func.attr.value
            in_place = method.endswith("_") and not method.endswith("__")
            if isinstance(receiver, cst.Name) and receiver.value == name and (
                in_place or method in _MUTATING or method in _NUMPY_IN_PLACE
            ):
                return False
        targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [getattr(node, "target", None)]
        for t in _unpacked([t for t in targets if t is not None]):
            if isinstance(t, (cst.Subscript, cst.Attribute)):
                while isinstance(t, (cst.Subscript, cst.Attribute)):
                    t = t.value
                if isinstance(t, cst.Name) and t.value == name:
                    return False
    return True


def _constant(ctx: SiteContext, node: cst.BaseExpression, depth: int) -> bool:
    if _literal(node):
        return True
    if isinstance(node, cst.Name):
        return _binding(ctx, node) == "global" and _constant_global(ctx, node.value, depth + 1)
    if isinstance(node, cst.BinaryOperation):
        return _constant(ctx, node.left, depth) and _constant(ctx, node.right, depth)
    if not isinstance(node, cst.Call) or _impure_call(ctx, node, reads_data=True) is not None:
        return False
    return all(
        _constant(ctx, a.value, depth) and not (a.keyword is not None and a.keyword.value == "requires_grad")
        for a in node.args
    )


def _literal(node: cst.BaseExpression) -> bool:
    if isinstance(node, (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString)):
        return True
    if isinstance(node, cst.Name):
        return node.value in ("None", "True", "False")
    if isinstance(node, cst.UnaryOperation):
        return _literal(node.expression)
    if isinstance(node, cst.BinaryOperation):
        return _literal(node.left) and _literal(node.right)
    if isinstance(node, (cst.Tuple, cst.List, cst.Set)):
        return all(_literal(e.value) for e in node.elements)
    if isinstance(node, cst.Dict):
        return all(isinstance(e, cst.DictElement) and _literal(e.key) and _literal(e.value) for e in node.elements)
    return False


# ---- state: mutation and aliasing ------------------------------------------------------


class _Flow:
    """Which names of one function may hold an object the caller also holds (or a
    part or view of one), and what the function does to them."""

    def __init__(self, ctx: SiteContext, fn: cst.FunctionDef) -> None:
        self.fn = fn
        self.parent = ctx.file.parent
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
            elif isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value in ALIASING:
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
            # numpy's in-place methods (`a.sort()`, `a.fill(0)`) return None: they stand alone
            alone = name in _NUMPY_IN_PLACE and isinstance(self.parent(call), cst.Expr)
            changes = in_place or alone or name in _MUTATING
            if isinstance(func, cst.Attribute) and self.root(func.value) in derived and changes:
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


def _numbers(spec: ValueSpec) -> tuple:
    """The ints and floats in an argument (one, or those in a list), in order."""
    if spec.kind in ("int", "float"):
        return (spec.value,)
    return tuple(v for i in spec.items for v in _numbers(i))


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
            raise Decline(f"returns a {r.kind}: only tensors can leave an opaque op unfrozen")
    if len(shapes) != 1:
        raise Decline("returns different structures")
    return shapes.pop()


def _outputs(calls: Sequence[ObservedCall], index: int) -> list[ValueSpec]:
    return [c.result if c.result.kind == "tensor" else c.result.items[index] for c in calls]


def _fake_tensor(calls: Sequence[ObservedCall], index: int) -> str:
    """``torch.empty(...)`` with the output's shape, dtype and device, each from an
    argument that matched it in every call, else a constant that never changed."""
    outs = _outputs(calls, index)
    ranks = {len(o.shape or ()) for o in outs}
    if len(ranks) != 1:
        raise Decline("the output's rank changes")
    rank = ranks.pop()
    order = [n for n, _ in calls[0].args]
    tensors = [n for n in order if all(dict(c.args)[n].kind == "tensor" for c in calls)]
    ints = [n for n in order if all(dict(c.args)[n].kind == "int" for c in calls)]

    def arg(call: ObservedCall, name: str) -> ValueSpec:
        return dict(call.args)[name]

    # always() calls its test at once, so the lambdas below that read the loop's variables (B023) see this iteration's
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
            (f"{n}.shape[{j}]" for n, j in candidates if always(lambda c, o: arg(c, n).shape[j] == o.shape[i])),  # noqa: B023
            None,
        )
        if found is None:
            found = next((n for n in ints if always(lambda c, o: arg(c, n).value == o.shape[i])), None)  # noqa: B023
        if found is None and always(lambda c, o: o.shape[i] == outs[0].shape[i]):  # noqa: B023
            found = str(outs[0].shape[i])
        if found is None:
            raise Decline("an output dimension that no argument predicts")
        dims.append(found)

    def pick(field: str, constant: Callable[[str], str], fixed_first: bool = False) -> str:
        values = {getattr(o, field) for o in outs}
        fixed = constant(next(iter(values))) if len(values) == 1 and None not in values else None
        if fixed_first and fixed is not None:
            return fixed
        for name in tensors:
            if always(lambda c, o: getattr(arg(c, name), field) == getattr(o, field)):  # noqa: B023
                return f"{name}.{field}"
        if fixed is None:
            raise Decline(f"the output's {field} changes")
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
                raise Decline("a sequence argument that is empty or not of one item type")
            types.add(f"list[{_ITEM_TYPES[items.pop()]}]")
        elif s.kind == "tensor":
            types.add("torch.Tensor")
        elif s.kind in _PRIMITIVE:
            types.add(_PRIMITIVE[s.kind])
        elif s.kind != "none":
            raise Decline(f"an argument of kind {s.kind}")
    if len(types) > 1:
        raise Decline("an argument of several kinds")
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
        raise Decline("a tuple argument: the op would pass a list")
    observed = _observed_type(specs)
    if param.annotation is None:
        return observed or "torch.Tensor | None"
    existing = _canonical(ctx, param.annotation.annotation)
    if observed is None:
        fits = existing is not None and existing.endswith(" | None")
    else:
        fits = existing in (observed, f"{observed} | None")
    if not fits:
        raise Decline("the annotation disagrees with the observed calls, or the op schema cannot take it")
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
        raise Decline("the return annotation disagrees with the observed calls")
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
            side = _canonical(ctx, others[0])
            return None if side is None or side.endswith("None") else f"{side} | None"
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


RECIPES = (WrapNonstrictTrace, WrapCustomOp, WrapLeafFunction)
