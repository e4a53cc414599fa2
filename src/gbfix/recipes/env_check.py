"""GB0007 / GB0059 / GB0208 inside a cached environment probe: ``assume_constant_result``.

Most environment checks do not break on torch 2.13: Dynamo runs
``importlib.util.find_spec``, ``importlib.metadata.version``, ``os.environ.get``,
``platform.system()`` and ``isinstance(x, torch.fx.Proxy)`` while it traces, and
it traces through ``functools.lru_cache`` (ignoring the cache). Probes that reach
the file system or the OS do break: ``shutil.which`` and ``os.path.exists``
(``posix.stat``), ``os.cpu_count()``, ``socket.gethostname()``,
``importlib.import_module``, ``open(...)`` of a config file, and torch's own
queries that return no tensor (``torch.get_num_threads()``,
``torch.backends.mps.is_available()``: GB0208). Written as
transformers writes them, they are module-level functions cached with
``functools.lru_cache`` (or ``functools.cache``)::

    @functools.lru_cache
    def is_nvcc_available():
        return shutil.which("nvcc") is not None

``env-check-constant`` marks the cached function
``@torch._dynamo.assume_constant_result``, below the cache decorator: Dynamo
then calls it while tracing and puts its result in the graph as a constant (on
the cache wrapper the mark does nothing: Dynamo looks through the wrapper). The
cache already fixes the result for the rest of the process after the first call
(per arguments), so the constant is what every later call returns, provided the
call has no effect but its result: the probe is declined when its body could
change anything (``global``/``nonlocal``, an assignment to an attribute or an
item, ``del``, a ``yield``, a call of ``print``, a logger or ``warnings``, a
file opened other than for reading, ``cache_clear()`` anywhere in the module),
when it may build a tensor (a call of ``torch.*`` other than the ``torch.cuda``,
``torch.backends``, ``torch.version`` queries: a cached tensor is one object that
the program may change in place, a graph constant is another)
or when the module does not import torch itself (no new ``import torch`` goes
into a module that does not have one). Dynamo calls the function itself, not
the cache, each time it traces: an effect-free probe gives the same result.
"""

from __future__ import annotations

import libcst as cst

from gbfix.recipes.analysis import qualified_names
from gbfix.recipes.base import Decline, Recipe, SiteContext
from gbfix.recipes.tree import contains, nodes

_CACHES = frozenset({"functools.lru_cache", "functools.cache"})
# Calls that act on the world rather than look at it.
_EFFECTS = frozenset({"print", "setattr", "delattr", "exec", "eval"})
_EFFECT_MODULES = ("logging.", "warnings.", "subprocess.", "shutil.copy", "shutil.move", "shutil.rmtree", "os.remove")
# Methods that log, warn or write, whatever the object.
_EFFECT_METHODS = frozenset(
    {"warn", "warning", "warning_once", "info", "info_once", "debug", "error", "critical", "exception", "log", "write", "writelines"}
)
# torch functions that answer a question about the setup; any other may build a tensor.
_TORCH_QUERIES = ("torch.cuda.", "torch.backends.", "torch.distributed.is_", "torch.version.", "torch.get_num_threads")
_READ_MODES = frozenset({"r", "rb", "rt", "br", "tr"})


class EnvCheckConstant(Recipe):
    name = "env-check-constant"
    codes = ("GB0007", "GB0059", "GB0208")
    safety = "safe"
    rule = "GB0007"
    summary = "a cached environment probe Dynamo cannot trace -> @torch._dynamo.assume_constant_result under its cache"

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        fn = ctx.enclosing(cst.FunctionDef)
        if fn is None or not isinstance(ctx.file.parent(fn), cst.Module):
            return None  # the break is not in a module-level function
        if not any(_is_cache(ctx, d.decorator) for d in fn.decorators):
            return None
        if any(_is_constant_mark(ctx, d.decorator) for d in fn.decorators):
            return None
        if not _imports_torch(ctx):
            raise Decline("the module does not import torch at module level: no new `import torch` is added to it")
        why = _effect(ctx, fn)
        if why:
            raise Decline(f"{fn.name.value} may have an effect besides its result: {why}")
        if "cache_clear" in ctx.module.code:
            raise Decline("the module clears a cache: the result may change during the run")
        return fn

    def rewrite(self, node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.FunctionDef)
        mark = cst.Decorator(cst.parse_expression("torch._dynamo.assume_constant_result"))
        return node.with_changes(decorators=[*node.decorators, mark])  # the innermost: the function, not the cache


def _is_cache(ctx: SiteContext, expr: cst.BaseExpression) -> bool:
    target = expr.func if isinstance(expr, cst.Call) else expr
    return bool(qualified_names(ctx, target) & _CACHES)


def _is_constant_mark(ctx: SiteContext, expr: cst.BaseExpression) -> bool:
    return any(q.endswith("assume_constant_result") for q in qualified_names(ctx, expr))


def _imports_torch(ctx: SiteContext) -> bool:
    """``torch`` at module level is the torch package (``import torch``)."""
    for stmt in ctx.module.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.Import) and any(
                    a.asname is None and isinstance(a.name, cst.Name) and a.name.value == "torch" for a in small.names
                ):
                    return True
    return False


def _effect(ctx: SiteContext, fn: cst.FunctionDef) -> str | None:
    """What in ``fn``'s body could change anything, or None."""
    body = fn.body
    if contains(body, (cst.Global, cst.Nonlocal, cst.Yield, cst.Del, cst.AugAssign)):
        return "global, nonlocal, yield, del or an augmented assignment"
    for target in nodes(body, (cst.AssignTarget, cst.AnnAssign)):
        t = target.target
        if isinstance(t, (cst.Attribute, cst.Subscript)):
            return f"it assigns to {ctx.code(t)}"
    for call in nodes(body, cst.Call):
        # the names the callee may be, and as written (a module the file does not import)
        names = {n.removeprefix("builtins.") for n in qualified_names(ctx, call.func)} | {ctx.code(call.func)}
        if names & _EFFECTS or any(n.startswith(_EFFECT_MODULES) for n in names):
            return f"it calls {ctx.code(call.func)}"
        if isinstance(call.func, cst.Attribute) and call.func.attr.value in _EFFECT_METHODS:
            return f"it calls {ctx.code(call.func)}"
        if any(n.startswith("torch.") and not n.startswith(_TORCH_QUERIES) for n in names):
            return f"it calls {ctx.code(call.func)}: a cached tensor is one object, a constant of the graph another"
        if "open" in names and not _reads(call):
            return "it opens a file other than for reading"
    return None


def _reads(call: cst.Call) -> bool:
    """``open(path)`` or ``open(path, "r"/"rb")``: a read."""
    mode = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == "mode"), None)
    if mode is None and len(call.args) > 1 and call.args[1].keyword is None:
        mode = call.args[1].value
    return mode is None or (isinstance(mode, cst.SimpleString) and mode.evaluated_value in _READ_MODES)


RECIPES = (EnvCheckConstant,)
