"""The project a linted file belongs to: where lint looks for the compile calls.

pre-commit passes only the files of a commit, and the ``torch.compile`` call that makes
a model file's code compiled is usually in another file (``train.py``). So lint reads
the whole project for compiled regions and reports only in the files it was given. The
project of a file is, in order: the ``targets`` of the nearest ``[tool.gbfix]``, the git
work tree holding it (tracked files and untracked ones git does not ignore), else its
folder (the one holding its top package, when it is in one; an installed package's own
folder, not all of site-packages).
"""

from __future__ import annotations

import functools
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from gbfix.config import find_config
from gbfix.sources import SKIP_DIRS, python_files


@dataclass(frozen=True)
class Workspace:
    roots: tuple[Path, ...]  # the projects' folders (names the fact cache)
    files: tuple[Path, ...]  # resolved .py files: the projects' and the given ones

    @property
    def key(self) -> str:
        return "\n".join(map(str, self.roots))


def workspace(paths: Iterable[Path], given: Iterable[Path]) -> Workspace:
    """The projects of ``paths`` (as given on the command line), with the ``given`` files."""
    projects = dict.fromkeys(_project(p.resolve() if p.is_dir() else p.resolve().parent) for p in paths)
    files = dict.fromkeys(f for _, listed in projects for f in listed)
    files.update(dict.fromkeys(given))
    return Workspace(tuple(root for root, _ in projects), tuple(files))


@functools.cache
def _project(folder: Path) -> tuple[Path, tuple[Path, ...]]:
    config = find_config(folder)
    if config is not None and config.targets:
        root = config.root.resolve()
        return root, tuple(f for t in config.targets if (root / t).exists() for f in python_files(root / t))
    git = next((d for d in (folder, *folder.parents) if (d / ".git").exists()), None)
    if git is not None:
        listed = _git_files(git)
        return git, listed if listed is not None else tuple(python_files(git))
    top = folder
    # up to the folder holding the top package, but not into site-packages and the like
    while (top / "__init__.py").is_file() and top.parent != top and top.parent.name not in SKIP_DIRS:
        top = top.parent
    return top, tuple(python_files(top))


def _git_files(root: Path) -> tuple[Path, ...] | None:
    """The .py files git tracks, and the untracked ones it does not ignore; None without git."""
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "*.py"],
            capture_output=True, timeout=30, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    names = dict.fromkeys(out.decode("utf-8", "surrogateescape").split("\0"))  # a conflicted file is listed per stage
    return tuple(root / n for n in names if n)
