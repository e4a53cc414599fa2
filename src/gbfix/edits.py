"""Apply a set of edits to a parsed file and show them as a unified diff."""

from __future__ import annotations

import difflib
import sys
from collections.abc import Iterable
from pathlib import Path

import libcst as cst
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor

from gbfix import generated, recipes
from gbfix.locate import ParsedFile
from gbfix.recipes.layout import add_helpers, with_stdlib_imports
from gbfix.records import Edit


class Replace(cst.CSTTransformer):
    """Nodes replaced by identity (``replacements``: id of an original node -> its replacement)."""

    def __init__(self, replacements: dict[int, object], first: dict[int, cst.SimpleStatementLine] | None = None) -> None:
        super().__init__()
        self.replacements = replacements
        self.first = first or {}  # id of a function -> a statement to put first in its body

    def on_leave(self, original_node, updated_node):
        if id(original_node) in self.first:
            return generated.prepend(updated_node, self.first[id(original_node)])
        return self.replacements.get(id(original_node), updated_node)


def apply(parsed: ParsedFile, edits: Iterable[Edit]) -> bytes:
    """The file's bytes with the edits applied (edits must not overlap).

    Untouched lines stay byte-identical: LibCST round-trips formatting,
    comments, line endings and the declared encoding. The helpers the edits
    call go to the package's generated module (``gbfix.generated``), which the
    file imports them from (a plain module that does not import torch: the generated
    module beside it, ``generated.beside``), or else into the file.
    """
    edits = list(edits)
    if not edits:
        return parsed.source.data
    helpers = {name: code for e in edits for name, code in e.helpers}
    # Registered pieces go to the package's generated module; a line of the module's
    # own (a leaf helper built from its logger) stays in the file, after the import.
    local = {name: code for name, code in helpers.items() if not generated.known([name])}
    adds_torch = any(mod.split(".")[0] == "torch" for e in edits for mod, _ in e.imports)
    home = generated.home(parsed.source.path, parsed.module, adds_torch=adds_torch) if len(local) < len(helpers) else None
    first: dict[int, cst.SimpleStatementLine] = {}
    if home is not None and not generated.imports_torch(parsed.module):
        first = _local_imports(parsed, edits, home)
    module = parsed.module.visit(Replace({id(e.original): e.replacement for e in edits}, first))
    imports = list(dict.fromkeys(imp for e in edits for imp in e.imports))
    if home is None:
        module = add_helpers(module, helpers)
        imports += [imp for p in generated.closure(list(helpers)) for imp in p.imports]
    else:
        if not first:
            called = dict.fromkeys(n for e in edits for n in generated.called([name for name, _ in e.helpers]))
            module = generated.add_import(module, home, list(called))
        module = add_helpers(module, local)
    imports = [imp for imp in dict.fromkeys(imports) if not _imported(module, *imp)]
    stdlib = sorted(mod for mod, name in imports if name is None and mod in sys.stdlib_module_names)
    if stdlib and (placed := with_stdlib_imports(module, stdlib)) is not None:
        module = placed
        imports = [imp for imp in imports if imp[0] not in stdlib or imp[1] is not None]
    if imports:
        context = CodemodContext()
        for mod, name in imports:
            AddImportsVisitor.add_needed_import(context, mod, name)
        module = AddImportsVisitor(context).transform_module(module)
    return recipes.finalize(module).bytes


def _local_imports(parsed: ParsedFile, edits: list[Edit], home: generated.Home) -> dict[int, cst.SimpleStatementLine]:
    """For a module that does not import torch (it may keep torch optional on
    purpose): the import of each function's helpers, first in the function, so
    that importing the module does not import torch through the generated module."""
    names: dict[int, tuple[cst.FunctionDef, list[str]]] = {}
    for e in edits:
        fn = next((a for a in parsed.ancestors(e.original) if isinstance(a, cst.FunctionDef)), None)
        if fn is None:
            return {}  # module-level code runs when the module is imported anyway
        public = generated.called([n for n, _ in e.helpers])
        names.setdefault(id(fn), (fn, []))[1].extend(public)
    return {key: generated.import_statement(home, sorted(set(public))) for key, (_, public) in names.items() if public}


def _imported(module: cst.Module, mod: str, name: str | None) -> bool:
    """Whether a top-level `import mod` / `from mod import name` is already there
    (AddImportsVisitor would find it too, at the cost of a pass over the file)."""
    for stmt in module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if name is None and isinstance(small, cst.Import):
                if any(a.asname is None and _EMPTY.code_for_node(a.name) == mod for a in small.names):
                    return True
            elif name is not None and isinstance(small, cst.ImportFrom) and not small.relative and small.module is not None:
                if _EMPTY.code_for_node(small.module) == mod and not isinstance(small.names, cst.ImportStar):
                    if any(a.asname is None and _EMPTY.code_for_node(a.name) == name for a in small.names):
                        return True
    return False


def code_of(edit: Edit) -> str:
    """The replacement's source text (empty for a removal)."""
    new = edit.replacement
    nodes = new.nodes if isinstance(new, cst.FlattenSentinel) else [new] if isinstance(new, cst.CSTNode) else []
    return "".join(_EMPTY.code_for_node(n) for n in nodes)


_EMPTY = cst.Module(body=[])


def diff(path: Path, before: bytes | None, after: bytes, encoding: str, display: str | None = None) -> str:
    """A unified diff of the file; ``before`` None: a new file (``--- /dev/null``)."""
    name = display or str(path)
    lines = difflib.unified_diff(
        before.decode(encoding).splitlines(keepends=True) if before is not None else [],
        after.decode(encoding).splitlines(keepends=True),
        fromfile=f"a/{name}" if before is not None else "/dev/null",
        tofile=f"b/{name}",
    )
    out = []
    for line in lines:
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def non_overlapping(
    edits: Iterable[Edit], taken: Iterable[Edit] = (), *, against_taken_only: bool = False
) -> tuple[list[Edit], list[Edit]]:
    """Split edits into those that can go together (first come first served) and the rest.

    With ``against_taken_only`` an edit is set aside only when it overlaps one
    of ``taken``, not another of ``edits``.
    """
    taken = list(taken)
    chosen: list[Edit] = list(taken)
    keep, rest = [], []
    for e in edits:
        if any(e.overlaps(other) for other in (taken if against_taken_only else chosen)):
            rest.append(e)
        else:
            chosen.append(e)
            keep.append(e)
    return keep, rest
