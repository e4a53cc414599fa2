"""Verify: judge a trial run of edited code against the run it started from.

An edit is kept only if
- its break site is gone and the code it wrote does not break with a code
  that was not there before (``site_verdict``), and
- the whole program behaved the same: compiled outputs (compared in the
  child), stdout, log records and warnings (``behaviour_diff``).
"""

from __future__ import annotations

import linecache
import os
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gbfix.linemap import LineMap, Mapped
from gbfix.locate import library_leaf, owned_frame
from gbfix.records import Break, Edit, RunResult, Site, Status


@dataclass(frozen=True)
class TrialBreak:
    """A break of a trial run, placed in the coordinates of the unedited files."""

    code: str
    path: Path
    at: Mapped
    col: int | None
    brk: Break
    function: str = ""  # the function of the frame in the targets
    # The frames of the same file that called it, innermost first, lines mapped back:
    # a break inside a helper an edit added is the edit's if a call from its span led there.
    callers: tuple[Mapped, ...] = ()
    leaf: tuple[str, int] | None = None  # see ``locate.library_leaf``
    text: str = ""  # the line of the edited file it broke on, stripped ("" where the file is not edited)


def site_key(site: Site) -> tuple:
    """Breaks in a library behind one call of the user's (``model(x)``) are separate
    sites: a fix of one is judged by its own break, not by the others'."""
    return (site.path, site.line, site.col, site.code, library_leaf(site.brk, site.path))


def place(result: RunResult, targets: set[Path], maps: dict[Path, LineMap]) -> list[TrialBreak]:
    """The trial's breaks that lie in the targets, with lines mapped back."""
    out = []
    for brk in result.breaks:
        owned = owned_frame(brk, targets)
        if owned is None:
            continue
        path, frame = owned
        lm = maps.get(path)
        mapped = lm or (lambda line: Mapped(line, line, False))
        inner = brk.stack.index(frame)
        callers = tuple(mapped(f.line) for f in reversed(brk.stack[:inner]) if _same_file(f.file, path))
        code = brk.root.code or brk.root.gb_type
        text = lm.text(frame.line) if lm else ""
        out.append(TrialBreak(code, path, mapped(frame.line), frame.col, brk, frame.name, callers, library_leaf(brk, path), text))
    return out


def _same_file(file: str, path: Path) -> bool:
    return Path(os.path.realpath(file)) == path


def site_verdict(
    edit: Edit,
    trial: list[TrialBreak],
    byte_col: int | None,
    codes_before: set[str],
    leaves_before: frozenset[tuple[str, int]] = frozenset(),
) -> tuple[Status, str] | None:
    """Why the edit failed at its own site, or None if its break is gone.

    ``byte_col`` is the site's column as Dynamo reports it; ``codes_before``
    the codes that broke inside the edit's span or on the site's line before the edit;
    ``leaves_before`` the library lines (``library_leaf``) that broke before behind a
    line of the targets: a break on the site's line that comes from another such
    library line broke there already, in another form, and is none of the edit's doing.
    """
    site = edit.site
    first, last = edit.start[0], edit.end[0]
    helpers = _helper_names(edit)
    for tb in trial:
        if tb.path != site.path:
            continue
        if tb.function in helpers and any(c.line <= last and c.last >= first for c in tb.callers):
            # The edit's call of a helper it added still breaks, inside the helper.
            if tb.code == site.code:
                return "rejected:no-reduction", f"{site.code} still breaks, inside {tb.function}"
            if tb.code not in codes_before:
                return "rejected:new-break", f"{tb.function} breaks with {describe(tb)}"
            continue
        if not tb.at.rewritten:
            if (tb.at.line, tb.col, tb.code, tb.leaf) == (site.line, byte_col, site.code, library_leaf(site.brk, site.path)):
                return "rejected:no-reduction", f"{site.code} still breaks on its line"
            # An edit elsewhere (a config route) that trades the site's break for
            # another one on the same line gains nothing.
            if tb.at.line == site.line and tb.code != site.code and tb.code not in codes_before:
                if tb.leaf is not None and tb.leaf != library_leaf(site.brk, site.path) and tb.leaf in leaves_before:
                    continue
                return "rejected:new-break", f"its line now breaks with {describe(tb)}"
            continue
        if tb.at.line <= last and tb.at.last >= first:
            if _another_sites(tb, library_leaf(site.brk, site.path), leaves_before):
                continue
            if tb.code == site.code:
                return "rejected:no-reduction", f"the rewritten code still breaks with {tb.code}"
            if tb.code not in codes_before:
                return "rejected:new-break", f"the rewritten code breaks with {describe(tb)}"
    return None


