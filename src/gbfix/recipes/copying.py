"""GB4198 (GB0179 on older torch): ``copy.deepcopy`` of tensors inside compiled code.

Dynamo refuses to trace ``Tensor.__deepcopy__`` (the break's innermost frame is
in ``copy.py``; the site is the user's call). For a plain tensor that method is
``with torch.no_grad(): clone; requires_grad_() if the source required grad``,
which ``deepcopy-to-clone`` (safe) writes out::

    snapshot = copy.deepcopy(x)  ->  snapshot = x.detach().clone().requires_grad_(x.requires_grad)

A new leaf with the same values, dtype, device and ``requires_grad``; no
gradient flows back to ``x`` (``x.clone()`` alone would send one). Dynamo traces
it while ``x`` does not require grad; when it does, the new leaf is an
intermediate that requires grad, which Dynamo refuses (GB8985), and the verifier
rejects the edit. What ``deepcopy`` does and the rewrite does not: copy ``.grad``
(set by backward only on tensors that require grad: not in an accepted edit) and
attributes set on the tensor object, copy the *whole* storage keeping the
view's offset and strides (``clone`` gives a compact copy: equal values, but a
non-contiguous view may come back contiguous), and raise on a non-leaf that
requires grad.

Declined: anything that may not be a plain tensor -- the break's stack going
further into ``copy.py`` (a container being copied), arguments other than a
local name or a ``self.<buffer>``, names bound from an attribute (possibly a
``Parameter``: its copy is a Parameter again) or from a container display, and a
``memo`` argument.

A container of tensors (GB4198 again on 2.13, deeper in ``copy.py``: Dynamo
inlines ``copy.deepcopy`` and breaks on the first tensor; before that it was
GB0179 at the call, ``copy.deepcopy`` not being traced at all) is copied by
``deepcopy-container-to-clones`` (safe) where its structure is visible: a
list/tuple/dict display, nested or not, written at the call or bound to a
name once, earlier in the same block (nothing in between reading the name or
rebinding a leaf)::

    snapshot = copy.deepcopy({"k": k, "v": v})  ->  snapshot = {"k": k.detach()...(k.requires_grad), "v": ...}

Leaves are plain local tensors, as above, or constants (kept: ``deepcopy``
returns ``None``, numbers and strings themselves). ``deepcopy`` keeps shared
references between leaves (one memo for the whole call: the same tensor twice
is copied once, views of one storage share the copied storage); separate
clones do not, which shows as soon as one copy is written in place. So every
leaf must be bound only to fresh results (arithmetic, a ``torch`` factory or
compute op, a ``Linear``/``Conv``/``Embedding``/norm submodule): new storage,
no view of anything; one leaf may instead be a parameter that is never
rebound, which existed before any of those was made.
Declined: containers built elsewhere or grown in place (``hidden.append(h)``:
neither the type nor the leaves' aliasing is visible), starred or ``**``
entries, non-constant dict keys, and a leaf twice.
"""

from __future__ import annotations

from pathlib import Path

import libcst as cst
from libcst.metadata import Assignment

from gbfix.locate import own_frame_at
from gbfix.recipes.analysis import call_at, qualified_names
from gbfix.recipes.base import Recipe, Replacement, SiteContext
from gbfix.recipes.tree import variables, walk

_CONTAINERS = (cst.List, cst.Tuple, cst.Dict, cst.Set, cst.ListComp, cst.DictComp, cst.SetComp, cst.GeneratorExp)


def _is_self(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Name) and node.value == "self"


def _names_parameter(ctx: SiteContext, value: cst.BaseExpression) -> bool:
    return isinstance(value, cst.Call) and ctx.code(value.func).endswith("Parameter")


