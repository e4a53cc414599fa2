"""The scanned files as one program: names, imports, classes, and what torch.compile reaches.

Everything here is static and best effort (the stdlib ``ast``, no import of user code):
names are resolved through the files' own imports, definitions and assignments, flow
insensitively (every value a name is ever bound to in a scope counts). What cannot be
resolved is left out, so the linter misses breaks rather than inventing them.
"""

from __future__ import annotations

import ast
import builtins
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Union

from gbfix.lint.index import PathIndex, package_dir

# Calls that compile their first argument (``torch._dynamo.optimize(...)`` is the old API).
COMPILE = {"torch.compile", "torch._dynamo.optimize"}
# Decorators that keep a function out of the trace (opaque to Dynamo): their bodies never
# break the graph, whatever they hold. gbfix's own recipes emit some of them.
OPAQUE_SUFFIXES = ("disable", "allow_in_graph", "leaf_function", "custom_op", "nonstrict_trace", "substitute_in_graph", "assume_constant_result")
NN_MODULE = {"torch.nn.Module", "torch.nn.modules.module.Module"}
# Methods that return the module they are called on (``Net().to(device)``).
CHAIN = {"to", "cuda", "cpu", "eval", "train", "half", "float", "double", "bfloat16", "requires_grad_", "share_memory", "compile"}
CONTAINERS = {"torch.nn.ModuleList", "torch.nn.Sequential", "torch.nn.ModuleDict", "list", "tuple"}
# Calls whose truth under Dynamo is known: code under `if not is_compiling():` never runs compiled.
COMPILING = {"is_compiling", "is_dynamo_compiling", "is_torchdynamo_compiling"}

# What counts as an obvious tensor: torch functions (minus the ones returning Python
# values or objects) and Tensor methods that return tensors.
_TORCH_NAMESPACES = {"torch", "torch.nn.functional", "torch.linalg", "torch.fft", "torch.special"}
_NOT_TENSOR_FUNCS = {
    "numel", "equal", "typename", "compile", "device", "dtype", "finfo", "iinfo", "Size", "Generator",
    "manual_seed", "seed", "initial_seed", "no_grad", "enable_grad", "inference_mode", "autocast", "save", "load",
    "cond", "broadcast_shapes", "result_type", "promote_types", "can_cast", "use_deterministic_algorithms",
}
TENSOR_METHODS = {
    "sum", "mean", "max", "min", "amax", "amin", "aminmax", "norm", "std", "var", "prod", "abs", "sqrt", "rsqrt",
    "exp", "log", "log1p", "pow", "square", "neg", "sign", "round", "floor", "ceil", "clamp", "clip",
    "float", "double", "half", "bfloat16", "long", "int", "short", "bool", "byte", "to", "type_as",
    "clone", "detach", "contiguous", "view", "view_as", "reshape", "flatten", "squeeze", "unsqueeze",
    "transpose", "permute", "expand", "expand_as", "repeat", "softmax", "log_softmax", "sigmoid", "tanh",
    "relu", "argmax", "argmin", "argsort", "sort", "topk", "cumsum", "cumprod", "matmul", "mm", "bmm", "dot",
    "masked_fill", "where", "logsumexp", "count_nonzero", "any", "all", "isnan", "isinf", "isfinite",
    "eq", "ne", "gt", "lt", "ge", "le", "add", "sub", "mul", "div", "median", "trace", "diag", "diff",
    "split", "chunk", "unbind", "gather", "index_select", "masked_select", "nonzero", "unique", "logical_not",
    "logical_and", "logical_or", "nansum", "nanmean", "allclose",
}
INT_METHODS = {"long", "int", "short", "byte", "argmax", "argmin", "argsort", "nonzero", "bincount", "count_nonzero"}
INT_FUNCS = {"torch.randint", "torch.argmax", "torch.argmin", "torch.argsort", "torch.nonzero", "torch.bincount",
             "torch.searchsorted", "torch.bucketize", "torch.randperm", "torch.count_nonzero"}
# Tensor methods that keep the dtype (for telling an integer .tolist() from a float one).
SAME_DTYPE = {"squeeze", "unsqueeze", "view", "reshape", "flatten", "transpose", "permute", "contiguous", "clone",
              "detach", "cpu", "cuda", "flip", "t", "expand", "repeat", "narrow", "select", "unique", "sort"}
