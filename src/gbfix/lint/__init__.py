"""``gbfix lint``: the known graph-break patterns inside compiled regions, found statically.

No torch import and no user code is imported or run: the files are parsed with the
stdlib ``ast`` (about 100 ordinary files in well under a second). A compiled region is a
function decorated with ``torch.compile``, a function or method passed to
``torch.compile(...)``, or the ``forward`` of a class whose instance is compiled
(``torch.compile(Net(...))``, ``model = Net(); torch.compile(model)``, ``model.compile()``);
everything those call inside the scanned files is followed (see ``project`` for how names
are resolved). Findings are "likely": the runtime ``gbfix --dry-run`` is the ground truth.
"""

from __future__ import annotations

import ast
import bisect
import io
import os
import re
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

from gbfix.errors import GbfixError
from gbfix.lint.patterns import check, generator_hit, traced_nodes
from gbfix.lint.project import COMPILE, OPAQUE_SUFFIXES, ClassInfo, Func, Module, Project, Scope
from gbfix.sources import python_files
from gbfix.suppress import Filter, Suppressions
from gbfix.suppress import of as suppressions_of
_NEWLINE = re.compile(r"\r\n?|\n")
# torch._dynamo.config options (set to True at module level) that make Dynamo trace a pattern:
# .item()/float(t)/int .tolist() become symbolic scalars, masks give symbolic shapes, RNNs are traced.
_CONFIG_ROUTES = {
    "capture_scalar_outputs": ("GB0124", "GB0033"),
    "capture_dynamic_output_shape_ops": ("GB0036",),
    "allow_rnn": ("GB0014",),
}


@dataclass(frozen=True, order=True)
class Finding:
    path: str  # as displayed: relative to the current folder when under it
    line: int  # 1-based
    col: int  # 1-based, in characters
    code: str  # GBxxxx, or E999 (syntax error) / E902 (unreadable file)
    message: str
    via: str = ""  # the compiled region it was reached from

    def render(self) -> str:
        if self.code.startswith("E"):
            return f"{self.path}:{self.line}:{self.col}: {self.code} {self.message}"
        via = f" (via {self.via})" if self.via else ""
        return f"{self.path}:{self.line}:{self.col}: {self.code} likely: {self.message}{via}"


@dataclass
class Report:
    findings: list[Finding] = field(default_factory=list)
    files: int = 0
    regions: list[str] = field(default_factory=list)  # "Net.forward (train.py:12)"
    suppressed: int = 0  # findings a `# gbfix: ignore` comment silenced (not listed)

    def summary(self) -> str:
        breaks = [f for f in self.findings if f.code.startswith("GB")]
        errors = len(self.findings) - len(breaks)
        checked = f"{self.files} file{'s' if self.files != 1 else ''} checked"
        regions = f"{len(self.regions)} compiled region{'s' if len(self.regions) != 1 else ''}"
        if breaks:
            files = len({f.path for f in breaks})
            noun = "graph break" if len(breaks) == 1 else "graph breaks"
            line = f"{len(breaks)} likely {noun} in {files} file{'s' if files != 1 else ''} ({checked}, {regions})."
        elif self.regions:
            line = f"No likely graph breaks ({checked}, {regions})."
        else:
            line = f"No compiled code found ({checked}): lint follows torch.compile calls, so give it the files that call torch.compile too."
        if errors:
            line += f" {errors} file{'s' if errors != 1 else ''} could not be parsed."
        if self.suppressed:
            line += f" {self.suppressed} suppressed."
        return line


def lint(paths: list[Path], cwd: Path | None = None, selection: Filter = Filter()) -> Report:
    """Likely breaks in ``paths``: those ``selection`` selects, less the ``# gbfix: ignore``d (counted)."""
    cwd = cwd or Path.cwd()
    report = Report()
    modules = []
    for path in _files(paths):
        report.files += 1
        loaded = _load(path, _display(path, cwd))
        if isinstance(loaded, Finding):
            report.findings.append(loaded)
        else:
            modules.append(loaded)
    project = Project(modules)
    found: set[Finding] = set()
    muted: set[tuple] = set()  # (path, line, col, code) of suppressed findings
    comments: dict[int, Suppressions] = {}

    def keep(m: Module, f: Finding) -> None:
        if not selection.selects(f.code):
            return
        if id(m) not in comments:
            comments[id(m)] = suppressions_of("\n".join(m.lines)) if any("gbfix" in ln for ln in m.lines) else Suppressions({}, {})
        if comments[id(m)].covers(f.line, f.code):
            muted.add((f.path, f.line, f.col, f.code))
        else:
            found.add(f)

    visited: set[int] = set()
    queue: list[tuple[Func, str]] = []
    roots: set[int] = set()
    for func, where in _roots(project):
        roots.add(id(func.node))
        report.regions.append(f"{_label(func)} ({where})")
        hit = generator_hit(func.node)
        if hit is not None:
            keep(func.module, _finding(func.module, *hit, ""))
        queue.append((func, _label(func)))
    # process-wide Dynamo options set in the scanned files make some patterns traceable
    silenced = {c for option, codes in _CONFIG_ROUTES.items() if option in project.config for c in codes}
    while queue:
        func, root = queue.pop()
        if id(func.node) in visited or _opaque(func, project):
            continue
        visited.add(id(func.node))
        scope = project.scope_of(func)
        via = "" if id(func.node) in roots else root
        for node, _stmt in traced_nodes(func.node):
            try:
                hits = list(check(node, scope, project))
                if isinstance(node, ast.Call):
                    queue.extend((callee, root) for callee in _callees(node, scope, project))
            except RecursionError:  # an expression nested too deep to follow: skip it
                continue
            for site, code, message in hits:
                if code not in silenced:
                    keep(func.module, _finding(func.module, site, code, message, via))
    report.findings.extend(_dedupe(found))
    report.suppressed = len(muted)
    report.findings.sort()
    return report