def _cloned(t: cst.BaseExpression) -> cst.Call:
    """``t.detach().clone().requires_grad_(t.requires_grad)``: what ``Tensor.__deepcopy__`` makes."""
    t = t.with_changes(lpar=[], rpar=[])

    def method(value: cst.BaseExpression, name: str, *args: cst.BaseExpression) -> cst.Call:
        return cst.Call(cst.Attribute(value, cst.Name(name)), [cst.Arg(a) for a in args])

    flag = cst.Attribute(t, cst.Name("requires_grad"))
    return method(method(method(t, "detach"), "clone"), "requires_grad_", flag)


def _deepcopy_call(ctx: SiteContext) -> cst.Call | None:
    """The ``copy.deepcopy(x)`` call at the site, with one argument and no memo."""
    call = call_at(ctx)
    if call is None or qualified_names(ctx, call.func) != {"copy.deepcopy"}:
        return None
    if len(call.args) != 1 or call.args[0].keyword is not None or call.args[0].star:
        return None
    return call


class DeepcopyToClone(Recipe):
    name = "deepcopy-to-clone"
    codes = ("GB4198", "GB0179")
    safety = "safe"
    summary = "copy.deepcopy(t) -> t.detach().clone().requires_grad_(t.requires_grad): the same new leaf tensor"
    rule = "GB4198"

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        call = _deepcopy_call(ctx)
        if call is None or not self._copies_the_argument(ctx):
            return None
        arg = call.args[0].value
        if isinstance(arg, cst.Name):
            ok = self._plain_local(ctx, arg)
        else:
            ok = self._self_buffer(ctx, arg)
        return call if ok else None

    def rewrite(self, node: cst.CSTNode) -> Replacement:
        assert isinstance(node, cst.Call)
        return _cloned(node.args[0].value).with_changes(lpar=node.lpar, rpar=node.rpar)

    @staticmethod
    def _copies_the_argument(ctx: SiteContext) -> bool:
        """The frames below the user's call: only ``copy.deepcopy`` itself, which then
        called the tensor's ``__deepcopy__``. Deeper (``_deepcopy_list``, ...) means a
        container holding tensors was copied."""
        stack = ctx.site.brk.stack
        mine = own_frame_at(ctx.site.brk, ctx.site.path)
        below = stack if mine is None else stack[mine + 1 :]
        if not below:  # no frames below given: judge by the source alone
            return True
        return len(below) == 1 and Path(below[0].file).name == "copy.py" and below[0].name == "deepcopy"

    @staticmethod
    def _plain_local(ctx: SiteContext, name: cst.Name) -> bool:
        """A parameter or local whose every binding is a computed value (not an
        attribute, which may be a Parameter, nor a container)."""
        scope = ctx.file.scopes.get(name)
        if scope is None or scope is scope.globals:
            return False
        bound = list(scope[name.value])
        if not bound:
            return False
        for a in bound:
            if not isinstance(a, Assignment) or a.scope is not scope:
                return False
            if isinstance(a.node, cst.Param):
                continue
            target = ctx.file.parent(a.node)
            assign = ctx.file.parent(target) if isinstance(target, cst.AssignTarget) else target
            value = getattr(assign, "value", None)
            if not isinstance(assign, (cst.Assign, cst.AnnAssign, cst.AugAssign)) or value is None:
                return False  # loop targets, unpacking, with ... as, imports
            if isinstance(assign, cst.Assign) and (len(assign.targets) != 1 or assign.targets[0].target is not a.node):
                return False
            if isinstance(value, (cst.Attribute, *_CONTAINERS)):
                return False
            if _names_parameter(ctx, value):
                return False
        return True

    @staticmethod
    def _self_buffer(ctx: SiteContext, attr: cst.BaseExpression) -> bool:
        """``self.<name>`` registered in the class with ``register_buffer``, and only ever
        reassigned computed tensors (a call or arithmetic that is not a Parameter)."""
        if not (isinstance(attr, cst.Attribute) and _is_self(attr.value)):
            return False
        cls = ctx.enclosing(cst.ClassDef, node=attr)
        if cls is None:
            return False
        want, buffer, parameter = attr.attr.value, [False], [False]

        class _Walk(cst.CSTVisitor):
            def visit_Call(self, node: cst.Call) -> None:
                f = node.func
                if isinstance(f, cst.Attribute) and f.attr.value == "register_buffer" and node.args:
                    first = node.args[0].value
                    if isinstance(first, cst.SimpleString) and first.evaluated_value == want:
                        buffer[0] = True

            def visit_Assign(self, node: cst.Assign) -> None:
                for t in node.targets:
                    target = t.target
                    if isinstance(target, cst.Attribute) and target.attr.value == want and _is_self(target.value):
                        # a tensor assigned to a buffer's name stays a buffer; a Parameter replaces it
                        value = node.value
                        if not isinstance(value, (cst.BinaryOperation, cst.Call)) or _names_parameter(ctx, value):
                            parameter[0] = True

        cls.visit(_Walk())
        return buffer[0] and not parameter[0]


