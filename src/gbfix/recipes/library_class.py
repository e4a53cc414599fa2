"""A break inside a library class's method, fixed by a subclass in the user's code.

When compiled code calls an ``nn.Module`` (or any object) whose class lives in
a file gbfix may not edit (a third-party package, a vendored folder that is not
among the targets, torch itself) and the break lies in that class's method,
the deepest frame in the targets is the user's call (``h = self.attn(x)``),
where no recipe applies. This recipe copies the method, verbatim, into a
subclass in the user's file, lets the recipe that answers the break rewrite it
there, and constructs the subclass instead of the library class::

    from tinyformer import Attention

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = Attention(64, debug=True)

becomes::

    from tinyformer import Attention
    from tinyformer.layers import exists   # the module globals the method reads


    # gbfix: ...
    class _GbfixFixedAttention(Attention):
        def forward(self, x):
            ...  # the library's text, its break rewritten (e.g. by print-to-hop)


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = _GbfixFixedAttention(64, debug=True)

The frame below the user's call (past ``nn.Module.__call__``'s own frames)
must be a method of a module-level class of the library file; the inner
recipes treat it as the site, and the frames below it as the code it calls
(``copy.deepcopy``). The user's file must construct that class, or a subclass
of it defined in the same file that does not override the method
(``x_transformers.Encoder`` inherits ``forward`` from ``AttentionLayers``),
exactly once: in the ``__init__`` of the class holding the call (by the
attribute called when there are several), else at module level; the
constructed name must be imported at module level from the library's package.

The inner recipes (the registry's, up to this module, for the break's code)
run on the library's own file, the break's library frame the site, so they see
the method's class (what ``__init__`` assigns to ``self``) and module as they
would on the package side; the first whose rewrite lies in the method wins, and
the rewritten method replaces the copy (the helpers and imports it needs go to
the user's file, where names it binds otherwise are declined as before). Each module global the method reads is
imported under the same name (the library's own import, made absolute, or
``from <library module> import <name>``); a name the user's file already binds
to something else is declined, as are methods that would mean something else
in another class or module: async methods, decorators other than torch's
grad, autocast and TorchScript markers and transformers' docstring setters
and plain forward wrappers (those are copied with the method), ``super()``,
``__class__``, ``type(self)``, name-mangled ``__x`` names,
``global``/``nonlocal``, ``globals()``/``locals()`` and frame introspection,
module dunders (``__name__``), and library globals rebound at run time
(``global`` in the library file).

The verifier judges the edit as any other: a subclass changes the module's
class name (``print(model)``), and a warning now comes from the user's file
(the child ignores warnings torch's own files raise, so a warning moved out of
``torch.nn`` counts as new), both of which it sees. The edit replaces the whole
module (like the helper recipes), so a break still in the copied method lies
in the edit and counts as the site's own.

When the user's code does not construct the class (the library builds it
itself: ``BartModel.__init__`` builds ``BartDecoder``; the site is then the
user's call of the outer model), ``library-patch`` fixes the innermost method
of a library class on the break's stack (torch's and the standard library's
classes aside) the same way, in a subclass placed after the imports of the
site's file, and binds it where the library looks the class up when it builds
it: the global of the defining module and of each module on the stack that
imports it (``from .blocks import Mixer``)::

    if _gbfix_unchanged("tinylib.blocks", "Mixer.forward", "3d2b8ad867a1a29b"):
        import tinylib.blocks
        import tinylib.model
        from tinylib.blocks import RESIDUAL_SCALE, exists

        class _GbfixFixedMixer(tinylib.blocks.Mixer):
            def forward(self, x, mask=None):
                ...  # fixed

        _GbfixFixedMixer.__module__ = "tinylib.blocks"
        _GbfixFixedMixer.__name__ = _GbfixFixedMixer.__qualname__ = "Mixer"
        tinylib.blocks.Mixer = tinylib.model.Mixer = _GbfixFixedMixer

The guard compares the start of the sha256 of ``inspect.getsource`` of the
library's method with the text gbfix copied: on another version of the
library (or after a first run of the patch) it is off and the program runs
the library as it is. The subclass carries the library class's names, so
``print(model)``, pickles (which then name the library's class, bound to the
subclass while the patch is on) and ``type(m).__name__`` do not change. The
library's own globals the method reads are imported from the defining module
inside the guard. A module-level dict of classes holding the class
(``ATTENTION_CLASSES = {"eager": Attention}``, read when the library builds
its layers) gets the subclass in those entries too. Declined: any other read
of the class while the library is imported (a subclass's base, a class
attribute: those keep the original class), which is also what ``isinstance``
of an instance of another subclass would get wrong after the rebinding; names
of the patch the user's file binds otherwise. A construction that runs before
the patch (at import of a module imported above it) leaves the break, and the
verifier rejects the edit.

When the break lies in a module-level function of the library (``canny`` in
kornia, a loss or attention function in transformers), or in one such function
the innermost library method on the stack calls, ``library-patch`` copies that
function instead, under a name of its own (``_gbfix_fixed_canny``, named as the
library's for its repr and pickles), and binds it under the same guard in the
defining module, in the modules on the stack that import it, and in the
packages above it that re-export it (``from .canny import canny`` makes
``kornia.filters.canny`` the function: the module is then reached through
``sys.modules``). Reads of the function at import other than a dict's entries
(a registry, a default argument) keep the library's function: a break left,
which the verifier sees. Declined besides: a function that calls itself
through its module's global. When no recipe fixes the function, the next one
up the stack is tried, up to the innermost method. When the fix an inner recipe
finds for a method lies in another module-level function of the library's file
(Reformer's chunk length comes from a helper's ``np.lcm``), that function is
patched the same way, bound in its module, where the method looks it up.

Four recipes with the safety of the recipes they apply: ``library-class`` and
``library-patch`` apply the safe ones, ``library-class-unsafe`` and
``library-patch-unsafe`` the unsafe ones.
"""

from __future__ import annotations

import ast
import builtins
import functools
import hashlib
import inspect
import io
import os
import textwrap
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import cast

import libcst as cst
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor
from libcst.metadata import FunctionScope, QualifiedNameSource

from gbfix import edits, recipes
from gbfix.errors import GbfixError
from gbfix.locate import Locator, ParsedFile, own_frame_at, torch_or_stdlib
from gbfix.recipes.analysis import call_at, global_bindings, module_name, qualified_names, taken
from gbfix.recipes.base import Decline, Recipe, Replacement, Rewrite, SiteContext
from gbfix.recipes.layout import add_helpers, blank_lines_before
from gbfix.recipes.tree import nodes, variables
from gbfix.records import Edit, Frame, Safety, Site
from gbfix.sources import SourceFile, read