TENSOR_TYPES = {"torch.Tensor", "torch.FloatTensor", "torch.LongTensor", "torch.IntTensor", "torch.BoolTensor",
                "torch.nn.Parameter", "torch.nn.parameter.Parameter"}
_INT_NAME = re.compile(r"(^|_)(lens?|lengths?|idx|index|indices|ids?|counts?|sizes?|positions?|offsets?|steps?|n|num\w*)$", re.IGNORECASE)
INT_DTYPES = {"long", "int", "int64", "int32", "int16", "int8", "uint8", "short", "bool"}
_BUILTINS = frozenset(dir(builtins))
_TENSOR_ATTRS = {"T", "mT", "H", "data", "grad", "real", "imag", "values", "indices"}


@dataclass(frozen=True)
class Ext:
    """Something outside the scanned files, by dotted name (``torch.compile``, ``print``)."""

    qual: str


@dataclass(frozen=True, eq=False)
class Func:
    node: ast.FunctionDef | ast.AsyncFunctionDef
    module: Module
    cls: ClassInfo | None  # the class it is a method of
    parent: Scope | None  # the enclosing function's scope, for a nested def


@dataclass(frozen=True, eq=False)
class Val:
    """A variable: every value bound to it, each with the scope it is evaluated in."""

    values: tuple[tuple[ast.expr, Scope], ...]


Sym = Union[Ext, "Module", Func, "ClassInfo", Val]


@dataclass(eq=False)
class Module:
    path: Path
    display: str
    lines: list[str]
    tree: ast.Module
    defs: dict[str, object] = field(default_factory=dict)  # name -> FunctionDef | ClassInfo | import tuple
    assigns: dict[str, list[ast.expr]] = field(default_factory=dict)
    config: set[str] = field(default_factory=set)  # torch._dynamo.config options set True here
    scope: Scope = None  # type: ignore[assignment]


@dataclass(eq=False)
class ClassInfo:
    node: ast.ClassDef
    module: Module
    methods: dict[str, ast.FunctionDef | ast.AsyncFunctionDef]
    _bases: list[ClassInfo] | None = None
    _attrs: dict[str, list[tuple[ast.expr, ast.FunctionDef | ast.AsyncFunctionDef]]] | None = None  # self.<name> = value, in method

    @property
    def name(self) -> str:
        return self.node.name


@dataclass(eq=False)
class Scope:
    """A function's (or the module's) names: nested defs, parameters and bound values."""

    module: Module
    func: ast.FunctionDef | ast.AsyncFunctionDef | None
    cls: ClassInfo | None
    parent: Scope | None
    nested: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = field(default_factory=dict)
    params: set[str] = field(default_factory=set)
    annotations: dict[str, ast.expr] = field(default_factory=dict)  # of the parameters
    bindings: dict[str, list[ast.expr]] = field(default_factory=dict)
    returns: list[ast.expr] = field(default_factory=list)
    imports: dict[str, tuple] = field(default_factory=dict)  # `from .blocks import Block` inside a function
    self_name: str | None = None


