"""gbfix check: a CI gate with a ratchet.

One detection run of the entry (the engine's baseline run: eager backend, Dynamo's
reporting hooked), each break located in the targets as ``fix`` locates it, and the
sites compared to the baseline file (``gbfix.baseline``). Recompiles are sites too, by
their RC code (``gbfix.recompiles``). Exit 1 only for breaks or recompiles the baseline does not list; ``--update-baseline`` writes the file instead. Nothing is fixed.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import click

from gbfix import baseline as bl
from gbfix import folder_lock, recompiles, report, result_cache, scratch
from gbfix.config import resolve as settings_for
from gbfix.detect import Prober
from gbfix.engine import Finding, Result, message
from gbfix.entry import Entry, resolve
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
    entry: Entry
    seconds: float = 0.0
    reused: bool = False  # the run of an earlier check on the same code (result_cache)


def detect(
    targets: list[Path], entry_text: str | None, timeout: float, progress: Callable[[str], None], cache: bool = False
) -> Detected:
    """Run the entry once under Dynamo and locate its breaks in ``targets`` (as ``fix`` does).

    ``cache``: reuse the run of an earlier check on the same code, and file this one.
    """
    check_paths(targets)
    started = time.perf_counter()
    the_entry = resolve(entry_text, targets, Path.cwd())
    folder_lock.hold(the_entry.cwd)
    files = collect(targets)

    def detection_run() -> RunResult:
        with scratch.folder() as workdir:
            progress(f"detection run of `{the_entry.text}`")
            return Prober(the_entry, workdir, timeout).baseline()

    key = result_cache.key(the_entry, "check", files) if cache else None
    run, reused = result_cache.reuse_or_run(key, RunResult, detection_run, lambda r: r.sources, files)
    if reused:
        progress("unchanged since an earlier run: reusing its detection run")
    locator = Locator(files)
    sites: dict[tuple, Site] = {}
    outside: list[Break] = []
    for brk in run.breaks:
        site = locator.site(brk)
        if site is None:
            outside.append(brk)
        else:
            # The same site reached through two stacks is one, and so is a call of the
            # user's with several breaks in a library behind it (baselines count lines).
            sites.setdefault(site_key(site)[:4], site)
    ordered = sorted(sites.values(), key=lambda s: (str(s.path), s.line, s.col or 0, s.code))
    return Detected(run, tuple(ordered), tuple(outside), files, the_entry, time.perf_counter() - started, reused)


def main(
    paths: list[Path],
    flags: dict[str, Any],
    baseline_file: Path | None,
    update: bool,
    progress: Callable[[str], None],
    fmt: str = "text",
    html_file: Path | None = None,
    cache: bool = False,
) -> int:
    """``gbfix check``; returns the exit code.

    ``flags``: entry, timeout, select, ignore as given on the command line (None: not
    given); with ``[tool.gbfix]`` and the defaults they resolve as for ``fix``. Sites that
    select / ignore or a ``# gbfix: ignore`` comment leave out are neither checked nor
    written to the baseline. ``fmt``: text, or json / github / sarif on stdout (see
    ``gbfix.formats``); ``html_file``: also write the HTML report there; ``cache``: see ``detect``.
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
    found = detect(targets, settings["entry"], settings["timeout"], progress, cache)
    if found.reused:
        click.echo(f"note: {result_cache.REUSED.format(what='detection run')}", err=True)
    selection = Filter(settings["select"], settings["ignore"])
    # The break sites, and the recompiles as sites of their own (an RC100 stands for Dynamo's GB0039 at its def)
    every = recompiles.merge([_finding(s, "", "") for s in found.sites], found.run.recompiles, found.files)
    for f in every:
        if f.path is None:
            click.echo(f"note: {f.code} outside the targets ({f.detail.split(';')[0]}), not checked", err=True)
    every = [f for f in every if f.path is not None]  # each f.path below is a Path (cast: mypy cannot follow the filter)
    checked = [f for f in every if selection.keeps(f.code, found.files[cast(Path, f.path)].text, f.line)]
    suppressed = sum(1 for f in every if selection.suppressed(f.code, found.files[cast(Path, f.path)].text, f.line))
    keys = {id(f): bl.key(f.code, cast(Path, f.path), f.line, root) for f in checked}
    current = Counter(keys.values())
    again = "gbfix check --update-baseline" + (f" --baseline {baseline_file}" if baseline_file else "")
    outside = [brk for brk in found.outside if selection.selects(brk.root.code or brk.root.gb_type)]
    for brk in outside:
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
        summary = f"Wrote {shown}: {n} graph break{'s' if n != 1 else ''} in {len(written)} entr{'ies' if len(written) != 1 else 'y'}{change}{kept}."
        findings = [replace(f, status="baseline", detail="written to the baseline") for f in checked]
        _report(fmt, html_file, found, findings, outside, summary, 0, suppressed, shown, None, update=True)
        click.echo(summary, err=True)
        return 0

    cmp = bl.compare(current, known)
    findings = []
    for f in checked:
        k = keys[id(f)]
        if k in cmp.new:
            had = known[k] if known else 0
            detail = "new: not in the baseline" if not had else f"new: {current[k]} {k[0]} in {k[2]}, the baseline allows {had}"
            findings.append(replace(f, status="new", detail=detail))
            if fmt == "text":
                click.echo(report.diagnostic(findings[-1]))
        else:
            findings.append(replace(f, status="baseline", detail=f"in the baseline: {bl.describe(k)}"))
    note = bl.stale_note(cmp, shown, f"run `{again}`")
    if note:
        click.echo(f"note: {note}", err=True)
    summary = _summary(found, len(checked), suppressed, cmp, shown, again, any(f.code.startswith("RC") for f in checked))
    code = 1 if cmp.new else 0
    _report(fmt, html_file, found, findings, outside, summary, code, suppressed, shown, cmp)
    click.echo(summary, err=True)
    return code


