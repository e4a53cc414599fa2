"""What recipes ask about code: the shared analysis, answered one way for all of them.

- names: what a name refers to (``qualified_names``, ``builtin_at``), where it is
  bound (``global_bindings``, ``bound_before``, ``single_binding``);
- effects: whether an expression may be evaluated where the original did not
  (``pure``), whether code changes nothing but local names (``local_effects_only``),
  whether a scope changes a name's object in place (``mutated``);
- tensors: whether the code uses a name as a tensor (``tensor_evidence``);
- values only read: whether what an expression evaluates to is only read
  (``only_read``), so that a copy in its place behaves as the original does.

Everything is syntactic (LibCST scopes and trees): an answer that cannot be
proven is the cautious one, and the verifier judges what syntax cannot see.
"""

from __future__ import annotations

import builtins
import functools
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import libcst as cst
from libcst.metadata import BuiltinAssignment, FunctionScope

from gbfix import generated
from gbfix.locate import ParsedFile
from gbfix.recipes.base import Decline, SiteContext
from gbfix.recipes.tree import param_names, variables, walk
from gbfix.recipes.vocabulary import ALIASING

# ---------------------------------------------------------------- names and scopes


def qualified_names(ctx: SiteContext, node: cst.CSTNode) -> set[str]:
    """What ``node`` (a name or dotted name) may refer to, e.g. {"builtins.print"}.

    Empty when unknown; a module with ``from x import *`` could rebind anything.
    """
    scope = ctx.file.scopes.get(node)
    if scope is None or has_star_import(ctx.module):
        return set()
    return {q.name for q in scope.get_qualified_names_for(node)}


def global_bindings(ctx: SiteContext, name: str) -> list[cst.CSTNode]:
    """The nodes that bind ``name`` in the module's global scope."""
    return bindings_in(ctx.file, name)


def bindings_in(parsed: ParsedFile, name: str) -> list[cst.CSTNode]:
    """The nodes that bind ``name`` in the global scope of ``parsed`` (any file, not only the site's)."""
    scope = parsed.scopes.get(parsed.module)
    return [] if scope is None else [a.node for a in scope[name] if not isinstance(a, BuiltinAssignment)]


def is_module_global(ctx: SiteContext, name: cst.Name) -> bool:
    """``name`` is bound only at module level, so ``globals()[name]`` finds the same object."""
    scope = ctx.file.scopes.get(name)
    if scope is None or has_star_import(ctx.module):
        return False
    bound = scope[name.value]
    return bool(bound) and all(a.scope is scope.globals for a in bound)


def closure_owner(ctx: SiteContext, name: cst.Name) -> cst.FunctionDef | None:
    """The outer function whose parameter ``name``, a free variable of the function
    around it, reads (a decorator factory's ``old`` read in its wrapper), when
    that parameter is the only binding of the name there: no assignment in the
    outer function, no ``nonlocal``/``global`` of it below (LibCST's scopes miss a
    ``nonlocal`` rebinding seen from a sibling function). None otherwise."""
    inner = ctx.enclosing(cst.FunctionDef, node=name)
    scope = ctx.file.scopes.get(name)
    if inner is None or scope is None or has_star_import(ctx.module) or name.value in param_names(inner):
        return None
    bound = list(scope[name.value])
    if len(bound) != 1 or isinstance(bound[0], BuiltinAssignment) or not isinstance(bound[0].node, cst.Param):
        return None  # a builtin (`int`, `print`) has no node
    owner = ctx.enclosing(cst.FunctionDef, node=bound[0].node)
    if owner is None or owner is inner or not any(a is owner for a in ctx.ancestors(inner)):
        return None
    params = owner.params
    if not any(p is bound[0].node for p in (*params.posonly_params, *params.params, *params.kwonly_params)):
        return None  # a lambda's parameter, or *args / **kwargs
    for n in walk(owner):
        if isinstance(n, (cst.Global, cst.Nonlocal)) and any(name_of(a.name) == name.value for a in n.names):
            return None
    return owner


