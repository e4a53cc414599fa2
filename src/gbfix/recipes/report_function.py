"""Functions that only report: a user's `warn_once` / `log_rank0` wrapper, seen from its call.

    def warn_once(msg, _seen=set()):          # config.py
        if msg not in _seen:
            _seen.add(msg)
            warnings.warn(msg, UserWarning)

report-if calls such a function from its op, at run time and only where the tensor test
holds (``gbfix_call_if``): exactly what the original did once Dynamo had ended the graph
at the `if`, so what the function does needs no proof of purity, only that nothing in
the graph depends on it. That holds for a body of prints, warnings and log calls
(stacklevel 1: a warning or record names the function's own line, whoever calls it),
arithmetic and formatting, and state of its own: its locals, a mutable default no call
passes (`_seen=set()`), a module-level name that nothing else in its module reads
(`_warned = False` with `global _warned`). Other module-level names it reads must be ones
no function rebinds (imports, defs, a constant assigned once): the op runs inside the
graph, before Dynamo replays the graph's own updates of module globals. Declined:
anything that may touch what the graph reads or writes (an attribute or a parameter
assigned, an in-place method, a call of another user function, `self.`), a frame it
might inspect (`inspect`, `traceback`, `sys._getframe`), `try`/`with`, nested functions
and generators.

The function is found in the call's own module, or through `from <module> import name`
in a module beside it (the script's folder, or the package the call is in).
"""

from __future__ import annotations

import builtins
from pathlib import Path

import libcst as cst

from gbfix.recipes import op_helpers
from gbfix.recipes.analysis import bindings_in, called, name_of, target_names
from gbfix.recipes.base import SiteContext
from gbfix.recipes.leaf_helpers import LOGGER_METHODS
from gbfix.recipes.tree import walk

# Containers and flags a module or a default may hold as the function's own state.
_STATE_CALLS = frozenset({"set", "dict", "list"})
_STATE_VALUES = (cst.Set, cst.Dict, cst.List, cst.Integer, cst.SimpleString)
# Method calls that update the function's own state (a container of its own).
_STATE_UPDATES = frozenset({"add", "append", "update", "discard", "setdefault", "clear", "pop", "remove"})
# Roots of calls that may read the stack: the named frame would be the op's.
_FRAME_READERS = frozenset({"inspect", "traceback", "_getframe", "currentframe", "stack"})


def report_function(ctx: SiteContext, call: cst.Call) -> cst.FunctionDef | None:
    """The function ``call`` calls (`f(...)`, positional arguments only) when its body
    only reports (see the module's docstring); else None."""
    if not isinstance(call.func, cst.Name) or any(a.keyword or a.star for a in call.args):
        return None
    found = _definition(ctx, call.func.value)
    if found is None:
        return None
    module, fn = found
    return fn if _reports_only(module, fn, len(call.args)) else None


def _definition(ctx: SiteContext, name: str) -> tuple[cst.Module, cst.FunctionDef] | None:
    """The module-level `def name` the site's module calls: its own, or one it imports
    from a module beside it."""
    bound = bindings_in(ctx.file, name)
    if len(bound) != 1:
        return None
    node = bound[0]
    if isinstance(node, cst.FunctionDef):
        return (ctx.module, node) if any(s is node for s in ctx.module.body) else None
    if not isinstance(node, cst.ImportFrom) or isinstance(node.names, cst.ImportStar) or node.module is None and not node.relative:
        return None
    alias = next((a for a in node.names if (name_of(a.asname.name) if a.asname else name_of(a.name)) == name), None)
    if alias is None or not isinstance(alias.name, cst.Name):
        return None
    path = _module_file(ctx.file.source.path, len(node.relative), _dotted(node.module) if node.module else [])
    if path is None:
        return None
    try:
        module = cst.parse_module(path.read_bytes())
    except (OSError, cst.ParserSyntaxError, UnicodeDecodeError):
        return None
    defs = [s for s in module.body if isinstance(s, cst.FunctionDef) and s.name.value == alias.name.value]
    others = [s for s in module.body if s not in defs and alias.name.value in _bound_at_top(s)]
    return (module, defs[0]) if len(defs) == 1 and not others else None


def _dotted(node: cst.BaseExpression) -> list[str]:
    if isinstance(node, cst.Attribute):
        return [*_dotted(node.value), node.attr.value]
    return [node.value] if isinstance(node, cst.Name) else []


def _module_file(site: Path, level: int, parts: list[str]) -> Path | None:
    """The file of the module an import in ``site`` names: relative (``level`` dots), or
    absolute from the script's folder or from the root of the package ``site`` is in."""
    here = site.parent
    if level:
        base = here
        for _ in range(level - 1):
            base = base.parent
        roots = [base]
    else:
        top = here
        while (top / "__init__.py").is_file():
            top = top.parent
        roots = [here] if top == here else [top]
    for root in roots:
        target = root.joinpath(*parts) if parts else root
        for candidate in (target.with_suffix(".py"), target / "__init__.py"):
            if parts and candidate.is_file():
                return candidate
    return None


