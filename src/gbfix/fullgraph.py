"""``--fullgraph``: once no break is left, ask for ``fullgraph=True`` where the program compiles.

The edit is only kept after a real run with ``fullgraph=True`` on the
program's own backend, which fails on any graph break left.
"""

from __future__ import annotations

import libcst as cst

from gbfix.locate import ParsedFile

_TRUE = cst.Arg(keyword=cst.Name("fullgraph"), value=cst.Name("True"), equal=cst.AssignEqual(
    whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")))


def _is_compile(func: cst.BaseExpression) -> bool:
    """``torch.compile``, ``compile`` imported from torch, or ``<module>.compile``."""
    if isinstance(func, cst.Attribute):
        return func.attr.value == "compile"
    return isinstance(func, cst.Name) and func.value == "compile"


def _with_fullgraph(call: cst.Call) -> cst.Call:
    args = [a for a in call.args if not (a.keyword and a.keyword.value == "fullgraph")]
    last = args[-1] if args else None
    if last is not None and isinstance(last.comma, cst.Comma) and isinstance(last.comma.whitespace_after, cst.ParenthesizedWhitespace):
        # One argument per line with a trailing comma: keep that layout.
        indent = last.comma.with_changes(whitespace_after=call.whitespace_before_args)
        return call.with_changes(args=[*args[:-1], last.with_changes(comma=indent), _TRUE.with_changes(comma=last.comma)])
    if last is not None:
        args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    return call.with_changes(args=[*args, _TRUE])


class _Insert(cst.CSTTransformer):
    def __init__(self, parsed: ParsedFile, lines: set[int]) -> None:
        super().__init__()
        self.parsed, self.lines = parsed, lines
        self.done: set[int] = set()

    def _at_site(self, node: cst.CSTNode) -> int | None:
        (start, _), (end, _) = self.parsed.span(node)
        return next((ln for ln in self.lines if start <= ln <= end), None)

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        line = self._at_site(original) if _is_compile(original.func) else None
        if line is None or line in self.done:
            return updated
        self.done.add(line)
        return _with_fullgraph(updated)

    def leave_Decorator(self, original: cst.Decorator, updated: cst.Decorator) -> cst.Decorator:
        # A bare ``@torch.compile`` becomes ``@torch.compile(fullgraph=True)``.
        line = self._at_site(original) if _is_compile(original.decorator) else None
        if line is None or line in self.done:
            return updated
        self.done.add(line)
        return updated.with_changes(decorator=cst.Call(func=updated.decorator, args=[_TRUE]))


def insert(parsed: ParsedFile, lines: set[int]) -> tuple[bytes, set[int]]:
    """The file with ``fullgraph=True`` at the compile calls on ``lines``, and the lines done."""
    transformer = _Insert(parsed, lines)
    module = parsed.module.visit(transformer)
    return module.bytes, transformer.done