def range_counter(ctx: SiteContext, name: cst.Name) -> bool:
    """``name`` reads the counter of a loop: every binding of it is the target of a `for`
    over the builtin ``range(...)`` (or ``reversed(range(...))``), or the index of
    ``enumerate(...)`` (`for i, x in enumerate(xs)`). An int, which Dynamo knows while it
    traces (it unrolls the loop)."""
    scope = ctx.file.scopes.get(name)
    if scope is None or has_star_import(ctx.module):
        return False
    bound = list(scope[name.value])
    if not bound:
        return False
    for a in bound:
        target = a.node
        up = ctx.file.parent(target) if isinstance(target, cst.Name) else None
        loop: cst.CSTNode | None = None
        if isinstance(up, cst.For) and up.target is target:
            loop, counted = up, ("range",)
        elif isinstance(up, cst.Element) and isinstance(ctx.file.parent(up), cst.Tuple):
            pair = ctx.file.parent(up)
            loop = ctx.file.parent(pair)
            if not (isinstance(loop, cst.For) and loop.target is pair and len(pair.elements) == 2 and pair.elements[0] is up):
                return False
            counted = ("enumerate",)
        if not isinstance(loop, cst.For):
            return False
        it = loop.iter
        if counted == ("range",) and isinstance(it, cst.Call) and name_of(it.func) == "reversed" and len(it.args) == 1:
            if not builtin_at(ctx, it, "reversed"):
                return False
            it = it.args[0].value
        if not (isinstance(it, cst.Call) and name_of(it.func) in counted and builtin_at(ctx, it, counted[0])):
            return False
    return True


def is_builtin(ctx: SiteContext, name: cst.Name) -> bool:
    return qualified_names(ctx, name) == {f"builtins.{name.value}"}


def builtin_at(ctx: SiteContext, node: cst.CSTNode, name: str) -> bool:
    """A new reference to ``name`` written at ``node`` would find the builtin."""
    scope = ctx.file.scopes.get(node)
    if scope is None or has_star_import(ctx.module):
        return False
    return all(isinstance(a, BuiltinAssignment) for a in scope[name])


@functools.lru_cache(maxsize=8)
def has_star_import(module: cst.Module) -> bool:
    return any(
        isinstance(s, cst.ImportFrom) and isinstance(s.names, cst.ImportStar)
        for line in module.body
        if isinstance(line, cst.SimpleStatementLine)
        for s in line.body
    )


def call_at(ctx: SiteContext) -> cst.Call | None:
    """The call Dynamo broke on: the node at the span is the call or lies in its callee.

    A node inside the call's arguments is a break of its own (e.g. an ``.item()``
    in a print's argument), not of this call.
    """
    call = ctx.enclosing(cst.Call)
    if call is None:
        return None
    inside = (ctx.node, *ctx.ancestors())
    return call if ctx.node is call or any(n is call.func for n in inside) else None


def name_of(expr: cst.BaseExpression) -> str | None:
    return expr.value if isinstance(expr, cst.Name) else None


def called(call: cst.Call) -> tuple[cst.BaseExpression | None, str | None]:
    """(receiver, name) of `recv.name(...)`, or (None, name) of `name(...)`."""
    if isinstance(call.func, cst.Attribute):
        return call.func.value, call.func.attr.value
    return None, name_of(call.func)


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


def single_binding(scope: cst.CSTNode, name: str) -> cst.BaseExpression | None:
    """The value of the only assignment to ``name`` in the scope (`name = value`),
    when nothing else in the scope binds it (no parameter, loop, `+=`, `as`)."""
    value = None
    for n in walk(scope):
        if isinstance(n, cst.Assign) and any(name in target_names(t.target) for t in n.targets):
            if value is not None or len(n.targets) != 1 or name_of(n.targets[0].target) != name:
                return None
            value = n.value
        elif isinstance(n, (cst.AugAssign, cst.AnnAssign, cst.NamedExpr)) and name_of(n.target) == name:
            return None
        elif isinstance(n, (cst.For, cst.CompFor)) and name in target_names(n.target):
            return None
        elif isinstance(n, cst.AsName) and name in target_names(n.name):
            return None
        elif isinstance(n, cst.Param) and n.name.value == name:
            return None
        elif isinstance(n, (cst.Global, cst.Nonlocal)) and any(name_of(a.name) == name for a in n.names):
            return None
    return value