# Results that are new tensors, never an input or a view of one (``torch.X``, ``F.X``, ``t.X()``).
_FRESH_CALLS = frozenset(
    "zeros ones empty full rand randn randint arange linspace zeros_like ones_like empty_like full_like"
    " rand_like randn_like tensor cat concat concatenate stack matmul mm bmm addmm baddbmm linear"
    " conv1d conv2d conv3d embedding softmax log_softmax exp log sigmoid tanh relu gelu silu sqrt"
    " rsqrt pow abs neg cumsum sum mean where layer_norm group_norm rms_norm normalize"
    " scaled_dot_product_attention clone new_zeros new_ones new_empty new_full new_tensor".split()
)
# Submodules whose output is always a new tensor.
_FRESH_MODULES = frozenset(
    "Linear Conv1d Conv2d Conv3d ConvTranspose1d ConvTranspose2d ConvTranspose3d Embedding LayerNorm"
    " GroupNorm RMSNorm BatchNorm1d BatchNorm2d BatchNorm3d".split()
)
_WIDTH = 88  # a longer copy is laid out one entry a line
_CONSTANTS = (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.ConcatenatedString)


class DeepcopyContainerToClones(Recipe):
    name = "deepcopy-container-to-clones"
    codes = ("GB4198", "GB0179")
    safety = "safe"
    summary = "copy.deepcopy([a, b]) / ({...}) of tensors -> the same display of per-tensor clones"
    rule = "GB0179"

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        call = _deepcopy_call(ctx)
        if call is None or not self._inside_copy(ctx):
            return None
        display = self._display(ctx, call)
        if display is None:
            return None
        leaves = self._leaves(display)
        if leaves is None or len({n.value for n in leaves}) != len(leaves):
            return None  # a starred entry, a computed key or leaf, a leaf twice
        if not all(DeepcopyToClone._plain_local(ctx, n) for n in leaves):
            return None
        others = [n for n in leaves if not self._fresh(ctx, n)]
        if len(others) > 1 or (others and not self._parameter(ctx, others[0])):
            return None  # two leaves may be one tensor, or views of one storage
        return call

    def rewrite(self, node: cst.CSTNode) -> Replacement:
        assert isinstance(node, cst.Call) and self.ctx is not None
        display = self._display(self.ctx, node)
        assert display is not None

        class _Clone(cst.CSTTransformer):
            def leave_Element(self, original: cst.Element, updated: cst.Element) -> cst.Element:
                return updated.with_changes(value=_leaf(updated.value))

            def leave_DictElement(self, original: cst.DictElement, updated: cst.DictElement) -> cst.DictElement:
                return updated.with_changes(value=_leaf(updated.value))

        out = display.visit(_Clone())
        assert isinstance(out, (cst.List, cst.Tuple, cst.Dict))
        if isinstance(out, cst.Tuple) and not out.lpar:
            out = out.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        (line, _), _ = self.ctx.file.span(node)
        width = len(self.ctx.file.lines[line - 1]) - len(self.ctx.code(node)) + len(self.ctx.code(out))
        if width > _WIDTH and "\n" not in self.ctx.code(out):
            out = _one_entry_a_line(out)
        return out.with_changes(lpar=[*node.lpar, *out.lpar], rpar=[*out.rpar, *node.rpar])

    @staticmethod
    def _inside_copy(ctx: SiteContext) -> bool:
        """Every frame below the user's call is in ``copy.py`` (none: GB0179 before 2.13)."""
        stack = ctx.site.brk.stack
        mine = own_frame_at(ctx.site.brk, ctx.site.path)
        below = stack if mine is None else stack[mine + 1 :]
        return all(Path(f.file).name == "copy.py" for f in below)

    @staticmethod
    def _display(ctx: SiteContext, call: cst.Call) -> cst.List | cst.Tuple | cst.Dict | None:
        """The container display copied: the argument itself, or the value of the
        only binding ``name = <display>``, an earlier statement of the same block,
        when nothing from there to the call reads the name or rebinds a leaf."""
        arg = call.args[0].value
        if isinstance(arg, (cst.List, cst.Tuple, cst.Dict)):
            return arg
        if not isinstance(arg, cst.Name):
            return None
        scope = ctx.file.scopes.get(arg)
        if scope is None or scope is scope.globals:
            return None
        bound = [a for a in scope[arg.value] if isinstance(a, Assignment)]
        if len(bound) != 1 or len(scope[arg.value]) != 1:
            return None
        target = ctx.file.parent(bound[0].node)
        assign = ctx.file.parent(target) if isinstance(target, cst.AssignTarget) else None
        if not (isinstance(assign, cst.Assign) and len(assign.targets) == 1 and assign.targets[0].target is bound[0].node):
            return None
        if not isinstance(assign.value, (cst.List, cst.Tuple, cst.Dict)):
            return None
        line = ctx.file.parent(assign)
        here = ctx.enclosing(cst.SimpleStatementLine, cst.BaseCompoundStatement, node=call)
        block = ctx.file.parent(line)
        if here is None or ctx.file.parent(here) is not block or len(line.body) != 1:
            return None
        body = list(block.body)
        first, last = body.index(line), body.index(here)
        if first >= last:
            return None
        between = [*body[first + 1 : last], here]
        leaves = DeepcopyContainerToClones._leaves(assign.value) or []
        watched = {arg.value, *(n.value for n in leaves)}
        for stmt in between:
            for n in variables(stmt):
                if n.value in watched and n is not arg and (n.value == arg.value or _binds(ctx, n)):
                    return None  # the container read (perhaps grown) or a leaf rebound
        return assign.value

    @staticmethod
    def _leaves(display: cst.BaseExpression) -> list[cst.Name] | None:
        """The variable leaves of a (nested) display of names and constants; None if
        anything else is in it."""
        out: list[cst.Name] = []

        def visit(e: cst.BaseExpression) -> bool:
            if isinstance(e, (cst.List, cst.Tuple)):
                return all(isinstance(el, cst.Element) and visit(el.value) for el in e.elements)
            if isinstance(e, cst.Dict):
                return all(
                    isinstance(el, cst.DictElement) and isinstance(el.key, _CONSTANTS) and visit(el.value)
                    for el in e.elements
                )
            if isinstance(e, _CONSTANTS) or (isinstance(e, cst.Name) and e.value in ("None", "True", "False")):
                return True
            if isinstance(e, cst.Name):
                out.append(e)
                return True
            return False

        return out if visit(display) else None

    @staticmethod
    def _parameter(ctx: SiteContext, name: cst.Name) -> bool:
        """A parameter never rebound: it existed before the call, so no tensor the
        call makes is it or a view of it."""
        scope = ctx.file.scopes.get(name)
        assert scope is not None  # checked by _plain_local
        bound = list(scope[name.value])
        return len(bound) == 1 and isinstance(bound[0].node, cst.Param)

    @staticmethod
    def _fresh(ctx: SiteContext, name: cst.Name) -> bool:
        """Every binding of ``name`` makes a new tensor (no parameter, no view)."""
        scope = ctx.file.scopes.get(name)
        assert scope is not None  # checked by _plain_local
        for a in scope[name.value]:
            if isinstance(a.node, cst.Param):
                return False
            target = ctx.file.parent(a.node)
            assign = ctx.file.parent(target) if isinstance(target, cst.AssignTarget) else target
            if not _fresh_value(ctx, assign.value):
                return False
        return True


