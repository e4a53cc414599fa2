"""A library's logger called in compiled code, fixed from the user's side.

The commonest break in an installed model's code is a deprecation
``logger.warning_once(...)`` in its ``forward`` (GB0291). When the library file
is not a target, the site is the user's call (``loss = model(**batch)``) and
``logger-to-op`` / ``logger-to-leaf`` cannot rewrite the library's line. Copying
the library method into the user's code (``library-patch``) would fix it, at the
price of a long copy, and is declined for the methods it cannot copy faithfully
(``super()``, decorators). The logger is the smaller handle: the library looks
its module global ``logger`` up on every call, so binding it, where the program
starts, to a stand-in whose logging methods run as a leaf function
(``leaf_helpers.LEAF_LOGGER``) removes the break without a byte of the library
changing::

    # gbfix: transformers.models.bert.modeling_bert logs from compiled code (GB0291): ...
    gbfix_leaf_logger("transformers.models.bert.modeling_bert")

The helper imports the module there, by its dotted name, as the statement
``import transformers.models.bert.modeling_bert`` would, but at that line: an
import added to the file's head would run before the program's own first lines
(a ``sys.path`` entry, an environment variable the library reads at import).
The stand-in calls the same method of the same logger with the same arguments
(so ``warning_once`` still counts repeats) when they are text, numbers or None; any
other call (a tensor or a ``torch.Size``, whose text the leaf boundary would change,
keyword arguments) and any other attribute go to the logger itself, as before. Like a Dynamo setting, the binding changes the whole process, so it goes
only where the program starts (``config_route.program_start``). The library frame
is the innermost on the break's stack below the user's own frames whose line calls
a logging method on a module global bound at module level from
``getLogger(...)`` / ``get_logger(...)`` and never rebound.
"""

from __future__ import annotations

import ast
import functools
import os
from pathlib import Path

import libcst as cst

from gbfix import generated
from gbfix.locate import own_frame_at, torch_or_stdlib
from gbfix.recipes.analysis import bindings_in, module_name
from gbfix.recipes.base import Decline, Recipe, SiteContext
from gbfix.recipes.config_route import last_import, program_start
from gbfix.recipes.leaf_helpers import LEAF_LOGGER, LOGGER_METHODS


class LibraryLogger(Recipe):
    name = "library-logger"
    codes = ("GB0291",)
    safety = "safe"
    requires = frozenset({"leaf_function"})
    process_wide = True
    summary = "a library module's logger called in compiled code: where the program starts, the module's logger bound to a stand-in whose logging methods run as a leaf function"
    rule = "GB0291"

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        libmod, logger = _library_logger(ctx)
        home = program_start(ctx, "binding a library's logger")
        args = f'"{libmod}"' if logger == "logger" else f'"{libmod}", "{logger}"'
        self._call = f"{LEAF_LOGGER.name}({args})"
        if self._call in home.module.code:
            return None  # bound there already
        if any(not isinstance(n, (cst.FunctionDef, cst.ImportFrom)) for n in bindings_in(home, LEAF_LOGGER.name)):
            raise Decline(f"`{LEAF_LOGGER.name}` is bound to something else in {home.source.path.name}")
        self._libmod = libmod
        self.into = None if home is ctx.file else home
        # After the bindings made before (below the helper they call), else after the imports.
        made = [s for s in home.module.body if f"{LEAF_LOGGER.name}(" in home.module.code_for_node(s)]
        made = [s for s in made if isinstance(s, cst.SimpleStatementLine)]
        return made[-1] if made else last_import(home)

    def rewrite(self, node: cst.CSTNode) -> cst.FlattenSentinel:
        for p in generated.closure([LEAF_LOGGER.name]):
            self.need_helper(p.name, p.code)
        why = cst.EmptyLine(
            comment=cst.Comment(f"# gbfix: {self._libmod} logs from compiled code (GB0291): its logger's calls run as a leaf function")
        )
        line = cst.parse_statement(f"{self._call}\n")
        return cst.FlattenSentinel([node, line.with_changes(leading_lines=[cst.EmptyLine(), why])])


def _library_logger(ctx: SiteContext) -> tuple[str, str]:
    """The dotted module and the logger global of the innermost library frame below the
    user's frames that calls a logging method on its module's logger."""
    stack = ctx.site.brk.stack
    user_at = own_frame_at(ctx.site.brk, ctx.site.path)
    if user_at is None:
        raise Decline("the site's frame is not in the stack")
    for frame in reversed(stack[user_at + 1 :]):
        if not frame.file.endswith(".py") or torch_or_stdlib(frame.file):
            continue
        path = os.path.realpath(frame.file)
        try:
            st = os.stat(path)
            loggers, calls = _logging_calls(path, (st.st_mtime_ns, st.st_size))
        except (OSError, SyntaxError, ValueError):
            continue
        found = {name for name, first, last in calls if first <= frame.line <= last and name in loggers}
        if len(found) == 1:
            return module_name(Path(path)), found.pop()
    raise Decline("no library frame below the user's call logs through its module's logger")


@functools.lru_cache(maxsize=32)
def _logging_calls(path: str, stamp: tuple[int, int]) -> tuple[frozenset[str], tuple[tuple[str, int, int], ...]]:
    """A library file's loggers (module globals bound once, at module level, from a
    ``getLogger``/``get_logger`` call, and never declared ``global``) and its calls of a
    logging method on a plain name: (name, first line, last line). By ``ast``: a
    library file can be long, and most are turned down. ``stamp`` keys the cache."""
    tree = ast.parse(Path(path).read_bytes())
    bound: dict[str, int] = {}
    loggers = set()
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
        for t in targets:
            if isinstance(t, ast.Name):
                bound[t.id] = bound.get(t.id, 0) + 1
    for stmt in tree.body:
        target = stmt.targets[0] if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else stmt.target if isinstance(stmt, ast.AnnAssign) else None
        func = stmt.value.func if isinstance(target, ast.Name) and isinstance(stmt.value, ast.Call) else None
        called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        if called in ("getLogger", "get_logger"):
            loggers.add(target.id)
    declared = {n for node in ast.walk(tree) if isinstance(node, ast.Global) for n in node.names}
    loggers = {n for n in loggers if bound.get(n) == 1 and n not in declared}
    calls = tuple(
        (node.func.value.id, node.lineno, node.end_lineno or node.lineno)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.attr in LOGGER_METHODS
    )
    return frozenset(loggers), calls


RECIPES = (LibraryLogger,)