def _files(paths: list[Path]) -> list[Path]:
    out: dict[Path, Path] = {}
    for p in paths:
        if not p.exists():
            raise GbfixError(f"{p}: no such file or directory")
        # A file named explicitly is linted whatever its suffix (pre-commit passes
        # scripts it recognises by their shebang); folders give their .py files.
        for f in [p] if p.is_file() else python_files(p):
            out.setdefault(f.resolve(), f)
    return list(out.values())


def _load(path: Path, display: str) -> Module | Finding:
    try:
        data = path.read_bytes()
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)  # PEP 263, as gbfix.sources.read
        text = data.decode(encoding)
    except (OSError, SyntaxError, LookupError, UnicodeDecodeError) as e:
        reason = e.reason if isinstance(e, UnicodeDecodeError) else str(e)
        return Finding(display, 1, 1, "E902", f"cannot read the file ({reason})")
    try:
        tree = ast.parse(text, filename=display)
    except RecursionError:
        return Finding(display, 1, 1, "E999", "syntax error: too deeply nested to parse")
    except (SyntaxError, ValueError) as e:
        line, col = (e.lineno or 1, e.offset or 1) if isinstance(e, SyntaxError) else (1, 1)
        msg = e.msg if isinstance(e, SyntaxError) else str(e)
        return Finding(display, line, max(col, 1), "E999", f"syntax error: {msg}")
    return Module(path.resolve(), display, _NEWLINE.split(text), tree)


def _roots(project: Project):
    """Every compiled function, with where it is compiled (``train.py:12``)."""
    seen: set[int] = set()
    for m in project.modules:
        for node, owner in _hot_nodes(m, project):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for d in node.decorator_list:
                    target = d.func if isinstance(d, ast.Call) else d
                    if _named(target, ("compile", "optimize"), m) and _compiles(target, owner.scope(), project):
                        yield from _new(seen, [owner.func_of(node)], m, d)
            elif not isinstance(node, ast.Call):
                continue
            elif _named(node.func, ("compile",), m) or (isinstance(node.func, ast.Call) and _named(node.func.func, ("optimize",), m)):
                scope = owner.scope()
                target = _compiled_arg(node, scope, project)
                if target is not None:
                    yield from _new(seen, _compiled(target, scope, project), m, node)
                elif isinstance(node.func, ast.Attribute) and node.func.attr == "compile" and project.qual(node.func, scope) is None:
                    # model.compile(): nn.Module.compile, in place
                    for c in project.classes_of(node.func.value, scope):
                        yield from _new(seen, project.call_targets(c), m, node)


def _named(e: ast.expr, names: tuple[str, ...], m: Module) -> bool:
    """A cheap filter before resolving: ``e`` is ``<something>.compile`` or an imported name."""
    if isinstance(e, ast.Attribute):
        return e.attr in names
    return isinstance(e, ast.Name) and isinstance(m.defs.get(e.id), tuple)


def _new(seen: set[int], funcs, m: Module, where: ast.AST):
    for f in funcs:
        if isinstance(f, Func) and id(f.node) not in seen:
            seen.add(id(f.node))
            yield f, f"{m.display}:{where.lineno}"


def _compiles(expr: ast.expr, scope: Scope, project: Project) -> bool:
    return project.qual(expr, scope) in COMPILE


def _compiled_arg(call: ast.Call, scope: Scope, project: Project) -> ast.expr | None:
    f = call.func
    if isinstance(f, ast.Call) and project.qual(f.func, scope) == "torch._dynamo.optimize":  # optimize(...)(fn)
        return call.args[0] if call.args else None
    if project.qual(f, scope) != "torch.compile":
        return None
    if call.args:
        return call.args[0]
    return next((k.value for k in call.keywords if k.arg == "model"), None)


def _compiled(target: ast.expr, scope: Scope, project: Project) -> list:
    """What compiling ``target`` compiles: a function or method, or an instance's forward."""
    out = [s for s in project.resolve(target, scope) if isinstance(s, Func)]
    for c in project.classes_of(target, scope):
        out.extend(project.call_targets(c))
    return out