# The comparisons that are elementwise on tensors (not `is`, `in`).
COMPARISONS = (cst.LessThan, cst.LessThanEqual, cst.GreaterThan, cst.GreaterThanEqual, cst.Equal, cst.NotEqual)


# ---------------------------------------------------------------- effects


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
_LITERAL_CASTS = frozenset({"float", "int", "bool"})


def _no_elements(call: cst.Call) -> bool:
    """`torch.empty(0, 2)`, `x.new_empty((0, 4))`: an uninitialized tensor with nothing in it."""
    sizes = [a.value for a in call.args if a.keyword is None]
    if len(sizes) == 1 and isinstance(sizes[0], (cst.Tuple, cst.List)):
        sizes = [el.value for el in sizes[0].elements]
    return called(call)[1] in ("empty", "new_empty") and any(isinstance(v, cst.Integer) and v.value == "0" for v in sizes)


def pure_call(call: cst.Call) -> bool:
    recv, name = called(call)
    if name is None or (name in IMPURE_CALLS and not _no_elements(call)) or (name.endswith("_") and not name.startswith("__")):
        return False  # in-place ops end in `_`
    if recv is None:
        # `float("-inf")`, `int(1e4)`: a number from a literal
        return name in _PURE_BUILTINS or (
            name in _LITERAL_CASTS and bool(call.args)
            and all(isinstance(_unsigned(a.value), (cst.Integer, cst.Float, cst.SimpleString)) for a in call.args)
        )
    # `self.f(...)` runs a method or submodule whose body is out of sight.
    return name_of(recv) != "self" and not any(a.keyword is not None and a.keyword.value == "out" for a in call.args)


def pure(expr: cst.CSTNode) -> bool:
    """No side effects and no randomness: safe to evaluate when the original did not."""
    for n in walk(expr):
        if isinstance(n, (cst.NamedExpr, cst.Await, cst.Yield, cst.Lambda, cst.FormattedString)):
            return False
        if isinstance(n, (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)):
            return False
        if isinstance(n, cst.Call) and not pure_call(n):
            return False
    return True


def local_effects_only(expr: cst.CSTNode) -> bool:
    """No effect outside local names that the verifier might not see: no
    in-place ops, container mutation, I/O, host syncs or extra random draws."""
    for n in walk(expr):
        if isinstance(n, (cst.NamedExpr, cst.Yield, cst.Await)):
            return False
        if isinstance(n, cst.Call):
            _, fn = called(n)
            if (fn in IMPURE_CALLS and not _no_elements(n)) or (fn and fn.endswith("_") and not fn.startswith("__")):
                return False
            if any(a.keyword is not None and a.keyword.value == "out" for a in n.args):
                return False
    return True


def root_name(expr: cst.BaseExpression) -> str | None:
    """`x` for `x`, `x.a.b`, `x[i]`, `x.f().g`: the name an access chain starts from."""
    while isinstance(expr, (cst.Attribute, cst.Subscript, cst.Call)):
        expr = expr.func if isinstance(expr, cst.Call) else expr.value
    return name_of(expr)