_HERE = "library_class"
# nn.Module.__call__'s frames between a call of a module and its forward.
_CALL_MACHINERY = frozenset({"_wrapped_call_impl", "_call_impl"})
# Names whose meaning depends on the module or frame the code runs in.
_CONTEXTUAL = frozenset({"super", "__class__", "globals", "locals", "vars", "exec", "eval", "__import__"})
_INTROSPECTION = frozenset({"sys._getframe", "inspect.currentframe", "inspect.stack", "traceback.extract_stack"})
# Decorators that mean the same on a copy of the method in another class and module
# (a registry's decorator would register the copy again): torch's grad and autocast
# modes and TorchScript markers; transformers' decorators that set the docstring
# (4.x) and its plain wrappers of forward (5.x; not auto_docstring, which reads the
# module it is applied in).
_NEUTRAL_DECORATORS = frozenset(
    {"torch.jit.ignore", "torch.jit.unused", "torch.no_grad", "torch.enable_grad", "torch.inference_mode"}
    | {"torch.autocast", "torch.amp.autocast", "torch.amp.autocast_mode.autocast", "torch.cuda.amp.autocast"}
    | {
        f"transformers.utils.{module}{name}"
        for module in ("", "doc.")
        for name in (
            "add_start_docstrings",
            "add_start_docstrings_to_model_forward",
            "add_end_docstrings",
            "add_code_sample_docstrings",
            "replace_return_docstrings",
        )
    }
    | {f"transformers.utils.{module}{name}" for module in ("", "generic.") for name in ("can_return_tuple", "merge_with_config_defaults")}
    # transformers 5's docstring generator: on a method it sets __doc__ and returns the function
    | {"transformers.utils.auto_docstring", "transformers.utils.auto_docstring.auto_docstring"}
)
_MODULE_DUNDERS = frozenset({"__name__", "__file__", "__spec__", "__package__", "__loader__", "__doc__", "__builtins__", "__path__"})


def _inner_recipes() -> tuple[type[Recipe], ...]:
    """The registry's recipes listed before this module that rewrite code in
    place: not the ones that move torch.compile (they make no sense inside a
    library's method). One that needs observed calls for a site is skipped there
    (the copied method has none yet).

    Imported here, not through ``recipes.all_recipes()``: that imports this
    module too, which is not finished at this point."""
    found = recipes.listed_before(_HERE)
    return tuple(
        r for r in found if not r.process_wide and "compile-boundary" not in r.tolerates
    )


_INNER = _inner_recipes()


class _LibraryClass(Recipe):
    """The recipes of this module: find the library method, copy it into a subclass,
    run the inner recipes there. Here the user's code constructs the subclass;
    ``_LibraryPatch`` binds it in the library instead (its own ``_build``)."""

    rule = "GB0059"

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        self._new = self._build(ctx)
        return ctx.module

    def _build(self, ctx: SiteContext) -> cst.Module:
        return _fix(ctx, self.safety)

    def rewrite(self, node: cst.CSTNode) -> Replacement | None:
        return self._new


def _codes(safety: Safety) -> tuple[str, ...]:
    return tuple(sorted({c for r in _INNER if r.safety == safety for c in r.codes}))


def _tolerates(safety: Safety) -> frozenset[str]:
    """What any inner recipe of that safety may change (none today): a class
    attribute cannot say which inner recipe made a given edit."""
    return frozenset().union(*(r.tolerates for r in _INNER if r.safety == safety))


class LibraryClass(_LibraryClass):
    name = "library-class"
    codes = _codes("safe")
    safety = "safe"
    tolerates = _tolerates("safe")
    summary = "a break in a library class's method (a file outside the targets): a subclass in this file with the method fixed by a safe recipe, constructed instead"


class LibraryClassUnsafe(_LibraryClass):
    name = "library-class-unsafe"
    codes = _codes("unsafe")
    safety = "unsafe"
    tolerates = _tolerates("unsafe")
    summary = "a break in a library class's method: a subclass in this file with the method fixed by an unsafe recipe, constructed instead"


# --- the library side ---------------------------------------------------------


def _library_frame(ctx: SiteContext) -> tuple[int, int]:
    """Indexes in the break's stack of the user's frame and of the library frame it calls."""
    stack = ctx.site.brk.stack
    mine = own_frame_at(ctx.site.brk, ctx.site.path)
    if mine is None:
        raise Decline("the site's frame is not in the stack")
    j = mine + 1
    while j < len(stack) and _machinery(stack[j]):
        j += 1
    if j >= len(stack) or not stack[j].file.endswith(".py"):
        raise Decline("no Python frame below the user's call")
    return mine, j


def _machinery(frame: Frame) -> bool:
    return frame.name in _CALL_MACHINERY and Path(frame.file).parts[-4:] == ("torch", "nn", "modules", "module.py")


@functools.lru_cache(maxsize=32)
def method_spans(path: str, stamp: tuple[int, int]) -> tuple[tuple[str, str, int, int], ...]:
    """(class, name, first line, last line) of each method of a module-level class and
    (with class "") of each module-level function, by ``ast``: some 50 times faster
    than LibCST, which a torch file can keep busy for seconds, so most frames are
    turned down before LibCST sees their file. ``stamp`` (mtime, size) keys the
    cache to the file's version."""
    tree = ast.parse(Path(path).read_bytes())
    methods = [
        (cls.name, fn.name, fn.lineno, fn.end_lineno or fn.lineno)
        for cls in tree.body
        if isinstance(cls, ast.ClassDef)
        for fn in cls.body
        if isinstance(fn, ast.FunctionDef)
    ]
    functions = [("", fn.name, fn.lineno, fn.end_lineno or fn.lineno) for fn in tree.body if isinstance(fn, ast.FunctionDef)]
    return (*methods, *functions)


@functools.lru_cache(maxsize=8)
def _parse_library(path: str, stamp: tuple[int, int]) -> ParsedFile:
    return ParsedFile(read(Path(path)))


def _library(frame: Frame) -> tuple[Path, ParsedFile]:
    """The library file holding the frame, parsed, if the frame is in a method of a
    module-level class or in a module-level function."""
    path = os.path.realpath(frame.file)
    try:
        st = os.stat(path)
        stamp = (st.st_mtime_ns, st.st_size)
        if not any(name == frame.name and a <= frame.line <= b for _, name, a, b in method_spans(path, stamp)):
            raise Decline("the frame is not in a method of a module-level class, nor in a module-level function")
        return Path(path), _parse_library(path, stamp)
    except (OSError, SyntaxError, ValueError, GbfixError, cst.ParserSyntaxError) as e:
        raise Decline(f"cannot read {path}") from e


def _method_at(lib: ParsedFile, frame: Frame) -> tuple[cst.ClassDef | None, cst.FunctionDef]:
    """The module-level class and its method whose body holds the frame's line; or
    None and the module-level function that does."""
    for stmt in lib.module.body:
        if isinstance(stmt, cst.FunctionDef) and stmt.name.value == frame.name:
            (a, _), (b, _) = lib.span(stmt)
            if a <= frame.line <= b:
                return None, stmt
        if not isinstance(stmt, cst.ClassDef) or not isinstance(stmt.body, cst.IndentedBlock):
            continue
        (first, _), (last, _) = lib.span(stmt)
        if not first <= frame.line <= last:
            continue
        for fn in stmt.body.body:
            if isinstance(fn, cst.FunctionDef) and fn.name.value == frame.name:
                (a, _), (b, _) = lib.span(fn)
                if a <= frame.line <= b:
                    return stmt, fn
    raise Decline("the frame is not in a method of a module-level class, nor in a module-level function")