def _one_entry_a_line(display: cst.List | cst.Tuple | cst.Dict) -> cst.List | cst.Tuple | cst.Dict:
    """The display laid out as black would: one entry a line, a trailing comma."""

    def newline(extra: str) -> cst.ParenthesizedWhitespace:
        return cst.ParenthesizedWhitespace(indent=True, last_line=cst.SimpleWhitespace(extra))

    elements = [el.with_changes(comma=cst.Comma(whitespace_after=newline("    "))) for el in display.elements]
    elements[-1] = elements[-1].with_changes(comma=cst.Comma(whitespace_after=newline("")))
    if isinstance(display, cst.List):
        return display.with_changes(elements=elements, lbracket=cst.LeftSquareBracket(whitespace_after=newline("    ")))
    if isinstance(display, cst.Dict):
        return display.with_changes(elements=elements, lbrace=cst.LeftCurlyBrace(whitespace_after=newline("    ")))
    return display.with_changes(elements=elements, lpar=[cst.LeftParen(whitespace_after=newline("    "))])


def _leaf(value: cst.BaseExpression) -> cst.BaseExpression:
    """A display entry of the copy: a variable leaf cloned, the rest as it is."""
    if isinstance(value, cst.Name) and value.value not in ("None", "True", "False"):
        return _cloned(value)
    return value