def mutated(scope: cst.CSTNode, name: str, augmented: bool = True) -> bool:
    """Whether the scope mutates ``name``'s object in place or declares it global
    (``augmented``: `name += v` counts too).

    The rewrites bind a new tensor where the original kept the old object, so
    an in-place update after them would stop reaching the original object.
    """
    for n in walk(scope):
        if isinstance(n, (cst.Global, cst.Nonlocal)) and any(name_of(a.name) == name for a in n.names):
            return True
        if isinstance(n, cst.AugAssign) and root_name(n.target) == name and (augmented or name_of(n.target) != name):
            return True
        if isinstance(n, (cst.AssignTarget, cst.AnnAssign)) and isinstance(n.target, (cst.Subscript, cst.Attribute)):
            if root_name(n.target) == name:
                return True
        if isinstance(n, cst.Call):
            recv, fn = called(n)
            in_place = fn is not None and fn.endswith("_") and not fn.startswith("__")
            if in_place and (recv is not None and root_name(recv) == name or any(name_of(a.value) == name for a in n.args)):
                return True
            if any(a.keyword is not None and a.keyword.value == "out" and name_of(a.value) == name for a in n.args):
                return True
    return False


def changed_in_place(scope: cst.CSTNode, expr: cst.BaseExpression) -> bool:
    """The scope writes into the object of ``expr``, a name or an access path
    (`self.table`): ``mutated`` for a name, else a write through the path."""
    if isinstance(expr, cst.Name):
        return mutated(scope, expr.value)
    code = cst.Module([]).code_for_node(expr)
    for n in walk(scope):
        target: cst.BaseExpression | None = None
        if isinstance(n, cst.AugAssign) or (isinstance(n, cst.AssignTarget) and isinstance(n.target, cst.Subscript)):
            target = n.target
        elif isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute) and n.func.attr.value.endswith("_"):
            target = n.func.value
        if target is not None and cst.Module([]).code_for_node(target).startswith(code):
            return True
    return False


# ---------------------------------------------------------------- tensors


def is_torch_call(call: cst.Call) -> bool:
    """A call of a torch function: `torch.f(...)`, `torch.nn.functional.f(...)`, and
    `F.f(...)` / `nn.functional.f(...)`, the usual names of torch.nn.functional."""
    if not isinstance(call.func, cst.Attribute):
        return False
    owner = call.func.value
    if name_of(owner) in ("torch", "F"):
        return True
    dotted = cst.Module([]).code_for_node(owner) if isinstance(owner, cst.Attribute) else ""
    return dotted.startswith("torch.") or dotted == "nn.functional"


def tensor_evidence(name: str, scope: cst.CSTNode) -> bool:
    """Whether the scope uses ``name`` as a tensor (`name.method(...)` or
    `torch.f(name, ...)`): arithmetic alone would also fit a Python number,
    which torch.where would turn into a tensor."""
    for n in walk(scope):
        if isinstance(n, cst.Call):
            recv, _ = called(n)
            if is_torch_call(n) and n.args and name_of(n.args[0].value) == name:
                return True
            if recv is not None and name_of(recv) == name:
                return True
    return False


# ---------------------------------------------------------------- numbers

# Builtins and methods whose result is a Python number (or, for a reduction without a
# dim, a 0-dim tensor): an operand that neither widens a tensor's shape nor, for a
# floating tensor, changes its dtype.
_NUMBER_BUILTINS = frozenset({"float", "int", "len", "round", "abs", "min", "max", "bool"})
_NUMBER_METHODS = frozenset({"item", "size", "dim", "numel", "ndimension", "nelement"})
_ZERO_DIM_CASTS = frozenset({"detach", "double", "float", "half", "bfloat16", "clone"})
# Names of objects holding a run's settings: their attributes are Python values.
_SETTINGS = frozenset({"config", "cfg", "conf", "hparams", "args", "opts", "options", "settings"})


