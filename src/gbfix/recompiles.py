"""Recompiles: why a compiled frame compiled again, as RC codes, located in the targets.

The child records each recompile with its failed guards (``gbfix.child.recompiles``);
here each guard gets a code by the kind of its cause, and the recompiles of one frame
with the same cause at the same place become one finding, like a break site. The
codes (``RC`` and three digits) cannot be taken for Dynamo's ``GB`` codes; the
rules/RCxxx.md pages document them.

A recompile site is answered like a break site (``engine._Session.recompile_round``): the
recipes whose ``codes`` hold its RC code propose, and an edit is kept when the recompiles of
its site (``site_of``) go down. A finding left has the status ``recompile``, and its detail
says why it is left as a break's does (``Left``: the engine's ``recompile_left``).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from gbfix.ledger import Finding
from gbfix.locate import innermost_in
from gbfix.rccodes import CODES, LIMIT, LIMIT_BREAK, STATUS, GuardCause, cause
from gbfix.records import Break, Cause, Guard, Recompile, Site
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


# The words of a site, a break's or a recompile's, that only an unsafe recipe would fix
# (engine ``left_over`` writes them; the summary counts them)
UNSAFE = "fixable with --unsafe-fixes"

# Why a recompile site is left (its latest recompile, the by-hand hint of its code): what the
# recipes tried, as a break left is worded. Without one (detection only: ``gbfix check``), the hint.
Left = Callable[[Recompile, str], str]


def _by_hand(rc: Recompile, hand: str) -> str:
    return f"by hand: {hand}"


def findings(recompiles: tuple[Recompile, ...], files: dict[Path, SourceFile], left: Left = _by_hand) -> list[Finding]:
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
        detail = f"{CODES[code][0]}; {left(rc, CODES[code][1])}"
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
                # no recipe of its own: it goes with the recompiles it names, each worded with what was tried
                f"by hand: {CODES[LIMIT][1]}" + ("" if path else f"; outside the targets ({rc.file})"),
                recompiles=(rc,),
            )
        )
    return out


def covered_by_limit(finding: Finding, limits: list[Finding]) -> bool:
    """A GB0039 break (recompile limit exceeded) at the def an RC100 reports: the same event."""
    return finding.code == LIMIT_BREAK and any(
        (lf.path, lf.line) == (finding.path, finding.line) for lf in limits if lf.code == LIMIT
    )


def count_note(found: list[Finding], applied: bool = True) -> str:
    """The summary's sentence about recompiles ("" when there are none); ``applied``: the
    edits were written (else the fixed sites are fixable)."""
    rcs = [f for f in found if f.status == STATUS and f.code != LIMIT]
    limits = [f for f in found if f.code == LIMIT and f.status == STATUS]
    fixed = sum(1 for f in found if f.status == "fixed" and f.code in CODES and f.code != LIMIT)
    sites = f"{fixed} recompile site{'s' if fixed != 1 else ''}"
    done = (f"{sites} fixed." if applied else f"{sites} fixable (verified; --apply writes them).") if fixed else ""
    if not rcs and not limits:
        return done
    total = sum(len(f.recompiles) for f in rcs)
    text = f"{total} recompile{'s' if total != 1 else ''} at {len(rcs)} site{'s' if len(rcs) != 1 else ''}"
    if limits:
        text += f", {len(limits)} frame{'s' if len(limits) != 1 else ''} over the recompile limit (running eagerly)"
    # worded as the break summary words the sites left (report._summary)
    unsafe = sum(1 for f in rcs if UNSAFE in f.detail)
    left = [f"{unsafe} fixable with --unsafe-fixes"] if unsafe else []
    left += [f"{len(rcs) - unsafe} not fixable"] if len(rcs) > unsafe else []
    return " ".join(x for x in (done, f"Found {text}: {', '.join(left) or 'left'}.") if x)


def merge(
    breaks: list[Finding],
    recompiles: tuple[Recompile, ...],
    files: dict[Path, SourceFile],
    final: tuple[Recompile, ...] | None = None,
    left: Left = _by_hand,
) -> list[Finding]:
    """The break findings with the recompile findings: limit hits first (the worst case:
    the frame runs eagerly; each replaces Dynamo's GB0039 at the same def), recompiles last.
    ``final``: the recompiles of the edited program, when edits were kept: a site (or a
    limit hit) that no longer recompiles there is fixed. ``left``: why a site is left."""
    found = findings(recompiles, files, left)
    if final is not None:
        found = [_judged(f, final) for f in found]
    limits = [f for f in found if f.code == LIMIT]
    return [*limits, *(f for f in breaks if not covered_by_limit(f, limits)), *(f for f in found if f.code != LIMIT)]


def site_of(rc: Recompile) -> tuple:
    """What a recompile site is across edits (which move lines): the frame's file and
    function, the cause's code and the guarded expression."""
    guard = rc.guards[0] if rc.guards else None
    why = cause(guard) if guard else GuardCause("RC009", "")
    return (os.path.realpath(rc.file), rc.function, why.code, why.source)


def counts(recompiles: tuple[Recompile, ...]) -> Counter:
    """Recompiles per site (``site_of``)."""
    return Counter(site_of(rc) for rc in recompiles if rc.guards)


def limited(recompiles: tuple[Recompile, ...]) -> set[tuple[str, str]]:
    """The frames (file, function) that hit the recompile limit."""
    return {(os.path.realpath(rc.file), rc.function) for rc in recompiles if rc.limit is not None}


def _judged(finding: Finding, final: tuple[Recompile, ...]) -> Finding:
    """The finding, fixed when the edited program no longer recompiles there, or once where
    it recompiled more (the automatic-dynamic recompile, which settles the frame)."""
    rc = finding.recompiles[-1]
    if finding.code == LIMIT:
        gone = (os.path.realpath(rc.file), rc.function) not in limited(final)
        return replace(finding, status="fixed", detail="") if gone else finding
    left = counts(final)[site_of(rc)]
    if left == 0 or left == 1 < len(finding.recompiles):
        # one left: the automatic-dynamic recompile that makes the value symbolic, once per frame
        return replace(finding, status="fixed", detail="")
    if left < len(finding.recompiles):
        return replace(finding, detail=f"reduced to {_times(left)} by the edits; " + finding.detail)
    return finding


def site(finding: Finding) -> Site:
    """A recompile finding as a site a recipe can answer: its Break stands in for the
    guard (code, the guard's text), placed where the finding is reported."""
    rc = finding.recompiles[-1]
    text = rc.guards[0].text if rc.guards else ""
    brk = Break((Cause(finding.code, "recompile", f"guard `{text}` failed"),), ())
    assert finding.path is not None, "a recompile site is in the targets"
    col = None if finding.col is None else finding.col - 1
    return Site(finding.path, finding.line, col, None, brk)


def still_breaking(findings: tuple[Finding, ...] | list[Finding]) -> int:
    """The sites that still break: findings not fixed, recompiles left out, except a frame over
    the recompile limit (RC100 stands in for Dynamo's GB0039 break: the frame runs eagerly)."""
    return sum(1 for f in findings if f.status not in ("fixed", STATUS) or (f.code == LIMIT and f.status == STATUS))
