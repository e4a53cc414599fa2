"""Recompiles: why a compiled frame compiled again, as RC codes, located in the targets.

The child records each recompile with its failed guards (``gbfix.child.recompiles``);
here each guard gets a code by the kind of its cause, and the recompiles of one frame
with the same cause at the same place become one finding, like a break site. The
codes (``RC`` and three digits) cannot be taken for Dynamo's ``GB`` codes; the
rules/RCxxx.md pages document them.

Recompiles are reported, not fixed yet: their findings have the status ``recompile``.
"""

from __future__ import annotations

import os
from pathlib import Path

from gbfix.ledger import Finding
from gbfix.locate import innermost_in
from gbfix.rccodes import CODES, LIMIT, LIMIT_BREAK, STATUS, GuardCause, cause
from gbfix.records import Guard, Recompile
from gbfix.sources import SourceFile, char_column


def _column(files: dict[Path, SourceFile], path: Path, line: int, byte_col: int | None) -> int | None:
    """1-based character column (of the first non-blank when Dynamo gave none)."""
    src = files.get(path)
    if src is None:
        return None if byte_col is None else byte_col + 1
    lines = src.text.splitlines()
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    if byte_col is None:
        return len(text) - len(text.lstrip()) + 1 if text.strip() else None
    return char_column(text, byte_col) + 1


def _where(rc: Recompile, guard: Guard | None, files: dict[Path, SourceFile]) -> tuple[Path | None, int, int | None]:
    """Where to report: the line that created the guard, else the call of the compiled
    frame (a tensor's size: where ``mark_dynamic`` would go), else its def."""
    targets = set(files)
    for stack in ((guard.stack if guard else ()), rc.stack):
        if hit := innermost_in(stack, targets):
            path, frame = hit
            return path, frame.line, _column(files, path, frame.line, frame.col)
    path = Path(os.path.realpath(rc.file))
    if path in targets:
        return path, rc.line, _column(files, path, rc.line, None)
    return None, rc.line, None


def _times(n: int) -> str:
    return "once" if n == 1 else f"{n} times"


def findings(recompiles: tuple[Recompile, ...], files: dict[Path, SourceFile]) -> list[Finding]:
    """One finding per (frame, cause, guarded expression, place), limit hits first."""
    groups: dict[tuple, list[tuple[Recompile, Guard, GuardCause]]] = {}
    for rc in recompiles:
        if not rc.guards:
            continue
        guard = rc.guards[0]  # the most recent compile's: the one Dynamo reports
        why = cause(guard)
        at = _where(rc, guard, files)
        groups.setdefault((rc.file, rc.line, why.code, why.source, *at), []).append((rc, guard, why))
    out: list[Finding] = []
    for (_, _, code, source, path, line, col), items in groups.items():
        rc, guard, _ = items[-1]
        detail = f"{CODES[code][0]}; reported, not fixed yet; by hand: {CODES[code][1]}"
        if path is None:
            detail = f"outside the targets ({rc.file}); " + detail
        out.append(
            Finding(
                path, line, col, code,
                f"`{rc.function}` recompiled {_times(len(items))}: guard `{guard.text}` failed on `{source}`",
                STATUS, detail, recompiles=tuple(r for r, _, _ in items),
            )
        )
    return [*_limits(recompiles, files, out), *out]


def _limits(recompiles: tuple[Recompile, ...], files: dict[Path, SourceFile], causes: list[Finding]) -> list[Finding]:
    """RC100 at the def of each frame that hit the limit, naming the causes found for it."""
    out = []
    for rc in recompiles:
        if rc.limit is None:
            continue
        path: Path | None = Path(os.path.realpath(rc.file))
        path = path if path in files else None
        col = _column(files, path, rc.line, None) if path else None
        total = sum(1 for r in recompiles if (r.file, r.line) == (rc.file, rc.line))
        named = [f for f in causes if any((r.file, r.line) == (rc.file, rc.line) for r in f.recompiles)]
        because = ", ".join(f"{f.code} `{cause(f.recompiles[-1].guards[0]).source}` at line {f.line}" for f in named[:3])
        last = rc.guards[0].text if rc.guards else "?"
        out.append(
            Finding(
                path, rc.line, col, LIMIT,
                f"`{rc.function}` hit torch._dynamo.config.{rc.limit} after {total} recompiles and now runs eagerly;"
                f" last failed guard `{last}`" + (f" (caused by {because})" if because else ""),
                STATUS,
                "reported, not fixed yet; by hand: fix the recompiles it names" + ("" if path else f"; outside the targets ({rc.file})"),
                recompiles=(rc,),
            )
        )
    return out


def covered_by_limit(finding: Finding, limits: list[Finding]) -> bool:
    """A GB0039 break (recompile limit exceeded) at the def an RC100 reports: the same event."""
    return finding.code == LIMIT_BREAK and any(
        (lf.path, lf.line) == (finding.path, finding.line) for lf in limits if lf.code == LIMIT
    )


def count_note(found: list[Finding]) -> str:
    """The summary's sentence about recompiles ("" when there are none)."""
    rcs = [f for f in found if f.status == STATUS and f.code != LIMIT]
    limits = [f for f in found if f.code == LIMIT]
    if not rcs and not limits:
        return ""
    total = sum(len(f.recompiles) for f in rcs)
    text = f"{total} recompile{'s' if total != 1 else ''} at {len(rcs)} site{'s' if len(rcs) != 1 else ''}"
    if limits:
        text += f", {len(limits)} frame{'s' if len(limits) != 1 else ''} over the recompile limit (running eagerly)"
    return f"Found {text}: reported, not fixed yet."


def merge(breaks: list[Finding], recompiles: tuple[Recompile, ...], files: dict[Path, SourceFile]) -> list[Finding]:
    """The break findings with the recompile findings: limit hits first (the worst case:
    the frame runs eagerly; each replaces Dynamo's GB0039 at the same def), recompiles last."""
    found = findings(recompiles, files)
    limits = [f for f in found if f.code == LIMIT]
    return [*limits, *(f for f in breaks if not covered_by_limit(f, limits)), *(f for f in found if f.code != LIMIT)]


def still_breaking(findings: tuple[Finding, ...] | list[Finding]) -> int:
    """The sites that still break: findings not fixed, recompiles left out, except a frame over
    the recompile limit (RC100 stands in for Dynamo's GB0039 break: the frame runs eagerly)."""
    return sum(1 for f in findings if f.status not in ("fixed", STATUS) or f.code == LIMIT)