def number_evidence(ctx: SiteContext, expr: cst.BaseExpression, scope: cst.CSTNode, _depth: int = 0) -> bool:
    """Whether ``expr`` is shown to be a Python number or a 0-dim tensor: a literal,
    a size, a `.item()`, a full reduction, a setting (`self.config.eps`), a
    parameter annotated or defaulting to a number, an attribute every method of the
    class sets to such a value, or a name bound once to one of these. A bare name
    with nothing behind it may be a tensor of any shape and dtype."""
    if _depth > 6:  # a chain of three local names, each bound to arithmetic
        return False
    again = functools.partial(number_evidence, ctx, scope=scope, _depth=_depth + 1)
    if isinstance(expr, (cst.Integer, cst.Float)):
        return True
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, (cst.Minus, cst.Plus)):
        return again(expr.expression)
    if isinstance(expr, cst.BinaryOperation) and not isinstance(expr.operator, cst.MatrixMultiply):
        return again(expr.left) and again(expr.right)
    if isinstance(expr, cst.Subscript):  # x.shape[i]
        return isinstance(expr.value, cst.Attribute) and expr.value.attr.value == "shape"
    if isinstance(expr, cst.Name):
        return range_counter(ctx, expr) or _name_is_number(ctx, expr.value, scope, _depth)
    if isinstance(expr, cst.Attribute):
        return _attribute_is_number(ctx, expr, scope, _depth)
    if isinstance(expr, cst.Call):
        recv, name = called(expr)
        if recv is None:
            return name in _NUMBER_BUILTINS and all(again(a.value) or name in ("float", "int", "len", "bool") for a in expr.args)
        if name_of(recv) == "math" or name in _NUMBER_METHODS:
            return True
        from gbfix.recipes.vocabulary import FULL_REDUCTIONS

        if name in FULL_REDUCTIONS and not expr.args and not is_torch_call(expr):
            return True  # a 0-dim tensor
        return name in _ZERO_DIM_CASTS and not expr.args and isinstance(recv, cst.Call) and again(recv)
    return False


def _name_is_number(ctx: SiteContext, name: str, scope: cst.CSTNode, depth: int) -> bool:
    if isinstance(scope, cst.FunctionDef):
        p = scope.params
        for param in [*p.posonly_params, *p.params, *p.kwonly_params]:
            if param.name.value == name:
                ann = param.annotation.annotation if param.annotation else None
                if ann is not None:
                    return name_of(ann) in ("int", "float")
                return param.default is not None and isinstance(_unsigned(param.default), (cst.Integer, cst.Float))
    value = single_binding(scope, name)
    return value is not None and number_evidence(ctx, value, scope, depth + 1)


def _unsigned(expr: cst.BaseExpression) -> cst.BaseExpression:
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, (cst.Minus, cst.Plus)):
        return expr.expression
    return expr


def _attribute_is_number(ctx: SiteContext, expr: cst.Attribute, scope: cst.CSTNode, depth: int) -> bool:
    chain: list[str] = []
    node: cst.BaseExpression = expr
    while isinstance(node, cst.Attribute):
        chain.append(node.attr.value)
        node = node.value
    root = name_of(node)
    if root == "math" or any(part in _SETTINGS for part in chain[1:]) or (root in _SETTINGS and len(chain) == 1):
        return True
    if isinstance(node, cst.Call) and name_of(getattr(node.func, "attr", None) or node.func) in ("finfo", "iinfo"):
        return True  # torch.finfo(dtype).min
    if root != "self" or len(chain) != 1 or not isinstance(scope, cst.FunctionDef):
        return False
    return _self_attribute_is_number(ctx, scope, chain[0], depth)


def _self_attribute_is_number(ctx: SiteContext, method: cst.FunctionDef, attr: str, depth: int) -> bool:
    """Every `self.<attr> = value` in the class of ``method`` sets a number (judged in its method)."""
    cls = ctx.enclosing(cst.ClassDef, node=method)
    if cls is None:
        return False
    found = False
    for fn in (n for n in walk(cls.body) if isinstance(n, cst.FunctionDef)):
        for n in walk(fn.body):
            if isinstance(n, (cst.AugAssign, cst.AnnAssign)) and _is_self_attr(n.target, attr):
                return False
            if isinstance(n, cst.Assign) and any(_is_self_attr(t.target, attr) for t in n.targets):
                if len(n.targets) != 1 or not number_evidence(ctx, n.value, fn, depth + 1):
                    return False
                found = True
    return found


def _is_self_attr(target: cst.BaseExpression, attr: str) -> bool:
    return isinstance(target, cst.Attribute) and name_of(target.value) == "self" and target.attr.value == attr


# ---------------------------------------------------------------- values only read