def _bound_at_top(stmt: cst.CSTNode) -> set[str]:
    """The names a module-level statement binds."""
    if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
        return {stmt.name.value}
    out: set[str] = set()
    for n in walk(stmt):
        if isinstance(n, cst.AssignTarget):
            out |= set(target_names(n.target))
        elif isinstance(n, (cst.AugAssign, cst.AnnAssign)):
            out |= set(target_names(n.target))
        elif isinstance(n, cst.ImportAlias):
            out.add(name_of(n.asname.name) if n.asname else _dotted(n.name)[0])
    return out


def _reports_only(module: cst.Module, fn: cst.FunctionDef, passed: int) -> bool:
    if fn.decorators or fn.asynchronous or fn.params.star_kwarg or fn.params.kwonly_params:
        return False
    params = [*fn.params.posonly_params, *fn.params.params]
    if passed > len(params) and not isinstance(fn.params.star_arg, cst.Param):
        return False
    # a mutable default no call passes: the function's own state
    own = {p.name.value for p in params[passed:] if p.default is not None and _state_value(p.default)}
    own |= _module_state(module, fn)
    declared: set[str] = set()
    for n in walk(fn.body):
        if isinstance(n, (cst.FunctionDef, cst.ClassDef, cst.Lambda, cst.Yield, cst.Await, cst.Try, cst.With, cst.Nonlocal)):
            return False
        if isinstance(n, cst.Global):
            names = {name_of(g.name) for g in n.names}
            if not names <= own:
                return False
            declared |= names
    locals_, loggers = _locals(fn) - declared, _loggers(module)
    if (_BUILTINS_OK | {"print"}) & (locals_ | set().union(*map(_bound_at_top, module.body))):
        return False  # a builtin it calls is another function here
    if not all(_fixed_global(module, name) for name in _loaded(fn) - locals_ - own):
        return False
    for n in walk(fn.body):
        if isinstance(n, cst.BaseSmallStatement) and not _statement_ok(n, own, locals_, loggers):
            return False
        tested = n.test if isinstance(n, (cst.If, cst.While)) else n.iter if isinstance(n, cst.For) else None
        if tested is not None and not _calls_ok(tested, own, loggers):
            return False
    return True


def _loaded(fn: cst.FunctionDef) -> set[str]:
    """The names the function's body reads (not attribute names or keywords)."""
    skip = {id(n.attr) for n in walk(fn.body) if isinstance(n, cst.Attribute)}
    skip |= {id(a.keyword) for a in walk(fn.body) if isinstance(a, cst.Arg) and a.keyword is not None}
    return {n.value for n in walk(fn.body) if isinstance(n, cst.Name) and id(n) not in skip}


def _fixed_global(module: cst.Module, name: str) -> bool:
    """``name`` is a builtin, or a module-level name no function rebinds: imports, defs, or
    one assignment (a value the graph may have changed since, the op would read new)."""
    bound = [s for s in module.body if name in _bound_at_top(s)]
    if not bound:
        return hasattr(builtins, name)
    if any(isinstance(g, cst.Global) and name in {name_of(n.name) for n in g.names} for g in walk(module)):
        return False
    definitions = (cst.FunctionDef, cst.ClassDef)
    imports = all(isinstance(s, definitions) or _imports(s) for s in bound)
    return imports or (len(bound) == 1 and isinstance(bound[0], cst.SimpleStatementLine))


def _imports(stmt: cst.CSTNode) -> bool:
    if isinstance(stmt, cst.SimpleStatementLine):
        return all(isinstance(sm, (cst.Import, cst.ImportFrom)) for sm in stmt.body)
    if isinstance(stmt, cst.Try):  # `try: import x` / `except ImportError: x = None`
        smalls = [n for n in walk(stmt) if isinstance(n, cst.BaseSmallStatement)]
        return all(isinstance(sm, (cst.Import, cst.ImportFrom, cst.Pass)) or _none_assigned(sm) for sm in smalls)
    return False


def _none_assigned(stmt: cst.BaseSmallStatement) -> bool:
    return isinstance(stmt, cst.Assign) and isinstance(stmt.value, cst.Name) and stmt.value.value == "None"


def _state_value(node: cst.BaseExpression) -> bool:
    if isinstance(node, cst.Name):
        return node.value in ("True", "False", "None")
    if isinstance(node, cst.Call):
        return isinstance(node.func, cst.Name) and node.func.value in _STATE_CALLS and not node.args
    return isinstance(node, _STATE_VALUES)


def _module_state(module: cst.Module, fn: cst.FunctionDef) -> set[str]:
    """Module-level names bound once, to a container or a flag, that only ``fn`` reads."""
    out = set()
    for stmt in module.body:
        if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1 or not isinstance(stmt.body[0], cst.Assign):
            continue
        assign = stmt.body[0]
        if len(assign.targets) != 1 or not isinstance(assign.targets[0].target, cst.Name) or not _state_value(assign.value):
            continue
        name = assign.targets[0].target.value
        users = [s for s in module.body if s is not stmt and s is not fn and any(isinstance(n, cst.Name) and n.value == name for n in walk(s))]
        if not users:
            out.add(name)
    return out


