"""The project's ``.py`` files by module name: imports resolved to files without reading them."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path


class PathIndex:
    """Resolved file paths, looked up by dotted name (``pkg.model``) or by folder and name."""

    def __init__(self, paths: Iterable[Path]):
        self.paths = frozenset(paths)
        self._by_suffix: dict[tuple[str, ...], list[Path]] = {}
        for p in self.paths:
            parts = (*p.parts[:-1], p.name.rpartition(".")[0] or p.name)  # (faster than with_suffix)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            for k in range(1, len(parts) + 1):
                self._by_suffix.setdefault(parts[-k:], []).append(p)

    def named(self, dotted: str, near: Path) -> Path | None:
        """The file of an absolute import: the one nearest the importing file (``import utils``
        next to train.py), as the folder a script runs from comes first on ``sys.path``."""
        found = self._by_suffix.get(tuple(dotted.split(".")), [])
        if not found:
            return None
        return max(found, key=lambda p: (len(_common(p, near)), -len(p.parts)))

    def at(self, folder: Path, dotted: str) -> Path | None:
        """The file of a relative import from ``folder`` (``dotted`` may be empty: the package)."""
        base = folder.joinpath(*dotted.split(".")) if dotted else folder
        for candidate in (base.parent / f"{base.name}.py", base / "__init__.py"):
            if candidate in self.paths:
                return candidate
        return None


def package_dir(path: Path) -> Path | None:
    """The folder of a package, for its ``__init__.py``."""
    return path.parent if path.name == "__init__.py" else None


def _common(a: Path, b: Path) -> tuple[str, ...]:
    out = []
    for x, y in zip(a.parts, b.parts):
        if x != y:
            break
        out.append(x)
    return tuple(out)