_NOT_ELEMENTWISE = (cst.Is, cst.IsNot, cst.In, cst.NotIn)
# Reads that expose identity or memory rather than values.
EXPOSING = frozenset("data grad numpy data_ptr untyped_storage storage set_ share_memory_".split())


def keyword_args(call: cst.Call) -> dict[str, cst.BaseExpression] | None:
    """Keyword arguments by name; None with ``*``/``**`` arguments."""
    if any(a.star for a in call.args):
        return None
    return {a.keyword.value: a.value for a in call.args if a.keyword is not None}


def only_read(ctx: SiteContext, node: cst.BaseExpression, _depth: int = 0) -> bool:
    """The value of ``node`` is only read: by operators, by tensor methods and torch
    functions that write nothing in place (views followed on), as an index, or through a
    local bound once whose every use is such a read, or a return whose every caller in
    the file reads it so (``returned_only_read``). A copy there behaves as the original
    does."""
    if _depth > 4:  # returns followed through callers: a chain this long is not proven
        return False
    up = ctx.file.parent(node)
    if isinstance(up, cst.Index) and up.value is node:  # `table[node]` reads the index, whatever the table
        return isinstance(ctx.file.parent(ctx.file.parent(up)), cst.Subscript)
    if isinstance(up, cst.Return) and up.value is node:
        return returned_only_read(ctx, up, _depth)
    if isinstance(up, cst.BinaryOperation) or (isinstance(up, cst.AugAssign) and up.value is node):
        return True
    if isinstance(up, (cst.Comparison, cst.ComparisonTarget)):  # elementwise, not identity or membership
        targets = up.comparisons if isinstance(up, cst.Comparison) else [up]
        return not any(isinstance(c.operator, _NOT_ELEMENTWISE) for c in targets)
    if isinstance(up, cst.UnaryOperation):
        return isinstance(up.operator, (cst.Minus, cst.Plus, cst.BitInvert))
    if isinstance(up, cst.Subscript) and up.value is node:
        return not isinstance(ctx.file.parent(up), (cst.AssignTarget, cst.AugAssign, cst.Del)) and only_read(ctx, up, _depth)
    if isinstance(up, cst.Attribute) and up.value is node:
        name = up.attr.value
        if name in EXPOSING or name.endswith("_"):
            return False
        call = ctx.file.parent(up)
        result = call if isinstance(call, cst.Call) and call.func is up else up
        return name not in ALIASING or only_read(ctx, result, _depth)
    if isinstance(up, cst.Element):
        display = ctx.file.parent(up)
        return isinstance(display, (cst.List, cst.Tuple)) and _torch_argument(ctx, display, _depth)
    if isinstance(up, cst.Arg):
        return _torch_argument(ctx, node, _depth) or _helper_argument(ctx, node, _depth)
    if isinstance(up, cst.Assign) and up.value is node:
        refs = local_uses(ctx, up)
        return refs is not None and bool(refs) and all(only_read(ctx, r, _depth) for r in refs)
    return False


def returned_only_read(ctx: SiteContext, ret: cst.Return, _depth: int = 0) -> bool:
    """What ``ret`` returns is only read by every caller in the file: a method called as
    `self.name(...)` in its class, or a module function called by its name, never
    referenced otherwise (no callback, no decorator), with at least one call.

    A caller in another module is out of sight: one that wrote into the returned
    tensor in place would write into a table in the original and into a copy in the
    rewrite (docs/how-it-works.md says so)."""
    fn = ctx.enclosing(cst.FunctionDef, cst.Lambda, node=ret)
    if not isinstance(fn, cst.FunctionDef) or fn.decorators or fn.asynchronous:
        return False
    holder = ctx.file.parent(fn)
    holder = holder if isinstance(holder, cst.Module) else ctx.file.parent(holder)  # a method: its class
    name = fn.name.value
    uses: list[cst.Attribute] | list[cst.Name]
    if isinstance(holder, cst.ClassDef):
        uses = [
            n for n in walk(holder)
            if isinstance(n, cst.Attribute) and n.attr.value == name and name_of(n.value) == "self"
        ]
        calls = [ctx.file.parent(u) for u in uses]
    elif isinstance(holder, cst.Module) and len(global_bindings(ctx, name)) == 1:
        uses = [n for n in variables(ctx.module) if n.value == name and n is not fn.name]
        calls = [ctx.file.parent(u) for u in uses]
    else:
        return False
    if not calls or any(not isinstance(c, cst.Call) or c.func is not u for c, u in zip(calls, uses, strict=True)):
        return False
    return all(only_read(ctx, c, _depth + 1) for c in calls)