def _finding(site: Site, status: str, detail: str) -> Finding:
    return Finding(site.path, site.line, None if site.col is None else site.col + 1, site.code, message(site.brk), status, detail, site.brk)


_LEVEL = {"new": "error", "baseline": "note", "outside": "warning"}


def _report(
    fmt: str, html_file: Path | None, found: Detected, findings: list[Finding], outside: list[Break], summary: str,
    code: int, suppressed: int, shown: str, cmp: bl.Comparison | None, update: bool = False,
) -> None:
    """The machine format on stdout (``fmt`` other than text) and the HTML report, if asked."""
    every = list(findings)
    for brk in outside:
        leaf = brk.leaf
        every.append(Finding(None, leaf.line if leaf else 0, None, brk.root.code or brk.root.gb_type, message(brk), "outside",
                             f"outside the targets ({leaf.file if leaf else '?'}), not checked", brk))
    if fmt != "text":
        from gbfix import formats

        diagnostics = [
            formats.Diagnostic(
                report.display_path(f.path) if f.path is not None else None, f.path, f.line, f.col, f.code, f.message, f.status,
                f.detail, _LEVEL[f.status],
            )
            for f in every
            if fmt != "github" or f.status == "new"  # annotations only for what fails the gate
        ]
        stale = [{"code": c, "path": p, "function": fn, "count": n} for (c, p, fn), n in sorted((cmp.stale if cmp else {}).items())]
        counts = Counter(f.status for f in every)
        extra = {
            "entry": found.entry.text,
            "baseline": shown,
            "updated": update,
            "counts": {"new": counts["new"], "baseline": counts["baseline"], "outside": counts["outside"], "suppressed": suppressed},
            "stale": stale,
        }
        click.echo(formats.render(fmt, formats.Document("check", diagnostics, summary, code, suppressed, extra)), nl=False)
    if html_file is not None:
        from gbfix import html_report

        result = Result(
            entry=found.entry, findings=tuple(every), outcomes=(), originals=found.files, fixed={},
            remaining=sum(1 for f in every if f.status != "outside"), fullgraph=None, baseline=found.run, runs=1,
            seconds=found.seconds, final=None,
        )
        html_report.write(html_file, html_report.render(result, command="check", summary=summary, suppressed=suppressed))
        click.echo(f"wrote the HTML report {report.display_path(html_file.resolve())}", err=True)


def _summary(found: Detected, n: int, suppressed: int, cmp: bl.Comparison, shown: str, again: str, recompiled: bool = False) -> str:
    tail = f" {suppressed} suppressed." if suppressed else ""
    if n == 0:
        if found.run.compiled_calls == 0:
            return "Nothing to check: the entry never called compiled code (torch.compile)."
        return f"No graph breaks found in {found.run.compiled_calls} call(s) of compiled code." + tail
    noun = "graph break" if n == 1 else "graph breaks"
    if recompiled:  # recompiles are checked like breaks (rccodes)
        noun = "graph break or recompile site" if n == 1 else "graph break and recompile sites"
    if cmp.known is None:
        return f"Found {n} {noun}, all new: no baseline at {shown} (`{again}` writes one)." + tail
    if not cmp.new:
        return f"Found {n} {noun}, all in the baseline ({shown})." + tail
    return f"Found {n} {noun}: {cmp.new_total} new (not in {shown}), {n - cmp.new_total} in the baseline." + tail
