"""The project's files parsed on demand, each at most once in a run."""

from __future__ import annotations

import ast
import io
import os
import re
import tokenize
from pathlib import Path

from gbfix.lint.project import Module
from gbfix.lint.report import Finding

_NEWLINE = re.compile(r"\r\n?|\n")


class Parses:
    """Each file is read and parsed once, whichever ``Project`` asks for it; each Project gets
    a ``Module`` of its own (its name tables) over the shared tree."""

    def __init__(self, cwd: Path):
        self._cwd = cwd
        self.done: dict[Path, Module | Finding] = {}  # the parse, or why there is none (E902 / E999)

    def module(self, path: Path) -> Module | None:
        if path not in self.done:
            self.done[path] = _load(path, display(path, self._cwd))
        got = self.done[path]
        return Module(got.path, got.display, got.lines, got.tree) if isinstance(got, Module) else None


def display(path: Path, cwd: Path) -> str:
    """``path`` (resolved) relative to the current folder (resolved) when it is under it, else in full."""
    try:
        rel = os.path.relpath(path, cwd)
    except ValueError:
        return str(path)
    return str(path) if rel.startswith("..") else rel


def _load(path: Path, shown: str) -> Module | Finding:
    try:
        data = path.read_bytes()
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)  # PEP 263, as gbfix.sources.read
        text = data.decode(encoding)
    except (OSError, SyntaxError, LookupError, UnicodeDecodeError) as e:
        reason = e.reason if isinstance(e, UnicodeDecodeError) else str(e)
        return Finding(shown, 1, 1, "E902", f"cannot read the file ({reason})")
    try:
        tree = ast.parse(text, filename=shown)
    except RecursionError:
        return Finding(shown, 1, 1, "E999", "syntax error: too deeply nested to parse")
    except (SyntaxError, ValueError) as e:
        line, col = (e.lineno or 1, e.offset or 1) if isinstance(e, SyntaxError) else (1, 1)
        msg = e.msg if isinstance(e, SyntaxError) else str(e)
        return Finding(shown, line, max(col, 1), "E999", f"syntax error: {msg}")
    return Module(path, shown, _NEWLINE.split(text), tree)