def _binds(ctx: SiteContext, name: cst.Name) -> bool:
    """``name`` is assigned here (an assignment, loop or ``with`` target, walrus, ...)."""
    scope = ctx.file.scopes.get(name)
    return scope is not None and any(a.node is name for a in scope.assignments[name.value])


def _fresh_value(ctx: SiteContext, value: cst.BaseExpression) -> bool:
    if isinstance(value, cst.BinaryOperation):
        return True  # tensor arithmetic always allocates its result
    if not isinstance(value, cst.Call) or not isinstance(value.func, cst.Attribute):
        return False
    if any(a.keyword is not None and a.keyword.value in ("out", "inplace") for a in value.args):
        return False
    recv, attr = value.func.value, value.func.attr.value
    return _fresh_module(ctx, value, attr) if _is_self(recv) else attr in _FRESH_CALLS


def _fresh_module(ctx: SiteContext, call: cst.Call, attr: str) -> bool:
    """``self.<attr>(...)`` where the class only ever assigns ``self.<attr>`` a
    module from ``_FRESH_MODULES`` (``nn.Linear(...)``, ``Linear(...)``)."""
    cls = ctx.enclosing(cst.ClassDef, node=call)
    if cls is None:
        return False
    values = [
        n.value
        for n in walk(cls)
        if isinstance(n, cst.Assign)
        for t in n.targets
        if isinstance(t.target, cst.Attribute) and _is_self(t.target.value) and t.target.attr.value == attr
    ]
    return bool(values) and all(_constructor(v) in _FRESH_MODULES for v in values)


def _constructor(value: cst.BaseExpression) -> str | None:
    f = value.func if isinstance(value, cst.Call) else None
    if isinstance(f, cst.Attribute):
        return f.attr.value
    return f.value if isinstance(f, cst.Name) else None


RECIPES = (DeepcopyToClone, DeepcopyContainerToClones)
