"""Verify: judge a trial run of edited code against the run it started from.

An edit is kept only if
- its break site is gone and the code it wrote does not break with a code
  that was not there before (``site_verdict``), and
- the whole program behaved the same: compiled outputs (compared in the
  child), stdout, log records and warnings (``behaviour_diff``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from gbfix.linemap import LineMap, Mapped
from gbfix.locate import owned_frame
from gbfix.records import Break, Edit, RunResult, Site, Status


@dataclass(frozen=True)
class TrialBreak:
    """A break of a trial run, placed in the coordinates of the unedited files."""

    code: str
    path: Path
    at: Mapped
    col: int | None
    brk: Break


def site_key(site: Site) -> tuple:
    return (site.path, site.line, site.col, site.code)


def place(result: RunResult, targets: set[Path], maps: dict[Path, LineMap]) -> list[TrialBreak]:
    """The trial's breaks that lie in the targets, with lines mapped back."""
    out = []
    for brk in result.breaks:
        owned = owned_frame(brk, targets)
        if owned is None:
            continue
        path, frame = owned
        lm = maps.get(path)
        at = lm(frame.line) if lm else Mapped(frame.line, frame.line, False)
        out.append(TrialBreak(brk.root.code or brk.root.gb_type, path, at, frame.col, brk))
    return out


def site_verdict(
    edit: Edit, trial: list[TrialBreak], byte_col: int | None, codes_before: set[str]
) -> tuple[Status, str] | None:
    """Why the edit failed at its own site, or None if its break is gone.

    ``byte_col`` is the site's column as Dynamo reports it; ``codes_before``
    the codes that broke inside the edit's span before the edit.
    """
    site = edit.site
    first, last = edit.start[0], edit.end[0]
    for tb in trial:
        if tb.path != site.path:
            continue
        if not tb.at.rewritten:
            if (tb.at.line, tb.col, tb.code) == (site.line, byte_col, site.code):
                return "rejected:no-reduction", f"{site.code} still breaks at line {site.line}"
            continue
        if tb.at.line <= last and tb.at.last >= first:
            if tb.code == site.code:
                return "rejected:no-reduction", f"the rewritten code still breaks with {tb.code}"
            if tb.code not in codes_before:
                return "rejected:new-break", f"the rewritten code breaks with {tb.code} ({tb.brk.root.gb_type})"
    return None


def behaviour_diff(expected: RunResult, actual: RunResult, tolerate_order: bool) -> str | None:
    """How the trial's observable behaviour differs from the expected run, or None."""
    if actual.output_mismatch:
        return f"compiled outputs differ: {actual.output_mismatch}"

    def same(a, b) -> bool:
        return Counter(a) == Counter(b) if tolerate_order else list(a) == list(b)

    if not same(expected.stdout.splitlines(), actual.stdout.splitlines()):
        return "stdout differs: " + _first_difference(expected.stdout.splitlines(), actual.stdout.splitlines())
    if not same(expected.logs, actual.logs):
        return "log records differ: " + _first_difference(
            [f"{r.level} {r.logger}: {r.message}" for r in expected.logs],
            [f"{r.level} {r.logger}: {r.message}" for r in actual.logs],
        )
    if not same(expected.warnings, actual.warnings):
        return "warnings differ: " + _first_difference(
            [f"{w.category}: {w.message}" for w in expected.warnings],
            [f"{w.category}: {w.message}" for w in actual.warnings],
        )
    return None


def _first_difference(a: list[str], b: list[str]) -> str:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"line {i + 1}: {x!r} became {y!r}"
    if len(a) > len(b):
        return f"{a[len(b)]!r} is missing"
    return f"{b[len(a)]!r} is new"
