"""Serve edited sources to the child's imports without touching the user's files.

The parent writes each candidate version of a target file to a scratch
directory and tells the child ``{original path: edited copy}``; a path that
does not exist yet (a generated module the edits import) is served as well. Modules load
from the edited text under their *original* filename, so stacks, pickling and
relative imports behave as if the file itself had changed.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import linecache
import os
import sys


class _OverlayLoader(importlib.machinery.SourceFileLoader):
    def __init__(self, fullname: str, path: str, text: bytes) -> None:
        super().__init__(fullname, path)
        self._text = text

    def get_data(self, path: str) -> bytes:
        if path == self.path:
            return self._text
        return super().get_data(path)

    def path_stats(self, path: str):
        # No stats -> no bytecode cache read or written for an edited module.
        raise OSError("gbfix overlay: no bytecode cache")


class OverlayFinder(importlib.abc.MetaPathFinder):
    def __init__(self, overlay: dict[str, str]) -> None:
        self.sources: dict[str, bytes] = {}
        for original, edited in overlay.items():
            with open(edited, "rb") as f:
                self.sources[os.path.realpath(original)] = f.read()
        for path, text in self.sources.items():
            # Tracebacks and inspect.getsource should show the edited text.
            lines = text.decode("utf-8", "replace").splitlines(keepends=True)
            linecache.cache[path] = (len(text), None, lines, path)

    def find_spec(self, fullname, path=None, target=None):
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None:
            return self._new_module(fullname, path)
        if not spec.origin:
            return None
        origin = os.path.realpath(spec.origin)
        if origin not in self.sources:
            return None
        spec.loader = _OverlayLoader(fullname, spec.origin, self.sources[origin])
        return spec

    def _new_module(self, fullname, path):
        """A module the edits add (a package's generated ``_gbfix.py``): not on disk yet."""
        name = fullname.rpartition(".")[2]
        for folder in path or sys.path:
            candidate = os.path.join(folder or os.getcwd(), f"{name}.py")
            text = self.sources.get(os.path.realpath(candidate))
            if text is not None:
                return importlib.util.spec_from_file_location(
                    fullname, candidate, loader=_OverlayLoader(fullname, candidate, text)
                )
        return None

    def source_of(self, path: str) -> bytes | None:
        return self.sources.get(os.path.realpath(path))

    def install(self) -> None:
        sys.meta_path.insert(0, self)
