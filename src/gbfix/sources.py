"""The target files: find them and read them once (writes.py writes them back)."""

from __future__ import annotations

import ast
import io
import os
import tokenize
from dataclasses import dataclass
from pathlib import Path

from gbfix.errors import GbfixError

SKIP_DIRS = {"__pycache__", "node_modules", "build", "dist", "site-packages"}


@dataclass(frozen=True)
class SourceFile:
    path: Path  # resolved
    data: bytes  # exactly as read
    text: str
    encoding: str

    @property
    def generated(self) -> bool:
        return "@generated" in self.text[:2000]


def python_files(root: Path):
    """The .py files under ``root`` (or ``root`` itself), skipping virtualenvs and caches."""
    if root.is_file():
        yield root
        return
    for dirpath, dirnames, filenames in os.walk(root, onerror=_unlistable):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in SKIP_DIRS and not d.endswith(".egg-info"))
        for name in sorted(filenames):
            if name.endswith(".py"):
                yield Path(dirpath) / name


def _unlistable(e: OSError) -> None:
    # os.walk would skip the folder silently: files the user meant to fix, left out unsaid.
    raise GbfixError(f"{Path(e.filename)}: cannot list the folder ({e.strerror})")


def read(path: Path) -> SourceFile:
    """Read and check one target: it must decode (PEP 263) and parse."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise GbfixError(f"{path}: cannot read the file ({e.strerror})") from None
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        text = data.decode(encoding)
    except (SyntaxError, LookupError, UnicodeDecodeError) as e:
        reason = e.reason if isinstance(e, UnicodeDecodeError) else str(e)
        raise GbfixError(f"{path}: cannot decode the file ({reason}); gbfix reads UTF-8 or the encoding its coding line declares") from None
    try:
        ast.parse(data, filename=str(path))
    except SyntaxError as e:
        raise GbfixError(f"{path}:{e.lineno}:{(e.offset or 0)}: syntax error: {e.msg}") from None
    return SourceFile(path.resolve(), data, text, encoding)


def char_column(line_text: str, byte_col: int) -> int:
    """Dynamo's columns are UTF-8 byte offsets into the line; editors and LibCST count characters."""
    return len(line_text.encode("utf-8")[:byte_col].decode("utf-8", "ignore"))


def check_paths(paths: list[Path]) -> None:
    """Each target exists and is a folder or a .py file (checked before anything runs)."""
    for p in paths:
        if not p.exists():
            raise GbfixError(f"{p}: no such file or directory")
        if p.is_file() and p.suffix != ".py":
            raise GbfixError(f"{p}: not a Python file")


def collect(paths: list[Path]) -> dict[Path, SourceFile]:
    """All Python files under the given paths, keyed by resolved path."""
    check_paths(paths)
    files: dict[Path, SourceFile] = {}
    for p in paths:
        for f in python_files(p):
            files.setdefault(f.resolve(), read(f))
    return files
