"""Locate: a break -> the innermost frame in the target files -> the LibCST node at its span."""

from __future__ import annotations

import functools
import importlib.util
import os
import sysconfig
from functools import cached_property
from pathlib import Path

import libcst as cst
from libcst.metadata import CodeRange, MetadataWrapper, ParentNodeProvider, PositionProvider, ScopeProvider

from gbfix.records import Break, Frame, Site
from gbfix.sources import SourceFile, char_column

Pos = tuple[int, int]


def owned_frame(brk: Break, targets: set[Path]) -> tuple[Path, Frame] | None:
    """The innermost frame of the break's stack that lies in a target file."""
    return innermost_in(brk.stack, targets)


def innermost_in(stack: tuple[Frame, ...], targets: set[Path]) -> tuple[Path, Frame] | None:
    """The innermost frame of ``stack`` (outermost first) that lies in a target file."""
    for frame in reversed(stack):
        path = Path(os.path.realpath(frame.file))
        if path in targets:
            return path, frame
    return None


def own_frame_at(brk: Break, path: Path) -> int | None:
    """Index in the break's stack of the innermost frame in the file ``path``; None if none is."""
    return max((i for i, f in enumerate(brk.stack) if Path(os.path.realpath(f.file)) == path), default=None)


def library_leaf(brk: Break, path: Path) -> tuple[str, int] | None:
    """(file, line) of the innermost frame below ``path``'s that lies in a library,
    not torch's nor the standard library's; None when the break is in ``path`` itself.

    Several breaks inside a library reached from one call of the user's (``model(x)``)
    share the user's frame: this tells them apart."""
    mine = own_frame_at(brk, path)
    if mine is None:
        return None
    for frame in reversed(brk.stack[mine + 1 :]):
        if frame.file.endswith(".py") and not torch_or_stdlib(frame.file):
            return os.path.realpath(frame.file), frame.line
    return None


def torch_or_stdlib(file: str) -> bool:
    """Whether ``file`` is one of torch's or of the standard library's."""
    path = os.path.realpath(file)
    if any(path.startswith(root) for root in _torch_folders()):
        return True
    # Site-packages lie under the standard library's folder (a venv's base interpreter's too).
    return path.startswith(_STDLIB) and not {"site-packages", "dist-packages"} & set(Path(path[len(_STDLIB) :]).parts)


@functools.cache
def _torch_folders() -> tuple[str, ...]:
    """Where torch is installed (found without importing it)."""
    spec = importlib.util.find_spec("torch")
    return tuple(os.path.join(os.path.realpath(p), "") for p in (spec.submodule_search_locations or ())) if spec else ()


_STDLIB = os.path.join(os.path.realpath(sysconfig.get_paths()["stdlib"]), "")


class ParsedFile:
    """One target file parsed once, with positions and parents for every node."""

    def __init__(self, source: SourceFile) -> None:
        self.source = source
        self.module = cst.parse_module(source.data)
        # unsafe_skip_copy keeps node identity: metadata is keyed on the nodes recipes hold.
        self._wrapper = MetadataWrapper(self.module, unsafe_skip_copy=True)
        self._positions = self._wrapper.resolve(PositionProvider)
        self._parents = self._wrapper.resolve(ParentNodeProvider)
        self.lines = source.text.splitlines()

    @cached_property
    def scopes(self):
        """Scope analysis of the file, computed on first use (it costs ~0.5 ms a line)."""
        return self._wrapper.resolve(ScopeProvider)

    def char_col(self, line: int, byte_col: int | None) -> int | None:
        """Dynamo's columns are UTF-8 byte offsets; LibCST's are characters."""
        if byte_col is None or not 1 <= line <= len(self.lines):
            return byte_col
        return char_column(self.lines[line - 1], byte_col)

    def span(self, node: cst.CSTNode) -> tuple[Pos, Pos]:
        r: CodeRange = self._positions[node]
        return (r.start.line, r.start.column), (r.end.line, r.end.column)

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self._parents.get(node)

    def ancestors(self, node: cst.CSTNode) -> tuple[cst.CSTNode, ...]:
        out = []
        cur = self.parent(node)
        while cur is not None:
            out.append(cur)
            cur = self.parent(cur)
        return tuple(out)

    def node_at(self, line: int, col: int | None, end_col: int | None) -> cst.CSTNode:
        """The innermost node containing the span.

        Without a usable end (none given, or a span running onto a later line),
        the largest expression that starts at (line, col); without a column,
        the innermost node holding the whole line.
        """
        if col is None:
            text = self.lines[line - 1] if line <= len(self.lines) else ""
            start, end = (line, len(text) - len(text.lstrip())), (line, len(text.rstrip()))
            return self._innermost(start, end)
        if end_col is not None and end_col > col:
            return self._innermost((line, col), (line, end_col))
        starting = [n for n in self._containing((line, col), (line, col)) if self.span(n)[0] == (line, col)]
        exprs = [n for n in starting if isinstance(n, cst.BaseExpression)]
        return (exprs or starting or [self._innermost((line, col), (line, col))])[0]

    def _containing(self, start: Pos, end: Pos) -> list[cst.CSTNode]:
        """Nodes whose range holds [start, end], outermost first."""
        found: list[cst.CSTNode] = []
        positions = self._positions

        class _Walk(cst.CSTVisitor):
            def on_visit(self, node: cst.CSTNode) -> bool:
                r = positions.get(node)
                if r is None:
                    return True
                if (r.start.line, r.start.column) <= start and (r.end.line, r.end.column) >= end:
                    found.append(node)
                    return True
                return False

        self.module.visit(_Walk())
        return found

    def _innermost(self, start: Pos, end: Pos) -> cst.CSTNode:
        found = self._containing(start, end)
        return found[-1] if found else self.module


class Locator:
    """Maps breaks to sites, parsing each target file at most once."""

    def __init__(self, files: dict[Path, SourceFile]) -> None:
        self.files = files
        self._parsed: dict[Path, ParsedFile] = {}

    def parsed(self, path: Path) -> ParsedFile:
        if path not in self._parsed:
            self._parsed[path] = ParsedFile(self.files[path])
        return self._parsed[path]

    def edited(self, new: dict[Path, bytes]) -> Locator:
        """A locator of these files with ``new`` contents for some; the others keep their
        parse, so that an edit computed on either locator applies to them."""
        files = dict(self.files)
        for path, data in new.items():
            src = files[path]
            files[path] = SourceFile(path, data, data.decode(src.encoding), src.encoding)
        out = Locator(files)
        out._parsed = {p: pf for p, pf in self._parsed.items() if p not in new}
        return out

    def site(self, brk: Break) -> Site | None:
        """The break's site in the targets, or None when its stack never enters them."""
        owned = owned_frame(brk, set(self.files))
        if owned is None:
            return None
        path, frame = owned
        pf = self.parsed(path)
        return Site(path, frame.line, pf.char_col(frame.line, frame.col), pf.char_col(frame.line, frame.end_col), brk)

    def node(self, site: Site) -> cst.CSTNode:
        return self.parsed(site.path).node_at(site.line, site.col, site.end_col)
