"""What gbfix knows of breaks inside installed packages at other versions of them.

A break in a library (``transformers``' ``BartDecoder.forward``) may be gone in
a newer release of it. ``data/upstream.json`` (filled from the census,
``bench/census``, which runs programs on packages at several versions) records,
per break site, the versions measured and whether each still breaks there:

    {"format": 1,
     "sites": [{"package": "transformers",
                "path": "transformers/models/bart/modeling_bart.py",
                "function": "BartDecoder.forward",
                "code": "GB0291",
                "measured": {"4.44.2": "breaks", "5.23.0": "fixed"}}]}

``package`` is the distribution's name (what pip installs), ``path`` the
file holding the break from its top-level package folder on (``path::function::code``
is the census's key of a site), ``function`` its qualified name
(``Class.method``, or a module-level function's name), ``code`` the root GB
code, and ``measured`` maps release versions (numbers and dots) to
``"breaks"`` or ``"fixed"`` (that site is gone at that version, the program
otherwise the same); an optional ``program`` says what was run. For a break whose stack runs through such a site, the
report tells the user the first measured release after the installed one
that no longer breaks there, or, when every newer one measured still does,
the newest of them. Versions not newer than the installed one say nothing.
"""

from __future__ import annotations

import functools
import json
import os
import re
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from gbfix.recipes.library_class import method_spans
from gbfix.records import Break, Frame

DATA = Path(__file__).resolve().parent / "data" / "upstream.json"
FORMAT = 1
_VERDICTS = frozenset({"breaks", "fixed"})


@dataclass(frozen=True)
class Known:
    """One break site of a package, as measured at several of its versions."""

    package: str
    path: str  # from the top-level package folder: transformers/models/bart/modeling_bart.py
    function: str
    code: str
    measured: tuple[tuple[str, str], ...]  # (version, "breaks" | "fixed"), oldest first


def load(path: Path = DATA) -> tuple[Known, ...]:
    """The sites of a data file; a malformed file is an error (it ships with gbfix)."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    if doc.get("format") != FORMAT:
        raise ValueError(f"{path}: format {doc.get('format')!r}, expected {FORMAT}")
    out = []
    for site in doc["sites"]:
        measured = site["measured"]
        if not measured or set(measured.values()) - _VERDICTS or not all(map(_is_release, measured)):
            raise ValueError(f"{path}: {site.get('function')}: measured must map release versions to breaks/fixed")
        ordered = tuple(sorted(measured.items(), key=lambda kv: _release(kv[0])))
        out.append(Known(site["package"], site["path"], site["function"], site["code"], ordered))
    return tuple(out)


@functools.cache
def _shipped() -> tuple[Known, ...]:
    return load(DATA)


def note(brk: Break, code: str, known: tuple[Known, ...] | None = None) -> str | None:
    """What the data says of this break at other releases of the package it lies in, if anything."""
    known = _shipped() if known is None else known
    if not known:
        return None
    paths = {k.path for k in known}
    for frame in reversed(brk.stack):
        where = _where(frame, paths)
        if where is None:
            continue
        path, function = where
        for k in known:
            if (k.path, k.function, k.code) == (path, function, code):
                installed = _installed(k.package)
                return None if installed is None else _message(k, installed)
    return None


def _where(frame: Frame, paths: set[str]) -> tuple[str, str] | None:
    """(path from the top-level package folder, qualified function) of a frame whose file the data names."""
    path = Path(os.path.realpath(frame.file))
    root = path.parent
    while (root / "__init__.py").is_file():
        root = root.parent
    relative = path.relative_to(root).as_posix()
    if relative not in paths:
        return None
    try:
        st = os.stat(path)
        spans = method_spans(str(path), (st.st_mtime_ns, st.st_size))
    except (OSError, SyntaxError, ValueError):
        return None
    cls = next((c for c, name, a, b in spans if name == frame.name and a <= frame.line <= b), "")  # "": a function
    return relative, f"{cls}.{frame.name}" if cls else frame.name


def _installed(package: str) -> str | None:
    try:
        version = metadata.version(package)
    except metadata.PackageNotFoundError:
        return None
    return version if _is_release(version) else None


def _message(k: Known, installed: str) -> str | None:
    newer = [(v, verdict) for v, verdict in k.measured if _release(v) > _release(installed)]
    fixed = next((v for v, verdict in newer if verdict == "fixed"), None)
    if fixed is not None:
        return f"{k.package} {fixed} no longer breaks here, {installed} is installed"
    if newer:
        return f"{k.package} {newer[-1][0]} still breaks here"
    return None


def _is_release(version: str) -> bool:
    return re.fullmatch(r"\d+(\.\d+)*", version) is not None


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))