def _callees(call: ast.Call, scope: Scope, project: Project) -> list[Func]:
    """The user functions a call runs: the callee, a constructor's __init__, an instance's
    forward, and functions passed as arguments (checkpoint(layer, x), torch.cond(p, f, g, ...))."""
    out: list = []
    for s in project.resolve(call.func, scope):
        if isinstance(s, Func):
            out.append(s)
        elif isinstance(s, ClassInfo):  # a constructor runs __init__
            out.extend(project.method(s, "__init__"))
    if not out:  # an instance: its forward (or __call__) runs
        for c in project.classes_of(call.func, scope):
            out.extend(project.call_targets(c))
    q = project.qual(call.func, scope)
    if q is None or not (q in COMPILE or q.rpartition(".")[2] in OPAQUE_SUFFIXES):
        for a in call.args:
            if isinstance(a, (ast.Name, ast.Attribute)):
                out.extend(_compiled(a, scope, project))
    # gbfix's own helpers (`_gbfix_warn`...) route what Dynamo cannot trace to ops, and
    # their fallback paths are the ones a verified run showed are not taken.
    return [f for f in out if isinstance(f, Func) and not getattr(f.node, "name", "").startswith("_gbfix_")]


def _opaque(func: Func, project: Project) -> bool:
    """Decorated to stay out of the trace (torch.compiler.disable, leaf_function, custom_op...)."""
    scope = func.parent or func.module.scope
    for d in func.node.decorator_list:
        q = project.qual(d.func if isinstance(d, ast.Call) else d, scope)
        if q is not None and q.startswith("torch.") and q.rpartition(".")[2] in OPAQUE_SUFFIXES:
            return True
    return False


@dataclass(eq=False)
class _Owner:
    """The body a node sits in: the module's, a function's or a class's. Scopes are built
    on demand: most nodes never need one."""

    module: Module
    project: Project
    node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | None = None  # None: the module body
    parent: _Owner | None = None

    def scope(self) -> Scope:
        """The scope names in this body are looked up in (a class body's is the enclosing one)."""
        if self.node is None:
            return self.module.scope
        if isinstance(self.node, ast.ClassDef):
            return self.parent.scope()  # type: ignore[union-attr]
        return self.project.scope_of(self.parent.func_of(self.node))  # type: ignore[union-attr]

    def func_of(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> Func:
        """The Func of a def in this body: a method in a class body, a closure in a function."""
        cls = self.project.class_info(self.node, self.module) if isinstance(self.node, ast.ClassDef) else None
        return Func(node, self.module, cls, self.function_scope())

    def function_scope(self) -> Scope | None:
        """The nearest enclosing function's scope (class bodies do not count)."""
        if self.node is None:
            return None
        if isinstance(self.node, ast.ClassDef):
            return self.parent.function_scope()  # type: ignore[union-attr]
        return self.scope()


def _hot_nodes(m: Module, project: Project):
    """(node, owner) for the nodes of a module on lines that say "compile" or "optimize";
    subtrees without such a line are not walked (big files mostly have none)."""
    hot = [i for i, line in enumerate(m.lines, 1) if "compile" in line or "optimize" in line]
    if not hot:
        return
    todo = [(m.tree, _Owner(m, project))]
    while todo:
        root, owner = todo.pop()
        stack = list(ast.iter_child_nodes(root))
        while stack:
            node = stack.pop()
            start = getattr(node, "lineno", None)
            if getattr(node, "decorator_list", None):  # a def starts at its first decorator
                start = node.decorator_list[0].lineno  # type: ignore[attr-defined]
            if start is not None:
                i = bisect.bisect_left(hot, start)
                if i == len(hot) or hot[i] > node.end_lineno:  # type: ignore[attr-defined]
                    continue
            yield node, owner
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                todo.append((node, _Owner(m, project, node, owner)))
            else:
                stack.extend(ast.iter_child_nodes(node))


def _label(f: Func) -> str:
    return f"{f.cls.name}.{f.node.name}" if f.cls is not None else f.node.name


def _finding(m: Module, site: ast.AST, code: str, message: str, via: str) -> Finding:
    line = site.lineno  # type: ignore[attr-defined]
    return Finding(m.display, line, _char_col(m, line, site.col_offset) + 1, code, message, via)  # type: ignore[attr-defined]


def _char_col(m: Module, line: int, byte_col: int) -> int:
    # ast columns are UTF-8 byte offsets; editors and gbfix count characters
    text = m.lines[line - 1] if line <= len(m.lines) else ""
    return byte_col if text.isascii() else len(text.encode("utf-8")[:byte_col].decode("utf-8", "replace"))


def _dedupe(found: set[Finding]) -> list[Finding]:
    # one finding per site and code, whichever compiled region reached it first (by name)
    best: dict[tuple, Finding] = {}
    for f in sorted(found, key=lambda f: (f.via != "", f.via)):
        best.setdefault((f.path, f.line, f.col, f.code), f)
    return list(best.values())


def _display(path: Path, cwd: Path) -> str:
    try:
        rel = os.path.relpath(path.resolve(), cwd.resolve())
    except ValueError:
        return str(path)
    return str(path) if rel.startswith("..") else rel