def body_nodes(root: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a function body (or module), not those of nested defs and classes."""
    stack = list(ast.iter_child_nodes(root))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(node))


def import_specs(stmt: ast.Import | ast.ImportFrom) -> dict[str, tuple]:
    """The names an import binds: ("module", dotted, 0) or ("from", module, level, name)."""
    out: dict[str, tuple] = {}
    if isinstance(stmt, ast.Import):
        for a in stmt.names:
            if a.asname:
                out[a.asname] = ("module", a.name, 0)
            else:  # `import a.b.c` binds `a`
                top = a.name.split(".")[0]
                out[top] = ("module", top, 0)
    else:
        for a in stmt.names:
            if a.name != "*":
                out[a.asname or a.name] = ("from", stmt.module or "", stmt.level, a.name)
    return out


def _bind_target(target: ast.expr, value: ast.expr, out: dict[str, list[ast.expr]]) -> None:
    if isinstance(target, ast.Name):
        out.setdefault(target.id, []).append(value)
    elif isinstance(target, (ast.Tuple, ast.List)):
        pairs = isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts)
        for i, t in enumerate(target.elts):
            # `enc, dec = Enc(), Dec()` pairs up; `q, k = x.chunk(2)` binds each to the call
            _bind_target(t, value.elts[i] if pairs else value, out)  # type: ignore[attr-defined]
    elif isinstance(target, ast.Starred):
        _bind_target(target.value, value, out)


def _bind_loop(target: ast.expr, it: ast.expr, out: dict[str, list[ast.expr]]) -> None:
    # `for i, layer in enumerate(xs)` and `for a, b in zip(xs, ys)` bind the elements
    if isinstance(target, ast.Tuple) and isinstance(it, ast.Call) and isinstance(it.func, ast.Name):
        if it.func.id == "enumerate" and len(target.elts) == 2 and it.args:
            _bind_target(target.elts[1], it.args[0], out)
            return
        if it.func.id == "zip" and len(target.elts) == len(it.args):
            for t, a in zip(target.elts, it.args):
                _bind_target(t, a, out)
            return
    _bind_target(target, it, out)


def fill_scope(scope: Scope, root: ast.AST) -> None:
    for node in body_nodes(root):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            scope.nested[node.name] = node
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                _bind_target(t, node.value, scope.bindings)
        elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
            _bind_target(node.target, node.value, scope.bindings)
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            _bind_loop(node.target, node.iter, scope.bindings)
        elif isinstance(node, ast.Return) and node.value is not None:
            scope.returns.append(node.value)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            scope.imports.update(import_specs(node))
        elif (  # layers.append(Block(...)): the list holds what is appended
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("append", "extend", "insert")
            and isinstance(node.func.value, ast.Name)
            and node.args
        ):
            scope.bindings.setdefault(node.func.value.id, []).append(node.args[-1])


class Project:
    """The project's modules, read as name resolution reaches them, and names resolved across them."""

    def __init__(self, index: PathIndex, load: Callable[[Path], Module | None]):
        self.index = index
        self._load = load
        self.loaded: dict[Path, Module | None] = {}  # every file read so far
        self._scopes: dict[int, Scope] = {}
        self._classes: dict[int, ClassInfo] = {}
        self._busy: set[object] = set()  # keys being computed: cycles give up instead of recursing
        self._memo_classes: dict[int, frozenset[ClassInfo]] = {}

    def module(self, path: Path) -> Module | None:
        """The module of a project file, parsed and indexed when first needed (None: it does
        not parse): most files of a big project are never read past the pre-filter."""
        if path not in self.loaded:
            m = self._load(path)
            if m is not None:
                self._index(m)
            self.loaded[path] = m
        return self.loaded[path]

    # -- indexing -------------------------------------------------------------------------

    def _index(self, m: Module) -> None:
        m.scope = Scope(m, None, None, None)
        fill_scope(m.scope, m.tree)
        for stmt in _toplevel(m.tree.body):
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                m.defs[stmt.name] = stmt
            elif isinstance(stmt, ast.ClassDef):
                m.defs[stmt.name] = self.class_info(stmt, m)
            elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
                m.defs.update(import_specs(stmt))
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for t in targets:
                    if isinstance(t, ast.Name):
                        m.defs.pop(t.id, None)  # a later assignment shadows a def or import
                        if stmt.value is not None:
                            m.assigns.setdefault(t.id, []).append(stmt.value)
                    elif (  # torch._dynamo.config.capture_scalar_outputs = True
                        isinstance(t, ast.Attribute)
                        and isinstance(stmt.value, ast.Constant)
                        and stmt.value.value is True
                        and ast.unparse(t.value).endswith("_dynamo.config")
                    ):
                        m.config.add(t.attr)

    def class_info(self, node: ast.ClassDef, m: Module) -> ClassInfo:
        info = self._classes.get(id(node))
        if info is None:
            methods = {s.name: s for s in _toplevel(node.body) if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}
            info = self._classes[id(node)] = ClassInfo(node, m, methods)
        return info

    def scope_of(self, f: Func) -> Scope:
        scope = self._scopes.get(id(f.node))
        if scope is None:
            scope = Scope(f.module, f.node, f.cls, f.parent)
            args = f.node.args
            params = [*args.posonlyargs, *args.args, *args.kwonlyargs]
            names = [a.arg for a in params] + [a.arg for a in (args.vararg, args.kwarg) if a is not None]
            scope.params = set(names)
            scope.annotations = {a.arg: _annotation(a.annotation) for a in params if a.annotation is not None}
            if f.cls is not None:
                scope.self_name = _self_param(f.node)
            fill_scope(scope, f.node)
            self._scopes[id(f.node)] = scope
        return scope

    # -- modules --------------------------------------------------------------------------

    def _module_named(self, dotted: str, near: Path) -> Module | None:
        path = self.index.named(dotted, near)
        return self.module(path) if path is not None else None

    def _module_at(self, folder: Path, dotted: str) -> Module | None:
        path = self.index.at(folder, dotted)
        return self.module(path) if path is not None else None

    def _import(self, m: Module, spec: tuple, name: str) -> list[Sym]:
        if spec[0] == "module":
            _, dotted, _ = spec
            target = self._module_named(dotted, m.path)
            return [target] if target else [Ext(dotted)]
        _, dotted, level, attr = spec
        if level:
            folder = m.path.parent
            for _ in range(level - 1):
                folder = folder.parent
            base = self._module_at(folder, dotted)
            if base is not None:
                return self.member(base, attr) or ([sub] if (sub := self._module_at(folder, f"{dotted}.{attr}".strip("."))) else [])
            sub = self._module_at(folder, f"{dotted}.{attr}".strip("."))
            return [sub] if sub else []
        base = self._module_named(dotted, m.path)
        if base is not None:
            return self.member(base, attr)
        sub = self._module_named(f"{dotted}.{attr}", m.path)
        return [sub] if sub else [Ext(f"{dotted}.{attr}")]

    def member(self, m: Module, name: str) -> list[Sym]:
        """What ``name`` is at the top level of ``m`` (a submodule for a package)."""
        key = id(m), name
        if key in self._busy:  # import cycles
            return []
        self._busy.add(key)
        try:
            d = m.defs.get(name)
            if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return [Func(d, m, None, None)]
            if isinstance(d, ClassInfo):
                return [d]
            if isinstance(d, tuple):
                return self._import(m, d, name)
            if name in m.assigns:
                return [Val(tuple((v, m.scope) for v in m.assigns[name]))]
            folder = package_dir(m.path)
            if folder is not None:
                sub = self._module_at(folder, name)
                if sub is not None:
                    return [sub]
            return []
        finally:
            self._busy.discard(key)

    # -- names ----------------------------------------------------------------------------

    def lookup(self, name: str, scope: Scope) -> list[Sym]:
        s: Scope | None = scope
        while s is not None and s.func is not None:
            if name in s.nested:
                return [Func(s.nested[name], s.module, None, s)]
            if name in s.imports:
                return self._import(s.module, s.imports[name], name)
            if name in s.bindings:
                return [Val(tuple((v, s) for v in s.bindings[name]))]
            if name in s.params:
                return []  # an argument: unknown
            s = s.parent
        m = scope.module
        found = self.member(m, name)
        if found or name in m.defs or name in m.assigns:
            return found
        if name in m.scope.bindings:  # bound at module level by a loop, a with, a walrus
            return [Val(tuple((v, m.scope) for v in m.scope.bindings[name]))]
        return [Ext(name)] if name in _BUILTINS else []

    def annotation(self, name: str, scope: Scope) -> ast.expr | None:
        """The annotation of parameter ``name`` (``x: torch.Tensor``), if ``name`` is one."""
        s: Scope | None = scope
        while s is not None and s.func is not None:
            if name in s.nested or name in s.bindings:
                return None
            if name in s.params:
                return s.annotations.get(name)
            s = s.parent
        return None

    def resolve(self, expr: ast.expr, scope: Scope) -> list[Sym]:
        if isinstance(expr, ast.Name):
            return self.lookup(expr.id, scope)
        if not isinstance(expr, ast.Attribute):
            return []
        attr, value = expr.attr, expr.value
        if scope.cls is not None and isinstance(value, ast.Name) and value.id == scope.self_name:
            return self.method(scope.cls, attr)
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "super" and scope.cls:
            return self.method(scope.cls, attr, skip_self=True)
        out: list[Sym] = []
        for sym in self.resolve(value, scope):
            if isinstance(sym, Ext):
                out.append(Ext(f"{sym.qual}.{attr}"))
            elif isinstance(sym, Module):
                out.extend(self.member(sym, attr))
            elif isinstance(sym, ClassInfo):
                out.extend(self.method(sym, attr))
        if not out:
            for cls in self.classes_of(value, scope):
                out.extend(self.method(cls, attr))
        return out

    def qual(self, expr: ast.expr, scope: Scope) -> str | None:
        for sym in self.resolve(expr, scope):
            if isinstance(sym, Ext):
                return sym.qual
        return None

    # -- classes and instances ------------------------------------------------------------

    def bases(self, cls: ClassInfo) -> list[ClassInfo]:
        if cls._bases is None:
            cls._bases = []
            for b in cls.node.bases:
                cls._bases.extend(s for s in self.resolve(b, cls.module.scope) if isinstance(s, ClassInfo) and s is not cls)
        return cls._bases

    def mro(self, cls: ClassInfo) -> list[ClassInfo]:
        out: list[ClassInfo] = []
        stack = [cls]
        while stack:
            c = stack.pop(0)
            if c not in out:
                out.append(c)
                stack.extend(self.bases(c))
        return out

    def method(self, cls: ClassInfo, name: str, skip_self: bool = False) -> list[Sym]:
        for c in self.mro(cls)[1 if skip_self else 0 :]:
            if name in c.methods:
                return [Func(c.methods[name], c.module, c, None)]
        return []

    def attrs(self, cls: ClassInfo, name: str) -> list[tuple[ast.expr, Scope]]:
        """Values assigned to ``self.<name>`` in the class's (and its bases') methods."""
        out: list[tuple[ast.expr, Scope]] = []
        for c in self.mro(cls):
            if c._attrs is None:
                c._attrs = {}
                for meth in c.methods.values():
                    for stmt in _statements(meth):
                        for target, value in _attr_assignments(stmt, _self_param(meth)):
                            c._attrs.setdefault(target, []).append((value, meth))
            # a method's scope is built only when one of its values is asked for: base classes
            # like transformers' PreTrainedModel have hundreds of long methods
            out.extend((v, self.scope_of(Func(meth, c.module, c, None))) for v, meth in c._attrs.get(name, ()))
        return out

    def is_nn_module(self, cls: ClassInfo) -> bool:
        """``cls`` derives from ``torch.nn.Module``, through the project's classes."""
        return any(self.qual(b, c.module.scope) in NN_MODULE for c in self.mro(cls) for b in c.node.bases)

    def call_targets(self, cls: ClassInfo) -> list[Sym]:
        """What calling an instance runs: its ``__call__`` if user code defines one, else ``forward``."""
        return self.method(cls, "__call__") or self.method(cls, "forward")

    def classes_of(self, expr: ast.expr, scope: Scope) -> frozenset[ClassInfo]:
        """The scanned classes whose instances ``expr`` may hold (elements, for containers)."""
        key = id(expr)
        if key in self._memo_classes:
            return self._memo_classes[key]
        if key in self._busy:
            return frozenset()
        self._busy.add(key)
        try:
            out = frozenset(self._classes_of(expr, scope))
        finally:
            self._busy.discard(key)
        self._memo_classes[key] = out
        return out

    def _classes_of(self, e: ast.expr, scope: Scope) -> set[ClassInfo]:
        out: set[ClassInfo] = set()
        if isinstance(e, ast.Call):
            q = self.qual(e.func, scope)
            if q in COMPILE and e.args:
                return set(self.classes_of(e.args[0], scope))
            if isinstance(e.func, ast.Attribute) and e.func.attr in CHAIN and q is None:
                out |= self.classes_of(e.func.value, scope)
            if q in CONTAINERS:
                for a in (*e.args, *(k.value for k in e.keywords)):
                    out |= self.classes_of(a, scope)
            for sym in self.resolve(e.func, scope):
                if isinstance(sym, ClassInfo):
                    out.add(sym)
                elif isinstance(sym, Func):
                    fscope = self.scope_of(sym)
                    for r in fscope.returns:
                        out |= self.classes_of(r, fscope)
        elif isinstance(e, (ast.List, ast.Tuple, ast.Set)):
            for x in e.elts:
                out |= self.classes_of(x, scope)
        elif isinstance(e, (ast.ListComp, ast.GeneratorExp, ast.SetComp)):
            out |= self.classes_of(e.elt, scope)
        elif isinstance(e, ast.Dict):
            for x in e.values:
                out |= self.classes_of(x, scope)
        elif isinstance(e, (ast.DictComp, ast.Starred, ast.Subscript, ast.NamedExpr)):
            out |= self.classes_of(e.value, scope)
        elif isinstance(e, ast.IfExp):
            out |= self.classes_of(e.body, scope) | self.classes_of(e.orelse, scope)
        elif isinstance(e, ast.BoolOp):
            for x in e.values:
                out |= self.classes_of(x, scope)
        elif isinstance(e, ast.Name):
            for sym in self.lookup(e.id, scope):
                if isinstance(sym, Val):
                    for v, s in sym.values:
                        out |= self.classes_of(v, s)
            ann = self.annotation(e.id, scope)
            if ann is not None:  # unet: TinyDenoiser, blocks: list[Block]
                for n in ast.walk(ann):
                    if isinstance(n, (ast.Name, ast.Attribute)):
                        out.update(c for c in self.resolve(n, scope) if isinstance(c, ClassInfo))
        elif isinstance(e, ast.Attribute):
            for v, s in self.attr_values(e, scope):
                out |= self.classes_of(v, s)
        return out

    def attr_values(self, e: ast.Attribute, scope: Scope) -> list[tuple[ast.expr, Scope]]:
        """Values of ``self.x`` / ``obj.x`` (assigned in the class) or of a module's variable."""
        if scope.cls is not None and isinstance(e.value, ast.Name) and e.value.id == scope.self_name:
            return self.attrs(scope.cls, e.attr)
        out: list[tuple[ast.expr, Scope]] = []
        for sym in self.resolve(e, scope):
            if isinstance(sym, Val):
                out.extend(sym.values)
        for cls in self.classes_of(e.value, scope):
            out.extend(self.attrs(cls, e.attr))
        return out

    def values(self, e: ast.expr, scope: Scope) -> list[tuple[ast.expr, Scope]]:
        """Every value a name or attribute is bound to; [] when unknown."""
        if isinstance(e, ast.Name):
            return [pair for sym in self.lookup(e.id, scope) if isinstance(sym, Val) for pair in sym.values]
        if isinstance(e, ast.Attribute):
            return self.attr_values(e, scope)
        return []

    # -- tensors --------------------------------------------------------------------------

    def is_tensor(self, e: ast.expr, scope: Scope) -> bool:
        """``e`` obviously evaluates to a tensor (a torch call, a Tensor method, a buffer...)."""
        key = ("tensor", id(e))
        if key in self._busy:
            return False
        self._busy.add(key)
        try:
            return self._is_tensor(e, scope)
        finally:
            self._busy.discard(key)

    def _is_tensor(self, e: ast.expr, scope: Scope) -> bool:
        if isinstance(e, ast.Call):
            syms = self.resolve(e.func, scope)
            if syms:  # a torch function, or a user or library call we cannot see into
                return any(isinstance(s, Ext) and is_torch_tensor_func(s.qual) for s in syms)
            return isinstance(e.func, ast.Attribute) and e.func.attr in TENSOR_METHODS
        if isinstance(e, ast.Compare):
            return not is_identity(e) and any(self.is_tensor(x, scope) for x in (e.left, *e.comparators))
        if isinstance(e, ast.BinOp):
            return self.is_tensor(e.left, scope) or self.is_tensor(e.right, scope)
        if isinstance(e, ast.UnaryOp) and not isinstance(e.op, ast.Not):
            return self.is_tensor(e.operand, scope)
        if isinstance(e, ast.Subscript):
            return self.is_tensor(e.value, scope)
        if isinstance(e, ast.IfExp):
            return self.is_tensor(e.body, scope) and self.is_tensor(e.orelse, scope)
        if isinstance(e, ast.Attribute) and e.attr in _TENSOR_ATTRS and self.is_tensor(e.value, scope):
            return True
        if isinstance(e, (ast.Name, ast.Attribute)):
            vals = self.values(e, scope)
            if not vals and isinstance(e, ast.Name):
                ann = self.annotation(e.id, scope)
                return ann is not None and self.qual(ann, scope) in TENSOR_TYPES
            return any(self.is_tensor(v, s) or self._is_parameter(v, s) for v, s in vals)
        return False

    def _is_parameter(self, v: ast.expr, scope: Scope) -> bool:
        return isinstance(v, ast.Call) and self.qual(v.func, scope) in ("torch.nn.Parameter", "torch.nn.parameter.Parameter")

    def is_int_tensor(self, e: ast.expr, scope: Scope) -> bool:
        if isinstance(e, ast.Subscript):
            return self.is_int_tensor(e.value, scope)
        if isinstance(e, ast.Call):
            if isinstance(e.func, ast.Attribute) and e.func.attr in INT_METHODS:
                return True
            if isinstance(e.func, ast.Attribute) and e.func.attr in SAME_DTYPE:
                return self.is_int_tensor(e.func.value, scope)
            for k in e.keywords:  # dtype=torch.long, .to(torch.int64)
                if k.arg == "dtype" and isinstance(k.value, ast.Attribute) and k.value.attr in INT_DTYPES:
                    return True
            if isinstance(e.func, ast.Attribute) and e.func.attr == "to" and e.args:
                a = e.args[0]
                return isinstance(a, ast.Attribute) and a.attr in INT_DTYPES
            return self.qual(e.func, scope) in INT_FUNCS
        if isinstance(e, ast.Attribute) and e.attr == "indices":
            return True
        if isinstance(e, ast.Name):
            vals = self.values(e, scope)
            if not vals:
                ann = self.annotation(e.id, scope)
                if ann is not None and self.qual(ann, scope) in ("torch.LongTensor", "torch.IntTensor"):
                    return True
                return _INT_NAME.search(e.id) is not None  # lengths, token_ids, counts: integers by name
            return all(self.is_int_tensor(v, s) for v, s in vals)
        return False


def is_torch_tensor_func(q: str) -> bool:
    namespace, _, name = q.rpartition(".")
    return (
        namespace in _TORCH_NAMESPACES
        and name[:1].islower()
        and not name.startswith(("is_", "get_", "set_", "_"))
        and name not in _NOT_TENSOR_FUNCS
    )


def is_identity(e: ast.Compare) -> bool:
    return all(isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in e.ops)


def _self_param(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    """The name ``self`` goes by in a method (None for a staticmethod)."""
    if any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in fn.decorator_list):
        return None
    args = [*fn.args.posonlyargs, *fn.args.args]
    return args[0].arg if args else fn.args.vararg.arg if fn.args.vararg else None


def _statements(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[ast.AST]:
    """The statements of a function body, those of nested defs left out (and the call of a
    call statement, for ``self.register_buffer(...)``): expressions are not walked."""
    stack: list[ast.AST] = list(fn.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Expr):
            yield node.value
            continue
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for part in ("body", "orelse", "finalbody", "handlers", "cases"):
                stack.extend(getattr(node, part, ()))


def _attr_assignments(node: ast.AST, self_name: str | None) -> Iterator[tuple[str, ast.expr]]:
    if self_name is None:
        return
    if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for t in targets:
            yield from _self_targets(t, node.value, self_name)
    elif (  # self.register_buffer("name", tensor), self.add_module("name", module)
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("register_buffer", "register_parameter", "add_module", "register_module")
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == self_name
        and len(node.args) >= 2
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ):
        yield node.args[0].value, node.args[1]


def _self_targets(t: ast.expr, value: ast.expr, self_name: str) -> Iterator[tuple[str, ast.expr]]:
    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == self_name:
        yield t.attr, value
    elif isinstance(t, (ast.Tuple, ast.List)):  # self.fc1, self.fc2 = Linear(...), Linear(...)
        pairs = isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(t.elts)
        for i, x in enumerate(t.elts):
            yield from _self_targets(x, value.elts[i] if pairs else value, self_name)  # type: ignore[attr-defined]


def _annotation(a: ast.expr) -> ast.expr:
    # a string annotation ("TinyDenoiser") is an expression to resolve like any other
    if isinstance(a, ast.Constant) and isinstance(a.value, str):
        try:
            return ast.parse(a.value, mode="eval").body
        except SyntaxError:
            return a
    return a


def _toplevel(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Statements of a module or class body, including those under if/try/with (not defs)."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, (ast.If, ast.Try, ast.With)):
            for part in (stmt.body, getattr(stmt, "orelse", []), getattr(stmt, "finalbody", [])):
                yield from _toplevel(part)
            for h in getattr(stmt, "handlers", []):
                yield from _toplevel(h.body)
