"""Report: diagnostics lines, the summary line and the exit code, from an engine Result.

Text only; ``gbfix.formats`` writes the machine formats.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import cast

from gbfix import recompiles, upstream
from gbfix.engine import Finding, Result
from gbfix.suppress import Filter


def display_path(path: Path, cwd: Path | None = None) -> str:
    cwd = cwd or Path.cwd()
    try:
        rel = os.path.relpath(path, cwd)
    except ValueError:
        return str(path)
    return str(path) if rel.startswith("..") else rel


def diagnostic(f: Finding, display: Callable[[Path], str] = display_path) -> str:
    """``path:line:col: GB0059 [*] message (detail)``; ``[*]`` marks a verified fix.

    The detail ends with what gbfix knows of the break at newer releases of the
    package it lies in, if it lies in one (``gbfix.upstream``)."""
    known = upstream.note(f.brk, f.code) if f.brk is not None else None
    details = "; ".join(d for d in (f.detail, known) if d)
    if f.path is None:
        return f"{f.code} {f.message} ({details})"
    where = f"{display(f.path)}:{f.line}:{f.col}" if f.col else f"{display(f.path)}:{f.line}"
    mark = " [*]" if f.status == "fixed" else ""
    detail = f" ({details})" if details else ""
    return f"{where}: {f.code}{mark} {f.message}{detail}"


def filtered(result: Result, selection: Filter) -> tuple[Result, int]:
    """The result without the findings that ``selection`` leaves out, and how many of those
    a ``# gbfix: ignore`` comment suppressed (the engine already proposed no edit for them).

    Findings are in the coordinates of the original files, so the comments are read there.
    When anything is left out, ``remaining`` counts the sites left that still break.
    """
    kept, suppressed = [], 0
    for f in result.findings:
        text = result.originals[f.path].text if f.path in result.originals else None
        if selection.keeps(f.code, text, f.line):
            kept.append(f)
        elif selection.suppressed(f.code, text, f.line):
            suppressed += 1
    if len(kept) == len(result.findings):
        return result, 0
    return replace(result, findings=tuple(kept), remaining=recompiles.still_breaking(kept)), suppressed


def summary(result: Result, applied: bool, display: Callable[[Path], str] = display_path, suppressed: int = 0) -> str:
    """The closing line: the breaks, then a sentence on the recompiles (fixed, and left)."""
    rc_note = recompiles.count_note(list(result.findings), applied)
    if not rc_note:
        return _break_summary(result, applied, display, suppressed)
    breaks_only = replace(result, findings=tuple(f for f in result.findings if not f.recompiles))
    return f"{_break_summary(breaks_only, applied, display, suppressed)} {rc_note}"


def _break_summary(result: Result, applied: bool, display: Callable[[Path], str], suppressed: int) -> str:
    if not suppressed:
        return _summary(result, applied, display)
    if not result.findings:
        return f"No graph breaks to report in {result.baseline.compiled_calls} call(s) of compiled code: {suppressed} suppressed."
    return f"{_summary(result, applied, display)} {suppressed} suppressed."


def _summary(result: Result, applied: bool, display: Callable[[Path], str]) -> str:
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
        # an unfixed finding is at a site in the targets: it has a path
        parts.append(f"{len(unfixed)} not fixable ({first.code} at {display(cast(Path, first.path))}:{first.line})")
    if outside:
        parts.append(f"{len(outside)} outside the targets")
    # Every number counts sites (a source span that breaks, however often Dynamo reports it).
    line = f"Found {n} graph break {_sites(n)}: {', '.join(parts)}."
    if result.fixed:
        k = result.remaining
        if applied:
            line += f" {k} {_sites(k)} still {'breaks' if k == 1 else 'break'} after the edits."
        else:
            line += f" {k} {_sites(k)} would still break after the edits."
    return line


def _sites(n: int) -> str:
    return "site" if n == 1 else "sites"


def exit_code(result: Result, applied: bool) -> int:
    if result.fullgraph is False or result.recompiles_proven is False:
        return 1
    if applied:  # breaks only: a recompile left does not fail --apply (`gbfix check` gates them)
        return 0 if result.remaining == 0 else 1
    return 0 if not result.findings and not result.fixed else 1