def _helper_argument(ctx: SiteContext, node: cst.BaseExpression, _depth: int) -> bool:
    """``node`` is an argument of one of gbfix's own helpers (``gbfix_*``, which read
    their arguments and may return one as it is) whose result is only read."""
    call = ctx.file.parent(ctx.file.parent(node))
    return (
        isinstance(call, cst.Call) and isinstance(call.func, cst.Name) and call.func.value.startswith("gbfix_")
        and only_read(ctx, call, _depth)
    )


def local_uses(ctx: SiteContext, assign: cst.Assign) -> list[cst.Name] | None:
    """The reads of the local that ``assign`` binds, when that is the name's only binding."""
    if len(assign.targets) != 1 or not isinstance(assign.targets[0].target, cst.Name):
        return None
    target = assign.targets[0].target
    scope = ctx.file.scopes.get(target)
    if not isinstance(scope, FunctionScope) or len(scope.assignments[target.value]) != 1:
        return None
    (assignment,) = scope.assignments[target.value]
    refs = [ref.node for ref in assignment.references]
    return cast("list[cst.Name]", refs) if all(isinstance(r, cst.Name) for r in refs) else None


def _torch_argument(ctx: SiteContext, node: cst.BaseExpression, _depth: int = 0) -> bool:
    """``node`` is a positional argument of a torch function that writes nothing in place."""
    arg = ctx.file.parent(node)
    call = ctx.file.parent(arg) if isinstance(arg, cst.Arg) else None
    if not isinstance(call, cst.Call) or arg.keyword is not None or arg.star or keyword_args(call) is None:
        return False
    if "out" in (keyword_args(call) or {}):
        return False
    names = qualified_names(ctx, call.func)
    if len(names) != 1 or not next(iter(names)).startswith("torch."):
        return False
    name = next(iter(names)).rpartition(".")[2]
    if name.endswith("_") or name in EXPOSING:
        return False
    return name not in ALIASING or only_read(ctx, call, _depth)


def taken(ctx: SiteContext, helper: str) -> bool:
    """The module binds ``helper`` to something else than gbfix's: a function, an import
    from the generated module, or a statement of the registered piece of that name (an
    earlier round wrote it into this file: `_gbfix_take_op = getattr(...)`)."""
    for n in global_bindings(ctx, helper):
        if isinstance(n, cst.FunctionDef) or generated.is_import(n):
            continue
        statement = next((a for a in ctx.ancestors(n) if isinstance(a, cst.BaseSmallStatement)), n)
        if ctx.code(statement).strip() not in _piece_statements(helper):
            return True
    return False


@functools.cache
def _piece_statements(name: str) -> frozenset[str]:
    """The simple statements of the registered piece ``name``, as written."""
    code = next((p.code for p in generated.closure([name]) if p.name == name), "")
    module = cst.parse_module(code)
    return frozenset(module.code_for_node(n).strip() for n in walk(module) if isinstance(n, cst.BaseSmallStatement))


def module_name(path: Path) -> str:
    """The dotted name a file is imported under: its package folders (with ``__init__.py``) and stem."""
    parts = [] if path.name == "__init__.py" else [path.stem]
    folder = path.parent
    while (folder / "__init__.py").is_file():
        parts.insert(0, folder.name)
        folder = folder.parent
    if not parts or not all(p.isidentifier() for p in parts):
        raise Decline("not an importable module")
    return ".".join(parts)
