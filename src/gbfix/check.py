"""gbfix check: a CI gate with a ratchet.

One detection run of the entry (the engine's baseline run: eager backend, Dynamo's
reporting hooked), each break located in the targets as ``fix`` locates it, and the
sites compared to the baseline file (``gbfix.baseline``). Exit 1 only for breaks the
baseline does not list; ``--update-baseline`` writes the file instead. Nothing is fixed.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from gbfix import baseline as bl
from gbfix import report
from gbfix.config import resolve as settings_for
from gbfix.detect import Prober
from gbfix.engine import Finding, _message
from gbfix.entry import resolve
from gbfix.locate import Locator
from gbfix.records import Break, RunResult, Site
from gbfix.sources import SourceFile, check_paths, collect
from gbfix.suppress import Filter
from gbfix.verify import site_key


@dataclass(frozen=True)
class Detected:
    """What one detection run found, located in the targets."""

    run: RunResult
    sites: tuple[Site, ...]  # one per break site in the targets
    outside: tuple[Break, ...]  # breaks whose stack never enters the targets
    files: dict[Path, SourceFile]  # the targets as read


def detect(targets: list[Path], entry_text: str | None, timeout: float, progress: Callable[[str], None]) -> Detected:
    """Run the entry once under Dynamo and locate its breaks in ``targets`` (as ``fix`` does)."""
    check_paths(targets)
    the_entry = resolve(entry_text, targets, Path.cwd())
    files = collect(targets)
    with tempfile.TemporaryDirectory(prefix="gbfix-") as workdir:
        progress(f"detection run of `{the_entry.text}`")
        run = Prober(the_entry, Path(workdir), timeout).baseline()
    locator = Locator(files)
    sites: dict[tuple, Site] = {}
    outside: list[Break] = []
    for brk in run.breaks:
        site = locator.site(brk)
        if site is None:
            outside.append(brk)
        else:
            sites.setdefault(site_key(site), site)  # the same site reached through two stacks is one
    ordered = sorted(sites.values(), key=lambda s: (str(s.path), s.line, s.col or 0, s.code))
    return Detected(run, tuple(ordered), tuple(outside), files)


def main(
    paths: list[Path],
    flags: dict[str, Any],
    baseline_file: Path | None,
    update: bool,
    progress: Callable[[str], None],
) -> int:
    """``gbfix check``; returns the exit code.

    ``flags``: entry, timeout, select, ignore as given on the command line (None: not
    given); with ``[tool.gbfix]`` and the defaults they resolve as for ``fix``. Sites that
    select / ignore or a ``# gbfix: ignore`` comment leave out are neither checked nor
    written to the baseline.
    """
    if paths:
        check_paths(paths)  # a missing path first, before the config, the baseline or the entry
    settings = settings_for(paths, {k: flags.get(k) for k in ("entry", "timeout", "select", "ignore")})
    targets = settings.targets()
    check_paths(targets)
    where = (baseline_file or bl.default_path(targets[0])).resolve()
    root = where.parent
    shown = report.display_path(where)
    known = bl.load(where, shown)  # a malformed baseline stops here, before the entry runs
    found = detect(targets, settings["entry"], settings["timeout"], progress)
    selection = Filter(settings["select"], settings["ignore"])
    checked = [s for s in found.sites if selection.keeps(s.code, found.files[s.path].text, s.line)]
    suppressed = sum(1 for s in found.sites if selection.suppressed(s.code, found.files[s.path].text, s.line))
    keys = {id(s): bl.key(s.code, s.path, s.line, root) for s in checked}
    current = Counter(keys.values())
    again = "gbfix check --update-baseline" + (f" --baseline {baseline_file}" if baseline_file else "")
    for brk in found.outside:
        leaf = brk.leaf
        click.echo(f"note: {brk.root.code or brk.root.gb_type} outside the targets ({leaf.file if leaf else '?'}:{leaf.line if leaf else 0}), not checked", err=True)

    # Entries of codes that select / ignore leave out are neither checked nor stale, and an update keeps them.
    unselected = Counter({k: n for k, n in (known or {}).items() if not selection.selects(k[0])})
    if known is not None:
        known = known - unselected
    if update:
        written = current + unselected
        bl.dump(where, written)
        before = sum(known.values()) + sum(unselected.values()) if known is not None else 0
        n = sum(written.values())
        change = "" if known is None else f" ({before} before)"
        kept = f"; {sum(unselected.values())} of codes not selected kept" if unselected else ""
        click.echo(f"Wrote {shown}: {n} graph break{'s' if n != 1 else ''} in {len(written)} entr{'ies' if len(written) != 1 else 'y'}{change}{kept}.", err=True)
        return 0

    cmp = bl.compare(current, known)
    for site in checked:
        k = keys[id(site)]
        if k in cmp.new:
            had = known[k] if known else 0
            detail = "new: not in the baseline" if not had else f"new: {current[k]} {k[0]} in {k[2]}, the baseline allows {had}"
            f = Finding(site.path, site.line, None if site.col is None else site.col + 1, site.code, _message(site.brk), "new", detail, site.brk)
            click.echo(report.diagnostic(f))
    note = bl.stale_note(cmp, shown, f"run `{again}`")
    if note:
        click.echo(f"note: {note}", err=True)
    click.echo(_summary(found, len(checked), suppressed, cmp, shown, again), err=True)
    return 1 if cmp.new else 0


def _summary(found: Detected, n: int, suppressed: int, cmp: bl.Comparison, shown: str, again: str) -> str:
    tail = f" {suppressed} suppressed." if suppressed else ""
    if n == 0:
        if found.run.compiled_calls == 0:
            return "Nothing to check: the entry never called compiled code (torch.compile)."
        return f"No graph breaks found in {found.run.compiled_calls} call(s) of compiled code." + tail
    noun = "graph break" if n == 1 else "graph breaks"
    if cmp.known is None:
        return f"Found {n} {noun}, all new: no baseline at {shown} (`{again}` writes one)." + tail
    if not cmp.new:
        return f"Found {n} {noun}, all in the baseline ({shown})." + tail
    return f"Found {n} {noun}: {cmp.new_total} new (not in {shown}), {n - cmp.new_total} in the baseline." + tail