def _check_method(lib: ParsedFile, fn: cst.FunctionDef, libmod: str, method: bool = True) -> None:
    """What would mean something else in another class or module (``method``: of a class)."""
    if fn.asynchronous or not isinstance(fn.body, cst.IndentedBlock):
        raise Decline("async or a one-line method")
    for decorator in fn.decorators:
        called = decorator.decorator.func if isinstance(decorator.decorator, cst.Call) else decorator.decorator
        scope = lib.scopes.get(called)
        names = {_resolved(lib, libmod, q.name) for q in scope.get_qualified_names_for(called)} if scope else set()
        if not names or not names <= _NEUTRAL_DECORATORS:
            raise Decline("decorated, other than by torch's grad, autocast or TorchScript markers or a docstring decorator")
    if nodes(fn, (cst.Global, cst.Nonlocal)):
        raise Decline("global / nonlocal")
    for name in variables(fn):
        if name.value in _CONTEXTUAL or name.value in _MODULE_DUNDERS or _mangled(name.value):
            raise Decline(f"uses {name.value}")
    for attr in nodes(fn, cst.Attribute):
        if attr.attr.value == "__class__" or _mangled(attr.attr.value):
            raise Decline(f"uses .{attr.attr.value}")
    params = fn.params.posonly_params or fn.params.params
    me = params[0].name.value if params and method else None
    for call in nodes(fn, cst.Call):
        func = call.func
        if isinstance(func, cst.Name) and func.value == "type" and [_name_of(a.value) for a in call.args] == [me]:
            raise Decline("type(self): the subclass")
        scope = lib.scopes.get(func)
        if scope is not None and {q.name for q in scope.get_qualified_names_for(func)} & _INTROSPECTION:
            raise Decline("frame introspection")


def _resolved(lib: ParsedFile, libmod: str, qualified: str) -> str:
    """A qualified name LibCST gives relative to the file's package (``...utils.x``), made absolute."""
    dots = len(qualified) - len(qualified.lstrip("."))
    if not dots:
        return qualified
    package = libmod.split(".") if lib.source.path.name == "__init__.py" else libmod.split(".")[:-1]
    return ".".join([*package[: len(package) - dots + 1], qualified[dots:]])


def _name_of(node: cst.BaseExpression) -> str | None:
    return node.value if isinstance(node, cst.Name) else None


def _mangled(name: str) -> bool:
    return name.startswith("__") and not name.endswith("__")


def _free_globals(lib: ParsedFile, fn: cst.FunctionDef) -> set[str]:
    """Module globals the method reads (builtins aside)."""
    found: set[str] = set()
    for name in variables(fn):
        if name is fn.name:  # a module-level function's own name: bound, not read
            continue
        scope = lib.scopes.get(name)
        if scope is None:
            continue
        bound = scope[name.value]
        if not bound:
            raise Decline(f"{name.value} is not bound (a star import?)")
        if any(a.scope is scope.globals for a in bound):
            found.add(name.value)
    return found


def _rebound(lib: ParsedFile, name: str) -> bool:
    """A ``global name`` anywhere in the library file: its value may change after import."""
    return any(
        isinstance(a.name, cst.Name) and a.name.value == name for g in nodes(lib.module, cst.Global) for a in g.names
    )


# --- the user's side ----------------------------------------------------------


def _subclass_chain(lib: ParsedFile, owner: cst.ClassDef, method: str) -> dict[str, cst.ClassDef]:
    """The library file's classes whose instances run ``owner``'s method: ``owner``
    and its single-inheritance subclasses in the file that do not override it."""
    classes = {s.name.value: s for s in lib.module.body if isinstance(s, cst.ClassDef)}
    found = {owner.name.value: owner}
    grew = True
    while grew:
        grew = False
        for name, cls in classes.items():
            if name in found or len(cls.bases) != 1 or cls.keywords:
                continue
            base = cls.bases[0].value
            if isinstance(base, cst.Name) and base.value in found and not _defines(cls, method):
                found[name] = cls
                grew = True
    return found


def _defines(cls: cst.ClassDef, name: str) -> bool:
    body = cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ()
    for stmt in body:
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)) and stmt.name.value == name:
            return True
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else []
                if isinstance(small, (cst.AnnAssign, cst.AugAssign)):
                    targets = [small.target]
                if any(isinstance(t, cst.Name) and t.value == name for t in targets):
                    return True
    return False


def _constructs(ctx: SiteContext, call: cst.Call, libmod: str, classes: dict[str, cst.ClassDef]) -> str | None:
    """The library class ``call`` constructs, if its callee is imported from the library's package."""
    for q in qualified_names(ctx, call.func):
        module, _, name = q.rpartition(".")
        if name in classes and module and (libmod == module or libmod.startswith(module + ".")):
            return name
    return None


def _construction(ctx: SiteContext, libmod: str, classes: dict[str, cst.ClassDef]) -> tuple[cst.Call, str]:
    found = [(c, n) for c in nodes(ctx.module, cst.Call) if (n := _constructs(ctx, c, libmod, classes))]
    holder = ctx.enclosing(cst.ClassDef)
    init = None
    if holder is not None and isinstance(holder.body, cst.IndentedBlock):
        init = next((s for s in holder.body.body if isinstance(s, cst.FunctionDef) and s.name.value == "__init__"), None)
    in_init = [(c, n) for c, n in found if init is not None and any(a is init for a in ctx.ancestors(c))]
    if len(in_init) > 1:
        in_init = _by_attribute(ctx, in_init)
    if in_init:
        return in_init[0]
    at_top = [(c, n) for c, n in found if not any(isinstance(a, (cst.FunctionDef, cst.Lambda)) for a in ctx.ancestors(c))]
    if len(at_top) != 1:
        raise Decline("no unique construction of the class in this file")
    return at_top[0]