def _another_sites(tb: TrialBreak, own: tuple[str, int] | None, leaves_before: frozenset[tuple[str, int]]) -> bool:
    """A break in the edit's rewritten code that is another site's, judged by that site's
    edit: library-patch copies a library method whole into the user's file, so a break
    of another library line that broke before shows there, in the copy of that line
    (the same text), or behind a call the copy makes into that line."""
    if tb.leaf is not None:
        return tb.leaf != own and tb.leaf in leaves_before
    if not tb.text or own is None:
        return False
    others = {linecache.getline(file, line).strip() for file, line in leaves_before if (file, line) != own}
    return tb.text in others and tb.text != linecache.getline(*own).strip()


def _helper_names(edit: Edit) -> set[str]:
    """The functions the module-level helpers of an edit define."""
    return {m.group(1) for _, code in edit.helpers for m in _DEF.finditer(code)}


_DEF = re.compile(r"^\s*(?:async\s+)?def\s+(\w+)", re.MULTILINE)


def describe(tb: TrialBreak) -> str:
    """``GB0059 (Failed to trace builtin operator)``, or the type alone for a break with no code."""
    return tb.code if tb.code == tb.brk.root.gb_type else f"{tb.code} ({tb.brk.root.gb_type})"


@dataclass(frozen=True)
class Noise:
    """What differs between two runs of the *unmodified* program (timings in logs, say).

    Positions listed here are not compared; found only when a trial differs,
    by running the original program once more.
    """

    stdout: frozenset[int] = frozenset()
    logs: frozenset[int] = frozenset()
    warnings: frozenset[int] = frozenset()
    outputs: bool = False  # the compiled outputs themselves are not reproducible

    @classmethod
    def between(cls, a: RunResult, b: RunResult) -> Noise:
        def differing(x, y) -> frozenset[int]:
            return frozenset(i for i in range(max(len(x), len(y))) if i >= len(x) or i >= len(y) or x[i] != y[i])

        return cls(
            differing(a.stdout.splitlines(), b.stdout.splitlines()),
            differing(a.logs, b.logs),
            differing(a.warnings, b.warnings),
            b.output_mismatch is not None,
        )


def behaviour_diff(
    expected: RunResult, actual: RunResult, tolerates: frozenset[str] = frozenset(), noise: Noise = Noise()
) -> str | None:
    """How the trial's observable behaviour differs from the expected run, or None.

    ``tolerates`` (from the recipes of the edits): "order" compares stdout, logs
    and warnings as multisets; "compile-boundary" skips the compiled outputs,
    which cannot be matched call for call once an edit moves torch.compile.
    """
    if actual.output_mismatch and not noise.outputs and "compile-boundary" not in tolerates:
        return f"compiled outputs differ: {actual.output_mismatch}"

    def stable(items, unstable: frozenset[int]) -> list:
        return [x for i, x in enumerate(items) if i not in unstable]

    def same(a, b) -> bool:
        return Counter(a) == Counter(b) if "order" in tolerates else list(a) == list(b)

    streams: list[tuple[str, Sequence[Any], Sequence[Any], frozenset[int], Callable[[Any], str]]] = [
        ("stdout differs", expected.stdout.splitlines(), actual.stdout.splitlines(), noise.stdout, str),
        ("log records differ", expected.logs, actual.logs, noise.logs, lambda r: f"{r.level} {r.logger}: {r.message}"),
        ("warnings differ", expected.warnings, actual.warnings, noise.warnings, lambda w: f"{w.category}: {w.message}"),
    ]
    for what, before, after, unstable, show in streams:
        a, b = stable(before, unstable), stable(after, unstable)
        if not same(a, b):
            return f"{what}: " + _first_difference([show(x) for x in a], [show(x) for x in b])
    return None


def _first_difference(a: list[str], b: list[str]) -> str:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"line {i + 1}: {x!r} became {y!r}"
    if len(a) > len(b):
        return f"{a[len(b)]!r} is missing"
    return f"{b[len(a)]!r} is new"
