"""The baseline of known graph breaks, shared by ``gbfix check`` and ``pytest --gbfix-baseline``.

A break is keyed by its GB code, its file (relative to the baseline file's folder,
posix) and the qualified name of the function holding it (``Model.forward``), not by
line numbers, so unrelated edits above a break do not make it new. Each key has a
count of distinct break sites, so a second identical break in the same function is
new. No torch and no libcst here: ``ast`` only.

The file::

    {
      "version": 1,
      "breaks": [
        {"code": "GB0059", "path": "pkg/model.py", "function": "Model.forward", "count": 1}
      ]
    }
"""

from __future__ import annotations

import ast
import json
import os
import tempfile
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from gbfix.errors import GbfixError

DEFAULT_NAME = ".gbfix-baseline.json"
VERSION = 1
MODULE = "<module>"  # the "function" of a break at module level

Key = tuple[str, str, str]  # (code, path, function)


def default_path(start: Path) -> Path:
    """``.gbfix-baseline.json`` next to the nearest ``pyproject.toml`` at or above ``start``, else in the cwd."""
    here = start.resolve()
    for directory in [here, *here.parents] if here.is_dir() else list(here.parents):
        if (directory / "pyproject.toml").is_file():
            return directory / DEFAULT_NAME
    return Path.cwd().resolve() / DEFAULT_NAME


def relative(path: str | Path, root: Path) -> str:
    """``path`` relative to ``root``, with forward slashes (``../`` when outside it)."""
    return Path(os.path.relpath(os.path.realpath(path), os.path.realpath(root))).as_posix()


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_qualnames: dict[str, list[tuple[int, int, int, str]]] = {}


def _scopes(path: str) -> list[tuple[int, int, int, str]]:
    """(first line, last line, depth, qualified name) of every def and class in the file."""
    if path not in _qualnames:
        out: list[tuple[int, int, int, str]] = []
        try:
            with open(path, "rb") as f:
                tree = ast.parse(f.read())
        except (OSError, SyntaxError, ValueError):
            tree = ast.Module(body=[], type_ignores=[])

        def walk(node: ast.AST, prefix: str, depth: int) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, _SCOPES):
                    name = prefix + child.name
                    first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                    out.append((first, child.end_lineno or child.lineno, depth, name))
                    inner = name + (".<locals>." if not isinstance(child, ast.ClassDef) else ".")
                    walk(child, inner, depth + 1)
                else:
                    walk(child, prefix, depth)

        walk(tree, "", 0)
        _qualnames[path] = out
    return _qualnames[path]


def enclosing(path: str | Path, line: int) -> str:
    """The qualified name of the innermost def or class holding ``line`` (as ``__qualname__``
    spells it: ``Model.forward``, ``outer.<locals>.inner``), or ``<module>``."""
    best = (-1, MODULE)
    for first, last, depth, name in _scopes(os.path.realpath(path)):
        if first <= line <= last and depth > best[0]:
            best = (depth, name)
    return best[1]


def key(code: str, path: str | Path, line: int, root: Path) -> Key:
    """The baseline key of a break site: its code, its file relative to ``root`` and its function."""
    return (code, relative(path, root), enclosing(path, line))


def describe(k: Key) -> str:
    code, path, function = k
    return f"{code} in {path} ({function})"


def load(path: Path, shown: str | None = None) -> Counter[Key] | None:
    """The baseline's counts; None when the file does not exist. A malformed file is an
    error (``GbfixError``, whose message names the file as ``shown``)."""
    name = shown or str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise GbfixError(f"{name}: cannot read the baseline: {e}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise GbfixError(f"{name}: invalid baseline: not JSON ({e}); fix it, or delete it and write a new one") from None
    if not isinstance(data, dict) or not isinstance(data.get("breaks"), list):
        raise GbfixError(f'{name}: invalid baseline: expected an object with a "breaks" list')
    if data.get("version", VERSION) != VERSION:
        raise GbfixError(f"{name}: invalid baseline: version {data.get('version')!r}, this gbfix reads version {VERSION}")
    counts: Counter[Key] = Counter()
    for i, entry in enumerate(data["breaks"]):
        ok = isinstance(entry, dict) and all(isinstance(entry.get(k), str) for k in ("code", "path", "function"))
        count = entry.get("count", 1) if isinstance(entry, dict) else None
        if not ok or not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise GbfixError(
                f'{name}: invalid baseline: breaks[{i}] needs "code", "path" and "function" strings and a positive "count"'
            )
        counts[(entry["code"], entry["path"], entry["function"])] += count
    return counts


def dump(path: Path, counts: Counter[Key]) -> None:
    """Write the baseline, sorted so that it diffs well, atomically."""
    entries = [
        {"code": code, "path": p, "function": fn, "count": n}
        for (code, p, fn), n in sorted(counts.items(), key=lambda kv: (kv[0][1], kv[0][2], kv[0][0]))
        if n > 0
    ]
    # One entry a line: a baseline change reads as a one-line diff per function.
    lines = ",\n".join("    " + json.dumps(e) for e in entries)
    text = f'{{\n  "version": {VERSION},\n  "breaks": [' + (f"\n{lines}\n  " if entries else "") + "]\n}\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


@dataclass(frozen=True)
class Comparison:
    """The current breaks against a baseline."""

    current: Counter[Key]
    known: Counter[Key] | None  # None: no baseline file
    new: dict[Key, int] = field(default_factory=dict)  # key -> how many sites more than the baseline allows
    stale: dict[Key, int] = field(default_factory=dict)  # key -> how many baselined sites are gone

    @property
    def new_total(self) -> int:
        return sum(self.new.values())

    @property
    def stale_total(self) -> int:
        return sum(self.stale.values())


def compare(current: Iterable[Key] | Counter[Key], known: Counter[Key] | None) -> Comparison:
    now = current if isinstance(current, Counter) else Counter(current)
    base = known or Counter()
    new = {k: n - base[k] for k, n in now.items() if n > base[k]}
    stale = {k: n - now[k] for k, n in base.items() if n > now[k]}
    return Comparison(now, known, new, stale)


def stale_note(cmp: Comparison, where: str, update: str) -> str | None:
    """A line telling the user that the baseline can be tightened, or None."""
    if not cmp.stale:
        return None
    n = cmp.stale_total
    listed = ", ".join(describe(k) + (f" x{c}" if c > 1 else "") for k, c in sorted(cmp.stale.items(), key=lambda kv: (kv[0][1], kv[0][2], kv[0][0])))
    noun = "graph break that is gone" if n == 1 else "graph breaks that are gone"
    return f"{where} lists {n} {noun}: {listed}; {update} to tighten it"
