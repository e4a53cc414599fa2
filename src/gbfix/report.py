"""Report: diagnostics lines, the summary line and the exit code, from an engine Result."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from gbfix.engine import Finding, Result


def display_path(path: Path, cwd: Path | None = None) -> str:
    cwd = cwd or Path.cwd()
    try:
        rel = os.path.relpath(path, cwd)
    except ValueError:
        return str(path)
    return str(path) if rel.startswith("..") else rel


def diagnostic(f: Finding, display: Callable[[Path], str] = display_path) -> str:
    """``path:line:col: GB0059 [*] message (detail)``; ``[*]`` marks a verified fix."""
    if f.path is None:
        return f"{f.code} {f.message} ({f.detail})"
    where = f"{display(f.path)}:{f.line}:{f.col}" if f.col else f"{display(f.path)}:{f.line}"
    mark = " [*]" if f.status == "fixed" else ""
    detail = f" ({f.detail})" if f.detail else ""
    return f"{where}: {f.code}{mark} {f.message}{detail}"


def summary(result: Result, applied: bool, display: Callable[[Path], str] = display_path) -> str:
    n = len(result.findings)
    if n == 0 and result.baseline.compiled_calls == 0:
        return "Nothing to do: the entry never called compiled code (torch.compile)."
    if n == 0:
        return f"No graph breaks found in {result.baseline.compiled_calls} call(s) of compiled code."
    fixed = [f for f in result.findings if f.status == "fixed"]
    unsafe = [f for f in result.findings if f.status == "fixable-unsafe"]
    outside = [f for f in result.findings if f.status == "outside"]
    unfixed = [f for f in result.findings if f.status == "unfixed"]
    parts = []
    if fixed:
        parts.append(f"{len(fixed)} fixed" if applied else f"{len(fixed)} fixable (verified; --apply writes them)")
    if unsafe:
        parts.append(f"{len(unsafe)} fixable with --unsafe-fixes")
    if unfixed:
        first = unfixed[0]
        parts.append(f"{len(unfixed)} not fixable ({first.code} at {display(first.path)}:{first.line})")
    if outside:
        parts.append(f"{len(outside)} outside the targets")
    noun = "graph break" if n == 1 else "graph breaks"
    line = f"Found {n} {noun}: {', '.join(parts)}."
    if applied and result.fixed:
        line += f" {result.remaining} remain after the edits."
    return line


def exit_code(result: Result, applied: bool) -> int:
    if result.fullgraph is False:
        return 1
    if applied:
        return 0 if result.remaining == 0 else 1
    return 0 if not result.findings and not result.fixed else 1