def _locals(fn: cst.FunctionDef) -> set[str]:
    """The function's parameters and the names it assigns."""
    params = fn.params
    out = {p.name.value for p in [*params.posonly_params, *params.params]}
    if isinstance(params.star_arg, cst.Param):
        out.add(params.star_arg.name.value)
    for n in walk(fn.body):
        if isinstance(n, cst.AssignTarget):
            out |= set(target_names(n.target))
        elif isinstance(n, (cst.AugAssign, cst.AnnAssign, cst.For, cst.CompFor)):
            out |= set(target_names(n.target))
    return out


def _statement_ok(stmt: cst.BaseSmallStatement, own: set[str], locals_: set[str], loggers: set[str]) -> bool:
    """One simple statement writes only the function's locals and its own state."""
    if isinstance(stmt, (cst.Assign, cst.AugAssign, cst.AnnAssign)):
        targets = [t.target for t in stmt.targets] if isinstance(stmt, cst.Assign) else [stmt.target]
        if not all(_writable(t, own, locals_) for t in targets):
            return False
        value = stmt.value
        return value is None or _calls_ok(value, own, loggers)
    if isinstance(stmt, cst.Expr):
        return _calls_ok(stmt.value, own, loggers)
    if isinstance(stmt, cst.Return):
        return stmt.value is None or _calls_ok(stmt.value, own, loggers)
    return isinstance(stmt, (cst.Pass, cst.Global, cst.Break, cst.Continue))


def _writable(target: cst.BaseExpression, own: set[str], locals_: set[str]) -> bool:
    if isinstance(target, cst.Name):
        return target.value in locals_ or target.value in own
    if isinstance(target, (cst.Tuple, cst.List)):
        return all(_writable(e.value, own, locals_) for e in target.elements)
    if isinstance(target, cst.Subscript):  # an item of a container of its own
        return isinstance(target.value, cst.Name) and target.value.value in own
    return False


def _calls_ok(expr: cst.CSTNode, own: set[str], loggers: set[str]) -> bool:
    """Every call in ``expr`` reports (print, warnings.warn, a method of a module-level
    logger or of `logging`), reads (builtins and methods that only read), or updates the
    function's own state; none names its caller's frame (a stacklevel other than 1) or
    reads the stack."""
    for n in walk(expr):
        if isinstance(n, (cst.Lambda, cst.NamedExpr, cst.Yield, cst.Await)):
            return False
        if isinstance(n, cst.Name) and n.value in _FRAME_READERS:
            return False
        if isinstance(n, cst.Attribute) and n.attr.value in _FRAME_READERS:
            return False
        if not isinstance(n, cst.Call):
            continue
        if any(a.keyword is not None and a.keyword.value == "stacklevel" and not _one(a.value) for a in n.args):
            return False
        recv, name = called(n)
        if name is None:
            return False
        if recv is None:
            if name not in _BUILTINS_OK and name not in _REPORTS:
                return False  # another function of the program: its effects are out of sight
            continue
        root = name_of(recv) if isinstance(recv, cst.Name) else None
        if root == "warnings" and name == "warn":
            positional = [a for a in n.args if a.keyword is None]
            if len(positional) > 2 and not _one(positional[2].value):
                return False
        elif root in own:
            if name not in _STATE_UPDATES and name not in _READS:
                return False
        elif not ((root in loggers or root == "logging") and name in LOGGER_METHODS) and name not in _READS:
            return False
    return True


def _one(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Integer) and node.value == "1"


def _loggers(module: cst.Module) -> set[str]:
    """Module-level names bound to `logging.getLogger(...)`."""
    out = set()
    for stmt in module.body:
        for n in walk(stmt) if isinstance(stmt, cst.SimpleStatementLine) else ():
            if isinstance(n, cst.Assign) and len(n.targets) == 1 and isinstance(n.targets[0].target, cst.Name):
                recv, name = called(n.value) if isinstance(n.value, cst.Call) else (None, None)
                if name == "getLogger" and isinstance(recv, cst.Name) and recv.value == "logging":
                    out.add(n.targets[0].target.value)
    return out


# print, and the helpers gbfix writes for print, warnings.warn and a logger call (an
# earlier round may have rewritten the function's own reports).
_REPORTS = frozenset({"print", op_helpers.PRINT.name, op_helpers.WARN.name, op_helpers.LOG.name})
# Builtins a report computes its text with.
_BUILTINS_OK = frozenset(
    {"str", "repr", "format", "len", "int", "float", "bool", "round", "min", "max", "abs", "sum", "sorted",
     "isinstance", "tuple", "list", "dict", "set", "any", "all", "range", "enumerate", "zip"}
)
# Methods that only read their receiver (text, containers, tensors).
_READS = frozenset(
    {"format", "join", "upper", "lower", "strip", "split", "startswith", "endswith", "replace", "get", "keys",
     "values", "items", "count", "index", "copy", "item", "tolist", "numel", "size", "dim", "max", "min", "sum",
     "mean", "std", "norm", "abs", "any", "all", "float", "double", "int", "long", "detach", "cpu", "isnan",
     "isinf", "isfinite", "argmax", "argmin"}
)
