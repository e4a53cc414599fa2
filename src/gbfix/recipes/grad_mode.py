"""GB8985 / GB9186: a leaf made with ``requires_grad_()`` for ``torch.autograd.grad`` in compiled code;
GB0148: ``resize_`` of an input (``ResizeIfNeeded`` below).

The gradient penalty of WGAN-GP (and R1, input-gradient regularisers) makes the
interpolated batch a leaf, runs the critic on it and takes the gradient of the
scores with respect to that batch::

    interp.requires_grad_(True)
    out = D(interp)
    grads = torch.autograd.grad(outputs=out, inputs=interp, grad_outputs=torch.ones_like(out), create_graph=True)[0]

Dynamo breaks twice: at ``autograd.grad`` (GB9186, unless
``trace_autograd_ops``) and at ``requires_grad_()`` (GB8985: a tensor made to
require grad inside the graph leaks into its outputs; with
``trace_autograd_ops`` it still does whenever the returned loss depends on the
penalty). ``autograd-grad-to-func`` (safe) computes the same gradient with
``torch.func``, which needs no leaf and which Dynamo traces::

    out, out_vjp = torch.func.vjp(lambda interp: D(interp), interp)
    grads = out_vjp(torch.ones_like(out))[0]

or, with no ``grad_outputs`` (a scalar output) and the forward right before the
gradient, ``grads = torch.func.grad(lambda interp: D(interp).sum())(interp)``.
Transforms compose with autograd: the result stays differentiable with respect
to the critic's parameters (what ``create_graph=True`` gives), so the penalty's
backward sends them the same gradients. Declined unless nothing else can see
the difference: ``create_graph=True``, no ``allow_unused`` /
``is_grads_batched`` / ``materialize_grads``, one input; the leaf is a fresh
tensor (made by arithmetic, ``detach``, ``clone`` ... -- not a parameter of the
function, which ``requires_grad_()`` would change for the caller: GB0125) that
no code reads but the forward statement and the gradient call (anything else
would see ``requires_grad`` change), and the forward's result is read only by
the gradient call. A critic that updates a buffer in its forward (BatchNorm in
training mode) makes ``torch.func`` raise, and the verifier rejects the edit.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from gbfix.recipes.analysis import qualified_names
from gbfix.recipes.base import Recipe, Replacement, SiteContext
from gbfix.recipes.tree import variables, walk

# torch.autograd.grad's parameters in order (torch 2.0 - 2.13).
_GRAD_PARAMS = (
    "outputs",
    "inputs",
    "grad_outputs",
    "retain_graph",
    "create_graph",
    "only_inputs",
    "allow_unused",
    "is_grads_batched",
    "materialize_grads",
)
_FLAGS = ("True", "False", "None")
# Methods and functions whose result is always a new tensor object, never their receiver.
_NEW = frozenset({"detach", "clone", "lerp"})
_NEW_FUNCTIONS = frozenset({"torch.lerp", "torch.cat", "torch.stack"})
# Methods that return their receiver when there is nothing to convert.
_SAME_OR_NEW = frozenset({"to", "cuda", "cpu", "float", "double", "half", "bfloat16", "contiguous", "type_as"})


def _single(node: cst.SimpleStatementLine | cst.BaseStatement) -> cst.BaseSmallStatement | None:
    if isinstance(node, cst.SimpleStatementLine) and len(node.body) == 1:
        return node.body[0]
    return None


def _assigned_name(small: cst.BaseSmallStatement | None) -> str | None:
    """``name`` of a plain ``name = value``."""
    if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
        return small.targets[0].target.value
    return None


def _is(node: cst.BaseExpression | None, *names: str) -> bool:
    return isinstance(node, cst.Name) and node.value in names


def _only(node: cst.BaseExpression) -> cst.BaseExpression | None:
    """``[t]`` / ``(t,)`` -> ``t``; a bare expression as it is; None for longer sequences."""
    if isinstance(node, (cst.List, cst.Tuple)):
        if len(node.elements) != 1 or isinstance(node.elements[0], cst.StarredElement):
            return None
        return node.elements[0].value
    return node


def _requires_grad_call(node: cst.BaseExpression) -> cst.Call | None:
    """``<t>.requires_grad_()`` / ``(True)`` / ``(requires_grad=True)``."""
    if not (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)):
        return None
    if node.func.attr.value != "requires_grad_" or len(node.args) > 1:
        return None
    if node.args:
        arg = node.args[0]
        if arg.star or (arg.keyword is not None and arg.keyword.value != "requires_grad") or not _is(arg.value, "True"):
            return None
    return node


def _uses(node: cst.CSTNode, name: str) -> list[cst.Name]:
    return [n for n in variables(node) if n.value == name]


@dataclass(frozen=True)
class _Leaf:
    name: str
    made_here: bool  # ``x = <new tensor>.requires_grad_()``; else ``x.requires_grad_()``


@dataclass(frozen=True)
class _Grad:
    stmt: cst.SimpleStatementLine
    call: cst.Call
    result: cst.CSTNode  # what the gradient replaces: ``call[0]``, or the call in ``g, = call``
    inputs: str
    outputs: cst.BaseExpression
    grad_outputs: cst.BaseExpression | None


@dataclass(frozen=True)
class _Match:
    body: list[cst.BaseStatement]  # the block's statements
    leaf_at: int
    forward_at: int | None  # ``y = D(x)``, the one statement in between that reads the leaf
    grad_at: int
    leaf: _Leaf
    grad: _Grad
    form: str  # "grad": torch.func.grad; "vjp": torch.func.vjp


class AutogradGradToFunc(Recipe):
    name = "autograd-grad-to-func"
    codes = ("GB8985", "GB9186")
    safety = "safe"
    summary = (
        "x.requires_grad_() + torch.autograd.grad(D(x), x, create_graph=True) -> "
        "torch.func.vjp / torch.func.grad of the same computation: no leaf to create"
    )
    rule = "GB8985"

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        stmt = ctx.enclosing(cst.SimpleStatementLine)
        block = ctx.file.parent(stmt) if stmt is not None else None
        fn = ctx.enclosing(cst.FunctionDef, node=block) if isinstance(block, cst.IndentedBlock) else None
        if fn is None:
            return None
        body = list(block.body)
        here = next(i for i, s in enumerate(body) if s is stmt)
        grad = self._grad(ctx, stmt)
        if grad is not None:
            leaves = [j for j in range(here) if (lf := self._leaf(ctx, body[j])) and lf.name == grad.inputs]
            if not leaves:
                return None
            i1, i3 = leaves[-1], here
        else:
            leaf = self._leaf(ctx, stmt)
            if leaf is None:
                return None
            later = [j for j in range(here + 1, len(body)) if (g := self._grad(ctx, body[j])) and g.inputs == leaf.name]
            if not later:
                return None
            i1, i3 = here, later[0]
        leaf, grad = self._leaf(ctx, body[i1]), self._grad(ctx, body[i3])
        plan = self._plan(ctx, fn, body, i1, i3, leaf, grad)
        if plan is None:
            return None
        self._match = _Match(body, i1, plan[0], i3, leaf, grad, plan[1])
        return block

    # --- matching -------------------------------------------------------------
    @staticmethod
    def _leaf(ctx: SiteContext, stmt: cst.BaseStatement) -> _Leaf | None:
        small = _single(stmt)
        if isinstance(small, cst.Expr):
            call = _requires_grad_call(small.value)
            if call is not None and isinstance(call.func.value, cst.Name):
                return _Leaf(call.func.value.value, made_here=False)
        name = _assigned_name(small)
        if name is not None:
            call = _requires_grad_call(small.value)
            if call is not None and _new_tensor(ctx, call.func.value):
                return _Leaf(name, made_here=True)
        return None

    @staticmethod
    def _grad(ctx: SiteContext, stmt: cst.BaseStatement) -> _Grad | None:
        small = _single(stmt)
        if small is None:
            return None
        calls = [n for n in walk(small) if isinstance(n, cst.Call) and qualified_names(ctx, n.func) == {"torch.autograd.grad"}]
        if len(calls) != 1:
            return None
        call = calls[0]
        parent = ctx.file.parent(call)
        if isinstance(parent, cst.Subscript) and parent.value is call and _index_zero(parent):
            result: cst.CSTNode = parent
        elif isinstance(small, cst.Assign) and small.value is call and len(small.targets) == 1:
            target = small.targets[0].target
            if not (isinstance(target, (cst.Tuple, cst.List)) and _only(target) is not None):
                return None
            result = call  # ``g, = torch.autograd.grad(...)``
        else:
            return None
        args: dict[str, cst.BaseExpression] = {}
        for i, arg in enumerate(call.args):
            if arg.star:
                return None
            key = arg.keyword.value if arg.keyword is not None else (_GRAD_PARAMS[i] if i < len(_GRAD_PARAMS) else None)
            if key not in _GRAD_PARAMS or key in args:
                return None
            args[key] = arg.value
        if not _is(args.get("create_graph"), "True"):
            return None  # without it the gradient is detached from the graph: torch.func's is not
        for key in ("allow_unused", "is_grads_batched", "materialize_grads"):
            if key in args and not _is(args[key], "False", "None"):
                return None
        for key in ("retain_graph", "only_inputs"):  # moot: the transforms keep the graph
            if key in args and not _is(args[key], *_FLAGS):
                return None
        if "outputs" not in args or "inputs" not in args:
            return None
        inputs = _only(args["inputs"])
        outputs = _only(args["outputs"])
        go = args.get("grad_outputs")
        go = None if go is None or _is(go, "None") else _only(go)
        if not isinstance(inputs, cst.Name) or outputs is None or ("grad_outputs" in args and go is None and not _is(args["grad_outputs"], "None")):
            return None
        return _Grad(stmt, call, result, inputs.value, outputs, go)

    def _plan(
        self, ctx: SiteContext, fn: cst.FunctionDef, body: list, i1: int, i3: int, leaf: _Leaf, grad: _Grad
    ) -> tuple[int | None, str] | None:
        """(index of the forward statement or None, "grad" | "vjp"), or None to decline."""
        x = leaf.name
        between = [j for j in range(i1 + 1, i3) if _uses(body[j], x)]
        if len(between) > 1:
            return None
        i2 = between[0] if between else None
        allowed = [body[i1], body[i3]] + ([body[i2]] if i2 is not None else [])
        if not leaf.made_here:
            binds = self._bindings(ctx, body[:i1], x)
            if binds is None:
                return None
            allowed += binds
        # Anything else reading the leaf would see it require grad; with torch.func it does not.
        mine = {id(n) for s in allowed for n in _uses(s, x)}
        if any(id(n) not in mine for n in _uses(fn.body, x)):
            return None
        if grad.grad_outputs is not None and _uses(grad.grad_outputs, x):
            return None
        if i2 is None:
            return (None, "grad") if grad.grad_outputs is None and _uses(grad.outputs, x) else None
        y = _assigned_name(_single(body[i2]))
        if y is None or y == x:
            return None
        # The forward's result: read by the gradient call only.
        if any(not (_inside(ctx, n, body[i2]) or _inside(ctx, n, grad.stmt)) for n in _uses(fn.body, y)):
            return None
        if grad.grad_outputs is None and i2 == i3 - 1 and len(_uses(grad.outputs, y)) == 1 and not _uses(grad.outputs, x):
            return (i2, "grad")
        if _is(grad.outputs, y):
            vjp = f"{y}_vjp"
            if any(n.value == vjp for n in variables(ctx.module)):
                return None
            return (i2, "vjp")
        return None

    @staticmethod
    def _bindings(ctx: SiteContext, before: list[cst.BaseStatement], x: str) -> list[cst.BaseStatement] | None:
        """For ``x.requires_grad_()``: the statements before it that touch ``x`` in this block
        must all bind it, the first to a new tensor, the others to ``x.<method>(...)``
        (the same tensor or one made from it), so that no other name holds it."""
        found: list[cst.BaseStatement] = []
        for stmt in before:
            if not _uses(stmt, x):
                continue
            if found and isinstance(stmt, cst.If) and _rebinds_only(stmt, x):  # ``if use_cuda: x = x.cuda()``
                found.append(stmt)
                continue
            small = _single(stmt)
            if _assigned_name(small) != x:
                return None
            if not (_new_tensor(ctx, small.value) or (found and _rooted_at(small.value, x))):
                return None
            found.append(stmt)
        return found or None

    # --- rewriting ------------------------------------------------------------
    def rewrite(self, node: cst.CSTNode) -> Replacement | None:
        assert isinstance(node, cst.IndentedBlock)
        self.need_import("torch")
        m = self._match
        x = m.leaf.name
        forward = m.body[m.forward_at] if m.forward_at is not None else None
        carried: list[cst.EmptyLine] = []  # comments of removed statements go to the next one
        out: list[cst.BaseStatement] = []
        for i, stmt in enumerate(m.body):
            if (i == m.leaf_at and not m.leaf.made_here) or (i == m.forward_at and m.form == "grad"):
                carried += _comments_of(stmt)
                continue
            if i == m.leaf_at:
                small = _single(stmt)
                value = small.value.func.value
                if "\n" not in self.ctx.code(value):  # ``x = (a + b).requires_grad_()`` -> ``x = a + b``
                    value = value.with_changes(lpar=[], rpar=[])
                stmt = stmt.with_changes(body=[small.with_changes(value=value)])
            elif i == m.forward_at:  # vjp: the forward runs where it did, under torch.func.vjp
                small = _single(stmt)
                y = small.targets[0].target.value
                pair = cst.Tuple([cst.Element(cst.Name(y)), cst.Element(cst.Name(f"{y}_vjp"))], lpar=[], rpar=[])
                vjp = _call("torch.func.vjp", _lambda(x, small.value), cst.Name(x))
                stmt = stmt.with_changes(body=[small.with_changes(targets=[cst.AssignTarget(pair)], value=vjp)])
            elif i == m.grad_at:
                stmt = self._gradient(stmt, m.grad, forward, x)
            if carried:
                stmt = stmt.with_changes(leading_lines=[*carried, *stmt.leading_lines])
                carried = []
            out.append(stmt)
        return node.with_changes(body=out)

    def _gradient(self, stmt: cst.SimpleStatementLine, grad: _Grad, forward, x: str) -> cst.SimpleStatementLine:
        if self._match.form == "vjp":
            y = _single(forward).targets[0].target.value
            cotangent = grad.grad_outputs or _call("torch.ones_like", cst.Name(y))
            return stmt.deep_replace(grad.call, _call(f"{y}_vjp", cotangent))
        value = grad.outputs
        if forward is not None:  # the forward moves into the function being differentiated
            small = _single(forward)
            y = small.targets[0].target.value
            (use,) = _uses(value, y)
            value = value.deep_replace(use, _parenthesized(small.value))
        gradient = cst.Call(_call("torch.func.grad", _lambda(x, value)), [cst.Arg(cst.Name(x))])
        if grad.result is grad.call:  # ``g, = ...`` -> ``g = ...``: func.grad returns the tensor
            small = _single(stmt)
            target = _only(small.targets[0].target)
            return stmt.with_changes(body=[small.with_changes(targets=[cst.AssignTarget(target)], value=gradient)])
        return stmt.deep_replace(grad.result, gradient)


# --- helpers ---------------------------------------------------------------------


def _inside(ctx: SiteContext, node: cst.CSTNode, stmt: cst.CSTNode) -> bool:
    return any(a is stmt for a in ctx.ancestors(node))


def _index_zero(sub: cst.Subscript) -> bool:
    if len(sub.slice) != 1 or not isinstance(sub.slice[0].slice, cst.Index):
        return False
    index = sub.slice[0].slice.value
    return isinstance(index, cst.Integer) and index.evaluated_value == 0


def _new_tensor(ctx: SiteContext, node: cst.BaseExpression) -> bool:
    """An expression whose value is a tensor object no other name holds."""
    if isinstance(node, cst.BinaryOperation):
        return True
    if isinstance(node, cst.UnaryOperation):
        return isinstance(node.operator, (cst.Minus, cst.BitInvert))  # unary + returns its operand
    if not isinstance(node, cst.Call):
        return False
    if isinstance(node.func, cst.Attribute):
        method = node.func.attr.value
        if method in _NEW:
            return True
        if method in _SAME_OR_NEW:
            return _new_tensor(ctx, node.func.value)
    return bool(qualified_names(ctx, node.func) & _NEW_FUNCTIONS)


def _rooted_at(node: cst.BaseExpression, name: str) -> bool:
    """``name.a(...).b(...)``: a chain of method calls on ``name``, not in place."""
    while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
        if node.func.attr.value.endswith("_"):
            return False
        node = node.func.value
    return _is(node, name)


def _rebinds_only(node: cst.If, x: str) -> bool:
    """An ``if`` whose test does not read ``x`` and whose branches only do ``x = x.<method>(...)``."""
    if _uses(node.test, x):
        return False
    if isinstance(node.orelse, cst.If) and not _rebinds_only(node.orelse, x):
        return False
    blocks = [node.body] + ([node.orelse.body] if isinstance(node.orelse, cst.Else) else [])
    for block in blocks:
        for stmt in block.body:
            small = _single(stmt)
            if _assigned_name(small) != x or not _rooted_at(small.value, x):
                return False
    return True


def _comments_of(stmt: cst.SimpleStatementLine) -> list[cst.EmptyLine]:
    lines = list(stmt.leading_lines)
    comment = stmt.trailing_whitespace.comment
    if comment is not None:
        lines.append(cst.EmptyLine(comment=comment))
    return lines


def _call(func: str, *args: cst.BaseExpression) -> cst.Call:
    return cst.Call(cst.parse_expression(func), [cst.Arg(a) for a in args])


def _lambda(param: str, body: cst.BaseExpression) -> cst.Lambda:
    return cst.Lambda(cst.Parameters([cst.Param(cst.Name(param))]), body)


def _parenthesized(node: cst.BaseExpression) -> cst.BaseExpression:
    if node.lpar or isinstance(node, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)):
        return node
    return node.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


# --- GB0148: resize_ of an input -------------------------------------------------

# Arguments that are surely one int: ``resize_(n)`` is then ``(n,)``.
_INT_METHODS = frozenset({"size", "numel", "dim"})


class ResizeIfNeeded(Recipe):
    """``out.resize_(n, 2)`` on a graph input (an ``out`` buffer, a module buffer):
    Dynamo will not change an input's metadata and breaks (GB0148, "Unsupported
    function call (delayed)", the same for every in-place view op on an input). A
    resize to the shape the tensor already has is a no-op in ATen (same storage,
    strides and version), so guarding the call skips nothing::

        out.resize_(n, 2)   ->   if out.shape != (n, 2):
                                     out.resize_(n, 2)

    Dynamo evaluates the test from the input's shape (a guard), so the graph holds
    no resize when the buffer already has the size; when it does not, the resize
    runs and breaks as before, and the verifier keeps the original. Declined:
    ``memory_format`` (it may restride a same-size tensor), a receiver that is not
    a plain name or attribute (it would be evaluated twice), the call's result used.
    """

    name = "resize-if-needed"
    codes = ("GB0148",)
    safety = "safe"
    summary = "t.resize_(shape) -> if t.shape != shape: t.resize_(shape): no resize, so no break, when the size already matches"
    rule = "GB0148"

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        stmt = ctx.enclosing(cst.SimpleStatementLine)
        small = _single(stmt) if stmt is not None else None
        if not isinstance(small, cst.Expr) or not isinstance(ctx.file.parent(stmt), cst.IndentedBlock):
            return None
        call = small.value
        if not (isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)):
            return None
        if call.func.attr.value not in ("resize_", "resize_as_") or not _plain_ref(call.func.value):
            return None
        if not call.args or any(a.star or a.keyword is not None for a in call.args):
            return None
        if call.func.attr.value == "resize_as_" and len(call.args) != 1:
            return None
        return stmt

    def rewrite(self, node: cst.CSTNode) -> Replacement | None:
        assert isinstance(node, cst.SimpleStatementLine)
        call = node.body[0].value
        tensor = call.func.value
        shape = cst.Attribute(tensor, cst.Name("shape"))
        args = [a.value for a in call.args]
        if call.func.attr.value == "resize_as_":
            wanted: cst.BaseExpression = cst.Attribute(args[0], cst.Name("shape"))
        elif len(args) == 1 and not _one_int(args[0]):
            wanted = cst.Call(cst.Name("tuple"), [cst.Arg(args[0])])  # a size: torch.Size, tuple or list
        else:
            wanted = cst.Tuple([cst.Element(a) for a in args])
        test = cst.Comparison(shape, [cst.ComparisonTarget(cst.NotEqual(), wanted)])
        inner = node.with_changes(leading_lines=[])
        return cst.If(test=test, body=cst.IndentedBlock([inner]), leading_lines=node.leading_lines)


def _plain_ref(node: cst.BaseExpression) -> bool:
    """``name`` or ``a.b.c``: reading it twice has no effect."""
    while isinstance(node, cst.Attribute):
        node = node.value
    return isinstance(node, cst.Name)


def _one_int(node: cst.BaseExpression) -> bool:
    if isinstance(node, cst.Integer):
        return True
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in _INT_METHODS:
        return node.func.attr.value != "size" or bool(node.args)  # ``x.size()`` is a torch.Size
    if isinstance(node, cst.Call) and _is(node.func, "len"):
        return True
    return (  # ``x.shape[0]``, not a slice of it
        isinstance(node, cst.Subscript)
        and isinstance(node.value, cst.Attribute)
        and node.value.attr.value == "shape"
        and len(node.slice) == 1
        and isinstance(node.slice[0].slice, cst.Index)
    )


RECIPES = (AutogradGradToFunc, ResizeIfNeeded)
