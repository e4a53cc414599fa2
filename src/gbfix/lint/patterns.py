"""The break patterns, each with the GB code Dynamo (torch 2.13) reports for it.

Positions follow Dynamo's: a call's break is at the call, a data-dependent branch at the
comparison in its test (at the ``if``/``while`` when the test is a bare call), a
generator at its first line (decorators included). Checked with real runs against
gbfix's own detection (tests/test_lint.py holds the same cases).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from gbfix.lint.project import COMPILING, Project, Scope, is_identity

Hit = tuple[ast.AST, str, str]  # (node whose position is reported, GB code, message)
# Every code lint reports
CODES = frozenset({
    "GB0003", "GB0007", "GB0014", "GB0025", "GB0033", "GB0036", "GB0055", "GB0059", "GB0109", "GB0124",
    "GB0142", "GB0156", "GB0170", "GB0246", "GB0291", "GB4198", "GB4297", "GB4841",
})

LOGGER_METHODS = {"debug", "info", "warning", "warn", "error", "exception", "critical", "fatal", "log", "isEnabledFor",
                  "warning_once", "info_once"}  # the *_once methods transformers adds to Logger
_RNN = {"torch.nn.LSTM", "torch.nn.GRU", "torch.nn.RNN"}
_CONTAINERS = {"torch.nn.ModuleList", "torch.nn.Sequential"}
_UNMODELLED = {"io.StringIO", "io.BytesIO"}  # C objects whose methods Dynamo does not trace
_LOGGER_NAMES = {"logger", "log", "_logger", "_log", "LOGGER", "LOG", "_LOGGER"}
_GET_LOGGER = {"getLogger", "get_logger", "getChild", "LoggerAdapter"}
TIME_FUNCS = {f"time.{n}" for n in ("perf_counter", "perf_counter_ns", "time", "time_ns", "monotonic", "monotonic_ns", "process_time")}
# Functions Dynamo marks as skipped (checked on 2.13; random.randint and random.uniform are traced)
SKIPPED = {"random.random", "random.choice", "torch.manual_seed", "torch.save", "torch.get_rng_state", "zlib.crc32", "bisect.bisect", "bisect.bisect_left", "bisect.bisect_right", "hashlib.md5", "hashlib.sha1", "hashlib.sha256", "shutil.which", "os.path.exists", "os.cpu_count", "socket.gethostname", "importlib.import_module"}
# Context managers Dynamo does not support
_CONTEXTS = {"torch.random.fork_rng"}
DYNAMIC_SHAPE_FUNCS = {"torch.nonzero", "torch.unique", "torch.unique_consecutive", "torch.masked_select", "torch.argwhere"}
_DYNAMIC_SHAPE_METHODS = {"nonzero", "unique", "unique_consecutive", "masked_select", "argwhere"}
_MASK_FUNCS = {"isnan", "isinf", "isfinite", "isneginf", "isposinf", "logical_not", "logical_and", "logical_or", "logical_xor", "bool"}
_CMP = (ast.Gt, ast.Lt, ast.GtE, ast.LtE, ast.Eq, ast.NotEq)


def traced_nodes(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[tuple[ast.AST, ast.stmt]]:
    """The nodes Dynamo traces in ``fn``'s body, each with its statement.

    Nested defs and classes are left out (they are followed when called); of an
    ``if torch.compiler.is_compiling():`` only the branch that runs compiled is kept.
    """
    stack: list[tuple[ast.AST, ast.stmt]] = [(s, s) for s in fn.body]
    while stack:
        node, stmt = stack.pop()
        if isinstance(node, ast.stmt):
            stmt = node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(node, (ast.If, ast.IfExp)):
            live = under_compile(node.test)
            if live is not None:
                branch = node.body if live else node.orelse
                stack.extend((c, stmt) for c in (branch if isinstance(branch, list) else [branch]))
                continue
        yield node, stmt
        stack.extend((c, stmt) for c in ast.iter_child_nodes(node))


def under_compile(test: ast.expr) -> bool | None:
    """The value of ``test`` while Dynamo traces, if it only depends on ``is_compiling()``."""
    if isinstance(test, ast.Call):
        f = test.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
        return True if name in COMPILING else None
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = under_compile(test.operand)
        return None if inner is None else not inner
    if isinstance(test, ast.BoolOp):
        values = [under_compile(v) for v in test.values]
        stop = isinstance(test.op, ast.Or)  # the value that decides: True for `or`, False for `and`
        if stop in values:
            return stop
        return (not stop) if all(v is not None for v in values) else None
    return None


def generator_hit(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> Hit | None:
    """A compiled function that yields: Dynamo skips its frame whole (GB0003), reported
    at the code object's first line (the first decorator's, like Dynamo)."""
    for node, _ in traced_nodes(fn):
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            first = fn.decorator_list[0].lineno if fn.decorator_list else fn.lineno
            site = ast.Pass(lineno=first, col_offset=fn.col_offset, end_lineno=first, end_col_offset=fn.col_offset)
            return site, "GB0003", "torch.compile on a generator function: Dynamo skips it whole, it runs eagerly"
    return None


def check(node: ast.AST, scope: Scope, project: Project) -> Iterator[Hit]:
    if isinstance(node, ast.Call):
        yield from _check_call(node, scope, project)
    elif isinstance(node, (ast.With, ast.AsyncWith)):
        for item in node.items:
            e = item.context_expr
            if isinstance(e, ast.Call) and (q := project.qual(e.func, scope)) in _CONTEXTS:
                yield node, "GB0142", f"with {q}(): a context manager Dynamo does not support"
    elif isinstance(node, (ast.If, ast.While, ast.IfExp)):
        what = "conditional expression" if isinstance(node, ast.IfExp) else "branch"
        for site in dict.fromkeys(_branch_sites(node.test, node, scope, project)):
            yield site, "GB0170", f"{what} on a tensor value (data-dependent control flow)"
    elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
        # x[mask] = v (a store) is traced as index_put; only a load has a data-dependent shape
        if not isinstance(node.value, (ast.Tuple, ast.List, ast.Constant, ast.Dict)) and _is_mask(node.slice, scope, project):
            yield node, "GB0036", "boolean-mask indexing: the output shape depends on the data"
        elif _made_by(node.value, _CONTAINERS, scope, project) and project.is_tensor(node.slice, scope):
            yield node, "GB0124", "a ModuleList indexed by a tensor reads its value into Python"


def _check_call(call: ast.Call, scope: Scope, project: Project) -> Iterator[Hit]:
    f = call.func
    q = project.qual(f, scope)
    if q == "print":
        yield call, "GB0059", "print() in compiled code"
    elif q in ("warnings.warn", "warnings.warn_explicit"):
        yield call, "GB0007", "warnings.warn() in compiled code"
    elif q in TIME_FUNCS:
        yield call, "GB0007", f"{q}() in compiled code (Dynamo skips clock reads)"
    elif q in SKIPPED:
        yield call, "GB0007", f"{q}() in compiled code (a function Dynamo skips)"
    elif q == "open":
        yield call, "GB0059", "open() in compiled code"
    elif q == "copy.deepcopy":
        yield call, "GB4198", "copy.deepcopy() in compiled code"
    elif q == "torch._dynamo.graph_break":
        yield call, "GB0025", "explicit torch._dynamo.graph_break()"
    elif q == "torch._dynamo.skip_frame":
        yield call, "GB4297", "explicit torch._dynamo.skip_frame(): the whole frame runs eagerly"
    elif q == "torch.nn.functional.one_hot":
        width = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "num_classes"), None)
        if width is None or (isinstance(width, ast.UnaryOp) and isinstance(width.operand, ast.Constant)):  # absent or -1
            yield call, "GB0246", "one_hot() without num_classes: the output width depends on the data"
    elif q is not None and q.startswith("torch.") and any(k.arg == "generator" for k in call.keywords):
        yield call, "GB0055", f"{q}(generator=...): Dynamo cannot trace a torch.Generator argument"
    elif q in DYNAMIC_SHAPE_FUNCS or (q == "torch.where" and len(call.args) == 1 and not call.keywords):
        yield call, "GB0036", f"{q}(): the output shape depends on the data"
    elif q is not None and q.startswith("logging.") and q.count(".") == 1 and q[8:] in LOGGER_METHODS:
        yield call, "GB4841", f"{q}() in compiled code (the root logger)"
    elif q is not None and q.startswith("math.") and call.args and project.is_tensor(call.args[0], scope):
        yield call, "GB0033", f"{q}() of a tensor turns it into a Python number"
    elif q in ("float", "int", "bool") and len(call.args) == 1 and project.is_tensor(call.args[0], scope):
        yield call, "GB0124", f"{q}() of a tensor turns it into a Python number"
    elif q is None and _made_by(f, _RNN, scope, project):
        yield call, "GB0014", f"{_short(f)} is an RNN module, which Dynamo does not trace (allow_rnn)"
    elif q is None and isinstance(f, ast.Attribute) and _made_by(f.value, _UNMODELLED, scope, project):
        yield call, "GB0156", f"{_short(f)}(): a method of an object Dynamo does not model"
    elif q is None and isinstance(f, ast.Attribute):
        m = f.attr
        if m == "item" and not call.args and not call.keywords:
            yield call, "GB0124", ".item() turns a tensor into a Python number"
        elif m == "tolist" and not call.args and not call.keywords:
            if project.is_int_tensor(f.value, scope):
                yield call, "GB0033", ".tolist() of an integer tensor"
            else:
                yield call, "GB0109", ".tolist() of a tensor (reported as GB0033 if it holds integers)"
        elif m in _DYNAMIC_SHAPE_METHODS:
            yield call, "GB0036", f".{m}(): the output shape depends on the data"
        elif m in LOGGER_METHODS and _is_logger(f.value, scope, project):
            yield call, "GB0291", f"{_short(f)}() is a logging.Logger method, which Dynamo cannot trace"


def _is_logger(e: ast.expr, scope: Scope, project: Project) -> bool:
    vals = [(e, scope)] if isinstance(e, ast.Call) else project.values(e, scope)
    if not vals:  # unresolved: go by the name (`logger`, `self.log`)
        name = e.attr if isinstance(e, ast.Attribute) else e.id if isinstance(e, ast.Name) else None
        return name in _LOGGER_NAMES and not project.resolve(e, scope)
    for v, s in vals:
        if isinstance(v, ast.Call):
            f = v.func
            if (isinstance(f, ast.Attribute) and f.attr in _GET_LOGGER) or (isinstance(f, ast.Name) and f.id in _GET_LOGGER):
                return True
        if project.qual(v, s) == "logging.root":
            return True
    return False


def _branch_sites(test: ast.expr, stmt: ast.AST, scope: Scope, project: Project) -> Iterator[ast.AST]:
    """Where Dynamo reports data-dependent branches on ``test``: each tensor comparison
    (both halves of an `and`), else the statement itself."""
    if isinstance(test, ast.BoolOp):
        for v in test.values:
            yield from _branch_sites(v, stmt, scope, project)
    elif isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        yield from _branch_sites(test.operand, stmt, scope, project)
    elif isinstance(test, ast.Compare):
        if not is_identity(test) and any(project.is_tensor(x, scope) for x in (test.left, *test.comparators)):
            yield test
    elif isinstance(test, ast.Call) and isinstance(test.func, ast.Attribute) and test.func.attr in ("any", "all") and not test.args:
        yield stmt
    elif project.is_tensor(test, scope):
        yield stmt


def _made_by(e: ast.expr, factories: set[str], scope: Scope, project: Project) -> bool:
    """``e`` (``self.lstm``) holds what one of ``factories`` (``torch.nn.LSTM``) built."""
    return any(isinstance(v, ast.Call) and project.qual(v.func, s) in factories for v, s in project.values(e, scope))


def _is_mask(e: ast.expr, scope: Scope, project: Project) -> bool:
    """An obvious boolean mask: a comparison, ~ & | ^ of masks, an isnan-like predicate."""
    if isinstance(e, ast.Compare):
        operands = (e.left, *e.comparators)
        return all(isinstance(op, _CMP) for op in e.ops) and not all(isinstance(x, ast.Constant) for x in operands)
    if isinstance(e, ast.BinOp) and isinstance(e.op, (ast.BitAnd, ast.BitOr, ast.BitXor)):
        return _is_mask(e.left, scope, project) or _is_mask(e.right, scope, project)
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Invert):
        return _is_mask(e.operand, scope, project)
    if isinstance(e, ast.Tuple):
        return any(_is_mask(x, scope, project) for x in e.elts)
    if isinstance(e, ast.Call):
        q = project.qual(e.func, scope)
        name = q.rpartition(".")[2] if q else e.func.attr if isinstance(e.func, ast.Attribute) else None
        return name in _MASK_FUNCS and (q is None or q.startswith("torch."))
    if isinstance(e, ast.Name):
        vals = project.values(e, scope)
        return bool(vals) and all(_is_mask(v, s, project) for v, s in vals)
    return False


def _short(e: ast.expr) -> str:
    text = ast.unparse(e)
    return text if len(text) <= 40 else "..." + text[-37:]