def _by_attribute(ctx: SiteContext, found: list[tuple[cst.Call, str]]) -> list[tuple[cst.Call, str]]:
    """Of several constructions in ``__init__``, the one assigned to the ``self.<attr>`` the site calls."""
    call = call_at(ctx)
    func = call.func if call is not None else None
    if not (isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self"):
        raise Decline("several constructions and the call names none")
    picked = []
    for c, n in found:
        assign = ctx.file.parent(c)
        if isinstance(assign, cst.Assign) and any(_is_self_attr(t.target, func.attr.value) for t in assign.targets):
            picked.append((c, n))
    if len(picked) != 1:
        raise Decline("several constructions of the class in __init__")
    return picked


def _is_self_attr(node: cst.BaseExpression, attr: str) -> bool:
    return isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == "self" and node.attr.value == attr


def _top_level(ctx: SiteContext, node: cst.CSTNode) -> int:
    """Index in the module body of the statement holding ``node``."""
    chain = (node, *ctx.ancestors(node))
    for i, stmt in enumerate(ctx.module.body):
        if any(n is stmt for n in chain):
            return i
    raise Decline("not in the module body")


def _check_base(ctx: SiteContext, func: cst.BaseExpression, before: int) -> None:
    """The constructed name resolves, at module level, to an import above the subclass."""
    root = func
    while isinstance(root, cst.Attribute):
        root = root.value
    if not isinstance(root, cst.Name):
        raise Decline("the callee is not a dotted name")
    bound = global_bindings(ctx, root.value)
    if not bound or not all(isinstance(b, (cst.Import, cst.ImportFrom)) and _top_level(ctx, b) < before for b in bound):
        raise Decline("the class is not imported at module level above its use")
    scope = ctx.file.scopes.get(func)
    if scope is not None and any(a.scope is not scope.globals for a in scope[root.value]):
        raise Decline("the class's name is rebound locally")


def _imports(ctx: SiteContext, lib: ParsedFile, libmod: str, names: set[str]) -> list[tuple[str, str | None, str | None]]:
    """(module, name, asname) imports that bind each global in the user's file as in the library's."""
    return [_import_for(lib, libmod, name) for name in _unbound(ctx, lib, names)]


def _unbound(ctx: SiteContext, lib: ParsedFile, names: set[str]) -> list[str]:
    """The globals the user's file must bind as the library's file does (the others it binds the same way)."""
    lib_scope = lib.scopes[lib.module]
    user_scope = ctx.file.scopes[ctx.module]
    out = []
    for name in sorted(names):
        if hasattr(builtins, name) or _rebound(lib, name):
            raise Decline(f"{name}: shadows a builtin, or rebound at run time")
        theirs = lib_scope.get_qualified_names_for(name)
        mine = user_scope.get_qualified_names_for(name) if user_scope[name] else set()
        if mine:
            same = {q.name for q in mine} == {q.name for q in theirs}
            if same and all(q.source is QualifiedNameSource.IMPORT for q in (*mine, *theirs)):
                continue  # the same import in both files
            raise Decline(f"{name} is bound differently in this file")
        out.append(name)
    return out


def _import_for(lib: ParsedFile, libmod: str, name: str) -> tuple[str, str | None, str | None]:
    bound = list(lib.scopes[lib.module][name])
    node = bound[0].node if len(bound) == 1 else None
    if isinstance(node, cst.Import):
        for alias in node.names:
            dotted = lib.module.code_for_node(alias.name)
            if alias.asname is None and dotted.split(".")[0] == name:
                return dotted, None, None
            if alias.asname is not None and lib.module.code_for_node(alias.asname.name) == name:
                return dotted, None, name
    if isinstance(node, cst.ImportFrom) and not isinstance(node.names, cst.ImportStar):
        module = _absolute(lib, libmod, node)
        for alias in node.names:
            original = lib.module.code_for_node(alias.name)
            if (lib.module.code_for_node(alias.asname.name) if alias.asname else original) == name:
                return module, original, None if original == name else name
    return libmod, name, None


def _absolute(lib: ParsedFile, libmod: str, node: cst.ImportFrom) -> str:
    """The module an import from the library file names, relative imports resolved."""
    named = [lib.module.code_for_node(node.module)] if node.module is not None else []
    level = len(node.relative)
    if not level:
        return ".".join(named)
    package = libmod.split(".") if lib.source.path.name == "__init__.py" else libmod.split(".")[:-1]
    if level > len(package):
        raise Decline("a relative import above the top package")
    return ".".join([*package[: len(package) - level + 1], *named])


# --- putting it together ------------------------------------------------------


def _fix(ctx: SiteContext, safety: Safety) -> cst.Module:
    if call_at(ctx) is None:
        raise Decline("the site is not a call")
    user_at, lib_at = _library_frame(ctx)
    frame = ctx.site.brk.stack[lib_at]
    path, lib = _library(frame)
    owner, method = _method_at(lib, frame)
    if owner is None:
        raise Decline("a module-level function: library-patch binds its fixed copy where the library calls it")
    libmod = module_name(path)
    _check_method(lib, method, libmod)
    call, cls_name = _construction(ctx, libmod, _subclass_chain(lib, owner, method.name.value))
    at = _top_level(ctx, call)
    _check_base(ctx, call.func, at)
    sub = f"_GbfixFixed{cls_name}"
    if global_bindings(ctx, sub):
        raise Decline(f"{sub} is taken")
    needed = _imports(ctx, lib, libmod, _free_globals(lib, method))
    module = _with_subclass(ctx, lib, method, call, sub, at, libmod, owner.name.value, needed)
    return _fix_copy(ctx, safety, module, sub, lib, method, lib_at)


def _fix_copy(
    ctx: SiteContext,
    safety: Safety,
    module: cst.Module,
    sub: str,
    lib: ParsedFile,
    method: cst.FunctionDef,
    lib_at: int,
) -> cst.Module:
    """The user's ``module``, which holds the library method copied into class ``sub``
    (or the library function copied as ``sub``), with the copy replaced by the method
    as the first inner recipe of that safety rewrites it."""
    recipe, rw = _inner_rewrite(ctx, safety, lib, lib_at, method)
    return _with_fixed_copy(ctx, safety, module, sub, method, recipe, rw)


class _Elsewhere(Decline):
    """The inner recipe's fix lies in another module-level function of the library's
    file, which the method calls (Reformer's chunk length comes from a helper's
    ``np.lcm``): ``library-patch`` patches that function instead."""

    def __init__(self, function: cst.FunctionDef, recipe: type[Recipe], rewrite: Rewrite) -> None:
        super().__init__(f"the fix is in {function.name.value}, a function of the library the method calls")
        self.function, self.recipe, self.rewrite = function, recipe, rewrite


def _inner_rewrite(
    ctx: SiteContext, safety: Safety, lib: ParsedFile, lib_at: int, method: cst.FunctionDef
) -> tuple[type[Recipe], Rewrite]:
    """The first inner recipe of that safety whose rewrite lies in ``method``.

    The inner recipes run on the library's own file, the break's library frame the
    site: they see the method's class (what ``__init__`` assigns to ``self``) and
    module as the package side does. A rewrite in another module-level function of
    the file, when no recipe rewrites the method, is ``_Elsewhere``."""
    frame = ctx.site.brk.stack[lib_at]
    site = Site(
        lib.source.path, frame.line, lib.char_col(frame.line, frame.col), lib.char_col(frame.line, frame.end_col), ctx.site.brk
    )
    inner_ctx = SiteContext(site, lib.node_at(site.line, site.col, site.end_col), lib, ctx.capabilities)
    elsewhere: _Elsewhere | None = None
    for recipe in recipes.candidates(ctx.site.code, unsafe=safety == "unsafe"):
        if recipe.safety != safety or recipe not in _INNER or recipe().observation(inner_ctx) is not None:
            continue
        rw = recipe().propose(inner_ctx)
        if rw is None or rw.into is not None:
            continue
        holders = (rw.original, *lib.ancestors(rw.original))
        if any(a is method for a in holders):
            return recipe, rw
        function = next((f for f in lib.module.body if isinstance(f, cst.FunctionDef) and any(a is f for a in holders)), None)
        if function is not None and elsewhere is None:
            elsewhere = _Elsewhere(function, recipe, rw)
    raise elsewhere or Decline("no recipe fixes the copied method")


def _with_fixed_copy(
    ctx: SiteContext, safety: Safety, module: cst.Module, sub: str, fn: cst.FunctionDef, recipe: type[Recipe], rw: Rewrite
) -> cst.Module:
    """``module`` with the copy of ``fn`` (a method of class ``sub``, or the function
    ``sub``) replaced by ``fn`` as ``rw`` rewrites it; the helpers and imports the
    rewrite needs go to the user's file."""
    text = module.code
    try:
        data = text.encode(ctx.file.source.encoding)
    except UnicodeEncodeError as e:
        raise Decline("the method does not encode in this file's encoding") from e
    parsed = Locator({ctx.site.path: SourceFile(ctx.site.path, data, text, ctx.file.source.encoding)}).parsed(ctx.site.path)
    copied = _copied_method(parsed, sub, fn.name.value)
    fixed = fn.visit(_Swap(rw.original, rw.replacement))
    if not isinstance(fixed, cst.FunctionDef):
        raise Decline("the rewrite removes the method")
    clash = next((name for name, _ in rw.helpers if taken(ctx, name)), None)
    if clash is not None:
        raise Decline(f"this file binds {clash} to something else")
    # the copy's own name (a function's is new) and the blank lines above it in the user's file
    fixed = fixed.with_changes(name=copied.name, leading_lines=copied.leading_lines)
    (start, end) = parsed.span(copied)
    edit = Edit(0, ctx.site, recipe.name, safety, rw.message, start, end, copied, fixed, rw.imports, rw.helpers)
    return cst.parse_module(edits.apply(parsed, [edit]))


class _Swap(cst.CSTTransformer):
    """Puts ``new`` (a node, or a removal / several statements) where ``old`` is."""

    def __init__(self, old: cst.CSTNode, new: Replacement) -> None:
        super().__init__()
        self.old, self.new = old, new

    def on_leave(self, original_node, updated_node):
        return self.new if original_node is self.old else updated_node


def _with_subclass(
    ctx: SiteContext,
    lib: ParsedFile,
    method: cst.FunctionDef,
    call: cst.Call,
    sub: str,
    at: int,
    libmod: str,
    owner: str,
    needed: list[tuple[str, str | None, str | None]],
) -> cst.Module:
    """The user's module with the subclass above statement ``at``, the construction
    renamed and the imports added."""
    base = ctx.code(call.func)
    subclass = _subclass(ctx, lib, method, sub, base)
    stmt = ctx.module.body[at]
    blanks = 0
    while blanks < len(stmt.leading_lines) and stmt.leading_lines[blanks].comment is None:
        blanks += 1
    note = [
        f"# gbfix: {libmod}.{owner}.{method.name.value}, rewritten here so that it compiles without a",
        f"# graph break (gbfix does not edit {libmod.split('.')[0]}); constructed below instead of {base}.",
    ]
    subclass = subclass.with_changes(
        leading_lines=[*stmt.leading_lines[:blanks], *(cst.EmptyLine(comment=cst.Comment(c)) for c in note)]
    )

    class _Rename(cst.CSTTransformer):
        def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
            return updated.with_changes(func=cst.Name(sub)) if original is call else updated

    renamed = stmt.visit(_Rename())
    spacing = stmt.leading_lines[:blanks] or [cst.EmptyLine(), cst.EmptyLine()]
    renamed = renamed.with_changes(leading_lines=[*spacing, *stmt.leading_lines[blanks:]])
    module = ctx.module.with_changes(body=[*ctx.module.body[:at], subclass, renamed, *ctx.module.body[at + 1 :]])
    if needed:
        context = CodemodContext()
        for mod, obj, asname in needed:
            AddImportsVisitor.add_needed_import(context, mod, obj, asname)
        module = AddImportsVisitor(context).transform_module(module)
    return module


def _subclass(ctx: SiteContext, lib: ParsedFile, method: cst.FunctionDef, sub: str, base: str) -> cst.ClassDef:
    """``class <sub>(<base>):`` holding the library's text of ``method``, verbatim."""
    (first, col), (last, _) = _start(lib, method), lib.span(method)[1]
    lines = lib.source.text.splitlines()[first - 1 : last]
    if not lines or lines[0][:col].strip() or not lines[0][col:].startswith("@" if method.decorators else "def "):
        raise Decline("the method does not start its line")
    newline = ctx.module.default_newline
    body = newline.join([f"class {sub}({base}):", *lines]) + newline
    try:
        subclass = cst.parse_statement(body, config=ctx.module.config_for_parsing)
    except cst.ParserSyntaxError as e:
        raise Decline("the copied method does not parse alone") from e
    assert isinstance(subclass, cst.ClassDef)
    return subclass


def _function_copy(ctx: SiteContext, lib: ParsedFile, fn: cst.FunctionDef, sub: str) -> cst.FunctionDef:
    """The library's text of the module-level function ``fn``, verbatim but for its name, ``sub``."""
    (first, col), (last, _) = _start(lib, fn), lib.span(fn)[1]
    lines = lib.source.text.splitlines()[first - 1 : last]
    at_def = lib.span(fn)[0][0] - first
    named = f"def {fn.name.value}("
    if col or not lines or not lines[at_def].startswith(named):
        raise Decline("the function does not start its line")
    lines[at_def] = f"def {sub}(" + lines[at_def][len(named) :]
    try:
        copy = cst.parse_statement(ctx.module.default_newline.join(lines) + ctx.module.default_newline, config=ctx.module.config_for_parsing)
    except cst.ParserSyntaxError as e:
        raise Decline("the copied function does not parse alone") from e
    assert isinstance(copy, cst.FunctionDef)
    return copy


def _start(lib: ParsedFile, method: cst.FunctionDef) -> tuple[int, int]:
    """Where the method's text starts: its first decorator, else its ``def`` (LibCST's span starts there)."""
    return lib.span(method.decorators[0] if method.decorators else method)[0]


def _copied_method(parsed: ParsedFile, sub: str, name: str) -> cst.FunctionDef:
    """The copy: method ``name`` of class ``sub``, or the function ``sub``."""
    copies = [f for f in nodes(parsed.module, cst.FunctionDef) if f.name.value == sub]
    if copies:
        return copies[0]
    cls = next(c for c in nodes(parsed.module, cst.ClassDef) if c.name.value == sub)
    assert isinstance(cls.body, cst.IndentedBlock)
    return next(fn for fn in cls.body.body if isinstance(fn, cst.FunctionDef) and fn.name.value == name)


# --- the patch: a class the library builds itself ----------------------------


def _patch(ctx: SiteContext, safety: Safety) -> cst.Module:
    """The patch of the innermost library function on the stack that a recipe fixes,
    up to the innermost method (a module-level function the break lies in, or the one
    that calls it, else the method above them)."""
    stack = ctx.site.brk.stack
    user_at = own_frame_at(ctx.site.brk, ctx.site.path)
    if user_at is None:
        raise Decline("the site's frame is not in the stack")
    declined: Decline | None = None
    for lib_at, path, lib, owner, fn in _library_code(stack, user_at):
        try:
            if owner is not None:
                return _patch_class(ctx, safety, user_at, lib_at, path, lib, owner, fn)
            return _patch_function(ctx, safety, user_at, lib_at, path, lib, fn)
        except _Elsewhere as e:  # the fix lies in a function the method calls: patch that one
            module, sub = _function_patch(ctx, path, lib, e.function, {})
            return _with_fixed_copy(ctx, safety, module, sub, e.function, e.recipe, e.rewrite)
        except Decline as e:
            if owner is not None:
                raise
            declined = declined or e
    raise declined or Decline("no library method or function in the stack below the user's call")


def _patch_class(
    ctx: SiteContext,
    safety: Safety,
    user_at: int,
    lib_at: int,
    path: Path,
    lib: ParsedFile,
    owner: cst.ClassDef,
    method: cst.FunctionDef,
) -> cst.Module:
    try:
        module, sub = _class_patch(ctx, user_at, lib_at, path, lib, owner, method)
    except Decline:
        # the method cannot be copied (a decorator, ...); the fix may lie in a function it calls
        try:
            _inner_rewrite(ctx, safety, lib, lib_at, method)
        except _Elsewhere:
            raise
        except Decline:
            pass
        raise
    return _fix_copy(ctx, safety, module, sub, lib, method, lib_at)


def _class_patch(
    ctx: SiteContext, user_at: int, lib_at: int, path: Path, lib: ParsedFile, owner: cst.ClassDef, method: cst.FunctionDef
) -> tuple[cst.Module, str]:
    """The user's module with the patch of ``owner`` holding a verbatim copy of ``method``
    (to be fixed), in a new patch or in an earlier one of the class; and the subclass's name."""
    stack = ctx.site.brk.stack
    libmod = module_name(path)
    _check_method(lib, method, libmod)
    name = owner.name.value
    binds = {libmod: (lib, name), **_importers(stack[user_at + 1 : lib_at], libmod, name)}
    entries = [f"{mod}.{entry}" for mod, (parsed, local) in binds.items() for entry in _read_at_import(parsed, local)]
    sub = f"_GbfixFixed{name}"
    earlier = _earlier_patch(ctx, sub, libmod, name)  # another method of the class, patched before
    _free_in_file(ctx, {*(() if earlier else (sub,)), *{m.split(".")[0] for m in binds}})
    needed = [_patch_import(lib, libmod, n) for n in _unbound(ctx, lib, _free_globals(lib, method))]
    if earlier is not None:
        return _with_method(ctx, earlier, lib, method, sub, libmod, name, needed), sub
    rebound = [*(f"{mod}.{local}" for mod, (_, local) in binds.items()), *entries]
    return _with_patch(ctx, lib, method, sub, libmod, name, sorted(binds), rebound, needed), sub


def _free_in_file(ctx: SiteContext, names: set[str]) -> None:
    """Declined when the user's file binds one of the names the patch binds (the
    copy's name, the top packages it imports) otherwise than by an import."""
    for name in sorted(names):
        if any(not isinstance(b, cst.Import) for b in global_bindings(ctx, name)):
            raise Decline(f"{name} is bound to something else in this file")


def _patch_import(lib: ParsedFile, libmod: str, name: str) -> tuple[str, str | None, str | None]:
    """How the patch binds a global the method reads: a name of the library's own
    package from the defining module (the method reads that module's global, and
    the library may move where it is defined between releases), others (torch,
    typing) as the library imports them."""
    imp = _import_for(lib, libmod, name)
    return (libmod, name, None) if imp[0].split(".")[0] == libmod.split(".")[0] else imp


def _library_code(
    stack: tuple[Frame, ...], user_at: int
) -> Iterator[tuple[int, Path, ParsedFile, cst.ClassDef | None, cst.FunctionDef]]:
    """The frames below the user's in a library (not torch's, not the standard
    library's), innermost first, that are module-level functions, up to the first
    that is a method of a module-level class: each with its class (None for a
    function) and its function."""
    for j in range(len(stack) - 1, user_at, -1):
        frame = stack[j]
        if not frame.file.endswith(".py") or _machinery(frame) or torch_or_stdlib(frame.file):
            continue
        try:
            path, lib = _library(frame)
            owner, fn = _method_at(lib, frame)
        except Decline:
            continue
        yield j, path, lib, owner, fn
        if owner is not None:
            return


def _patch_function(
    ctx: SiteContext, safety: Safety, user_at: int, lib_at: int, path: Path, lib: ParsedFile, fn: cst.FunctionDef
) -> cst.Module:
    """A module-level function of a library, copied under a name of its own and bound,
    under the guard, where the library calls it: its module's global and the globals of
    the modules on the stack that import it (``from .utils import f``). Entries of
    dicts of functions (``LOSS_MAPPING = {"ForCausalLM": f}``) get it too; other reads
    at import (a default argument, a registry) keep the library's function, which is
    only a break left, which the verifier sees."""
    libmod = module_name(path)
    module, sub = _function_patch(ctx, path, lib, fn, _importers(ctx.site.brk.stack[user_at + 1 : lib_at], libmod, fn.name.value))
    return _fix_copy(ctx, safety, module, sub, lib, fn, lib_at)


def _function_patch(
    ctx: SiteContext, path: Path, lib: ParsedFile, fn: cst.FunctionDef, importers: dict[str, tuple[ParsedFile, str]]
) -> tuple[cst.Module, str]:
    """The user's module with the patch of the library function ``fn`` (its verbatim copy,
    to be fixed), bound in its module, in ``importers`` and in the packages that re-export
    it; and the copy's name."""
    libmod = module_name(path)
    _check_method(lib, fn, libmod, method=False)
    name = fn.name.value
    free = _free_globals(lib, fn)
    if name in free:
        raise Decline(f"{name} calls itself through its module's global")
    binds = {libmod: (lib, name), **importers, **_reexporters(path, libmod, name)}
    entries = [f"{mod}.{entry}" for mod, (parsed, local) in binds.items() for entry in _read_at_import(parsed, local, strict=False)]
    sub = f"_gbfix_fixed_{name}"
    _free_in_file(ctx, {sub, *{m.split(".")[0] for m in binds}})
    needed = [_patch_import(lib, libmod, n) for n in _unbound(ctx, lib, free)]
    # `from .canny import canny` in a package makes `kornia.filters.canny` the function: the
    # module is then reached through sys.modules
    shadowed = [m for m in binds if m.rsplit(".", 1)[-1] == binds[m][1]]
    rebound = [
        *(f'sys.modules["{mod}"].{local}' if mod in shadowed else f"{mod}.{local}" for mod, (_, local) in binds.items()),
        *entries,
    ]
    imported = sorted([*binds, *(["sys"] if shadowed else [])])
    return _with_patch(ctx, lib, fn, sub, libmod, name, imported, rebound, needed, function=True), sub


def _importers(frames: tuple[Frame, ...], libmod: str, name: str) -> dict[str, tuple[ParsedFile, str]]:
    """The modules of the library frames between the user's call and the method
    that import the class at module level (``from .blocks import Mixer``): the
    name their code constructs is their own global, which the patch rebinds too."""
    found: dict[str, tuple[ParsedFile, str]] = {}
    for frame in frames:
        if _machinery(frame) or not frame.file.endswith(".py") or torch_or_stdlib(frame.file):
            continue
        try:
            path, parsed = _library(frame)
            mod = module_name(path)
        except Decline:
            continue
        if mod != libmod and mod not in found:
            found.update(_importer(parsed, mod, libmod, name))
    return found


def _reexporters(path: Path, libmod: str, name: str) -> dict[str, tuple[ParsedFile, str]]:
    """The packages above ``libmod`` whose ``__init__`` imports its function ``name``
    (``from .canny import canny``): a user calls ``kornia.filters.canny``."""
    found: dict[str, tuple[ParsedFile, str]] = {}
    package = libmod.split(".")[:-1] if path.name != "__init__.py" else libmod.split(".")
    folder = path.parent
    while package:
        init = folder / "__init__.py"
        try:
            st = init.stat()
            parsed = _parse_library(str(init), (st.st_mtime_ns, st.st_size))
        except (OSError, SyntaxError, ValueError, GbfixError, cst.ParserSyntaxError):
            break
        mod = ".".join(package)
        if mod != libmod:
            found.update(_importer(parsed, mod, libmod, name))
        package, folder = package[:-1], folder.parent
    return found


def _importer(parsed: ParsedFile, mod: str, libmod: str, name: str) -> dict[str, tuple[ParsedFile, str]]:
    """``{mod: (parsed, local name)}`` when module ``mod`` imports ``libmod``'s ``name``
    at module level (from ``libmod`` or a package above it), else nothing."""
    found: dict[str, tuple[ParsedFile, str]] = {}
    for stmt in parsed.module.body:
        for small in stmt.body if isinstance(stmt, cst.SimpleStatementLine) else ():
            if not isinstance(small, cst.ImportFrom) or isinstance(small.names, cst.ImportStar):
                continue
            source = _absolute(parsed, mod, small)
            if source != libmod and not libmod.startswith(source + "."):
                continue
            for alias in small.names:
                if parsed.module.code_for_node(alias.name) == name:
                    found[mod] = (parsed, parsed.module.code_for_node(alias.asname.name) if alias.asname else name)
    return found


def _read_at_import(lib: ParsedFile, name: str, strict: bool = True) -> list[str]:
    """The entries (``CLASSES["eager"]``) of module-level dicts of classes that
    hold the module's global ``name``: the patch sets them too. Declined when
    ``strict`` (a class): any other read of the name while the module is imported
    (outside any function: a subclass's base, a class attribute), which keeps the
    class bound before the patch, and would make ``isinstance`` of an instance of
    another subclass false once the name is rebound."""
    entries = []
    for assignment in lib.scopes[lib.module][name]:
        for access in assignment.references:
            if access.is_annotation:
                continue
            scope = access.scope
            while scope is not scope.globals and not isinstance(scope, FunctionScope):
                scope = scope.parent
            if isinstance(scope, FunctionScope):
                continue
            entry = _dict_entry(lib, access.node)
            if entry is None and strict:
                raise Decline(f"the library reads {name} at import (a base class, a class attribute)")
            if entry is not None:
                entries.append(entry)
    return entries


def _dict_entry(lib: ParsedFile, node: cst.CSTNode) -> str | None:
    """``NAME[key]`` when ``node`` is the value of a string-keyed entry of a dict
    display assigned to a module-level name, ``NAME = {key: node, ...}``."""
    element, display, assign = lib.parent(node), None, None
    if isinstance(element, cst.DictElement) and element.value is node and isinstance(element.key, cst.SimpleString):
        display = lib.parent(element)
        assign = lib.parent(display) if isinstance(display, cst.Dict) else None
    if not isinstance(assign, cst.Assign) or assign.value is not display or len(assign.targets) != 1:
        return None
    target = assign.targets[0].target
    line = lib.parent(assign)
    if not isinstance(target, cst.Name) or not any(line is stmt for stmt in lib.module.body):
        return None
    return f"{target.value}[{lib.module.code_for_node(element.key)}]"


def source_digest(lines: list[str], first: int) -> str:
    """The sha256 of what ``inspect.getsource`` gives for the function whose
    ``def`` is on line ``first`` (1-based) of a file of ``lines``: the same block
    of the file's lines, newlines made ``\\n`` as ``linecache`` reads them."""
    block = inspect.getblock(lines[first - 1 :])
    return hashlib.sha256("".join(block).encode()).hexdigest()[:_DIGEST]


_GUARD = "_gbfix_unchanged"
_DIGEST = 16  # hex digits: a check that the text changed, not against forgery
_GUARD_CODE = '''\
def _gbfix_unchanged(module, qualname, digest):
    """Whether the library function ``module.qualname`` is still the code gbfix
    fixed (the start of the sha256 of its source): on any other version of the
    library the patch stays off."""
    import hashlib  # here, not at the top: nothing else in this file needs them
    import importlib
    import inspect

    try:
        obj = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        source = inspect.getsource(obj)
    except (ImportError, AttributeError, OSError, TypeError):
        return False
    return hashlib.sha256(source.encode()).hexdigest()[: len(digest)] == digest
'''


def _with_patch(
    ctx: SiteContext,
    lib: ParsedFile,
    method: cst.FunctionDef,
    sub: str,
    libmod: str,
    name: str,
    modules: list[str],
    rebound: list[str],
    needed: list[tuple[str, str | None, str | None]],
    function: bool = False,
) -> cst.Module:
    """The user's module with the patch after its imports: under a check that the
    library's method is the text copied, the subclass, named as the library's class,
    bound to each of ``rebound`` (``module.Name``, ``module.CLASSES["key"]``).
    ``function``: ``method`` is the module-level function ``name``, copied as the
    function ``sub``."""
    meth = method.name.value
    lines = io.StringIO(lib.source.text, newline=None).readlines()
    digest = source_digest(lines, _start(lib, method)[0])
    newline = ctx.module.default_newline
    config = ctx.module.config_for_parsing
    head = [f"import {m}" for m in sorted(modules)] + _import_lines(needed, newline)
    tail = [f'{sub}.__module__ = "{libmod}"', f'{sub}.__name__ = {sub}.__qualname__ = "{name}"', f"{' = '.join(rebound)} = {sub}"]
    kind = "function, so that its repr and pickles" if function else "class, so that print(model) and pickles"
    why = f"# named as the library's {kind} do not change"
    blank = cst.EmptyLine(indent=False)
    copy = _function_copy(ctx, lib, method, sub) if function else _subclass(ctx, lib, method, sub, f"{libmod}.{name}")
    end = [cst.parse_statement(t + newline, config=config) for t in tail]
    end[0] = end[0].with_changes(leading_lines=[blank, cst.EmptyLine(comment=cst.Comment(why))])
    if_ = _guarded_if(ctx, libmod, "" if function else name, [(meth, digest)])
    body = [cst.parse_statement(h + newline, config=config) for h in head]
    patch = if_.with_changes(
        body=if_.body.with_changes(body=[*body, copy.with_changes(leading_lines=[blank]), *end]),
        leading_lines=[cst.EmptyLine(), cst.EmptyLine(), *_patch_note(libmod, "" if function else name, [meth])],
    )
    module = add_helpers(ctx.module, {_GUARD: _GUARD_CODE})
    at = next(i for i, stmt in enumerate(module.body) if isinstance(stmt, cst.FunctionDef) and stmt.name.value == _GUARD) + 1
    rest: Sequence[cst.BaseStatement] = module.body[at:]
    if rest:
        rest = [blank_lines_before(rest[0], 2), *rest[1:]]
    return module.with_changes(body=[*module.body[:at], patch, *rest])


def _import_lines(needed: list[tuple[str, str | None, str | None]], newline: str) -> list[str]:
    """The import statements binding ``needed`` ((module, name or None, as-name)), as the patch writes them."""
    head = []
    froms: dict[str, list[str]] = {}
    for mod, obj, asname in needed:
        if obj is None:
            head.append(f"import {mod}" + (f" as {asname}" if asname else ""))
        else:
            froms.setdefault(mod, []).append(obj + (f" as {asname}" if asname else ""))
    for mod, names in froms.items():
        line = f"from {mod} import {', '.join(names)}"
        if len(line) > 84:  # 88 columns with the guard's indentation
            line = f"from {mod} import ({newline}" + "".join(f"    {n},{newline}" for n in names) + ")"
        head.append(line)
    return head


def _guarded_if(ctx: SiteContext, libmod: str, name: str, methods: list[tuple[str, str]]) -> cst.If:
    """``if <guard>(...) [and <guard>(...)]:`` over each patched method of class ``name``
    (a module-level function when ``name`` is empty) and its digest (body ``pass``)."""
    newline = ctx.module.default_newline
    guards = [f'{_GUARD}("{libmod}", "{f"{name}.{meth}" if name else meth}", "{digest}")' for meth, digest in methods]
    test = guards[0] if len(guards) == 1 else f"({newline}" + "".join(
        f"    {'and ' if i else ''}{g}{newline}" for i, g in enumerate(guards)
    ) + ")"
    if_ = cst.parse_statement(f"if {test}:{newline}    pass{newline}", config=ctx.module.config_for_parsing)
    assert isinstance(if_, cst.If)
    return if_


def _patch_note(libmod: str, name: str, methods: list[str]) -> list[cst.EmptyLine]:
    """The comment above a patch of methods of class ``name``, or of a function (``name`` empty)."""
    top = libmod.split(".")[0]
    if not name:
        # in the function, or on what it returns (a helper's np.lcm read by a method)
        what, those, instead = f"the graph breaks on {libmod}.{methods[0]}", "that function is", "calls this copy"
    else:
        what = f"{libmod}.{name}.{methods[0]} breaks" if len(methods) == 1 else (
            f"{libmod}.{name}.{', .'.join(methods[:-1])} and .{methods[-1]} break"
        )
        what += " the compiled graph"
        those, instead = ("that method is" if len(methods) == 1 else "those methods are"), "builds this subclass"
    note = textwrap.wrap(
        f"gbfix: {what}, and gbfix does not edit {top}:"
        f" while {those} the code fixed here, {top} {instead} instead.",
        width=88,
        initial_indent="# ",
        subsequent_indent="# ",
        break_on_hyphens=False,
        break_long_words=False,
    )
    return [cst.EmptyLine(comment=cst.Comment(c)) for c in note]


def _guards(test: cst.BaseExpression) -> list[cst.Call]:
    """The guard calls of a patch's test (one, or an `and` chain of them)."""
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        return [*_guards(test.left), *_guards(test.right)]
    return [test] if isinstance(test, cst.Call) and isinstance(test.func, cst.Name) and test.func.value == _GUARD else []


def _guarded(call: cst.Call) -> tuple[str, str, str] | None:
    """(module, qualified name, digest) of a guard call written by gbfix."""
    args = [a.value for a in call.args]
    if len(args) != 3 or not all(isinstance(a, cst.SimpleString) for a in args):
        return None
    return tuple(a.evaluated_value for a in args)


def _earlier_patch(ctx: SiteContext, sub: str, libmod: str, name: str) -> cst.If | None:
    """The patch gbfix wrote for another method of ``libmod.name`` in this file, if any."""
    for stmt in ctx.module.body:
        if not isinstance(stmt, cst.If) or stmt.orelse is not None:
            continue
        found = [_guarded(g) for g in _guards(stmt.test)]
        if not found or not all(f and f[0] == libmod and f[1].startswith(f"{name}.") for f in found):
            continue
        if any(isinstance(c, cst.ClassDef) and c.name.value == sub for c in stmt.body.body):
            return stmt
    return None


def _with_method(
    ctx: SiteContext,
    earlier: cst.If,
    lib: ParsedFile,
    method: cst.FunctionDef,
    sub: str,
    libmod: str,
    name: str,
    needed: list[tuple[str, str | None, str | None]],
) -> cst.Module:
    """The user's module with ``method`` copied into the subclass an earlier patch of the
    same class holds, its digest added to the patch's guard."""
    meth = method.name.value
    cls = next(c for c in earlier.body.body if isinstance(c, cst.ClassDef) and c.name.value == sub)
    if any(isinstance(f, cst.FunctionDef) and f.name.value == meth for f in cls.body.body):
        raise Decline(f"the patch of {name} already holds a copy of {meth}")
    lines = io.StringIO(lib.source.text, newline=None).readlines()
    # an earlier patch is gbfix's own: each of its guards reads back
    guarded = cast("list[tuple[str, str, str]]", [_guarded(g) for g in _guards(earlier.test)])
    methods = [(q.split(".", 1)[1], d) for _, q, d in guarded] + [(meth, source_digest(lines, _start(lib, method)[0]))]
    copied = _subclass(ctx, lib, method, sub, f"{libmod}.{name}").body.body[0]
    newline, config = ctx.module.default_newline, ctx.module.config_for_parsing
    new_cls = cls.with_changes(body=cls.body.with_changes(body=[*cls.body.body, copied.with_changes(leading_lines=[cst.EmptyLine(indent=False)])]))
    imports = [cst.parse_statement(line + newline, config=config) for line in _import_lines(needed, newline)]
    at = earlier.body.body.index(cls)
    body = [*earlier.body.body[:at], *imports, new_cls, *earlier.body.body[at + 1 :]]
    new_if = _guarded_if(ctx, libmod, name, methods).with_changes(
        body=earlier.body.with_changes(body=body),
        leading_lines=[
            *(ln for ln in earlier.leading_lines if ln.comment is None or not ln.comment.value.startswith("# ")),
            *_patch_note(libmod, name, [m for m, _ in methods]),
        ],
    )
    return ctx.module.with_changes(body=[new_if if s is earlier else s for s in ctx.module.body])


class _LibraryPatch(_LibraryClass):
    """The patch recipes: the copy fixed as for ``library-class``, bound in the library's modules."""

    def _build(self, ctx: SiteContext) -> cst.Module:
        return _patch(ctx, self.safety)


class LibraryPatch(_LibraryPatch):
    name = "library-patch"
    codes = _codes("safe")
    safety = "safe"
    tolerates = _tolerates("safe")
    summary = "a break in a method of a class the library builds itself, or in a library function: the fixed subclass (or function) is bound in the library's modules, after this file's imports, while the library's source is the one fixed"


class LibraryPatchUnsafe(_LibraryPatch):
    name = "library-patch-unsafe"
    codes = _codes("unsafe")
    safety = "unsafe"
    tolerates = _tolerates("unsafe")
    summary = "the same patch with the method fixed by an unsafe recipe"


RECIPES = (LibraryClass, LibraryPatch, LibraryClassUnsafe, LibraryPatchUnsafe)
