"""``gbfix lint``: the known graph-break patterns inside compiled regions, found statically.

No torch import and no user code is imported or run: files are parsed with the stdlib
``ast``. The compile calls are looked for in the whole project of the files given
(``workspace``: the ``targets`` of ``[tool.gbfix]``, else the git work tree, else the
folder), so a model file linted alone (as pre-commit passes it) is checked with the
``train.py`` that compiles it; findings are reported only in the files given. To keep
that cheap on a big project, most files are only scanned as text (``facts``, cached):
parsed are the files with compile calls and what the compiled code reaches from them
(``project`` reads modules on demand). Without
any compile call in the project, the ``forward`` of each ``nn.Module`` in the files given
is taken as compiled, and the findings say so. Findings are "likely": the runtime
``gbfix --dry-run`` is the ground truth.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from gbfix.errors import GbfixError
from gbfix.lint.cache import LintCache
from gbfix.lint.facts import Parsed
from gbfix.lint.findings import findings
from gbfix.lint.index import PathIndex
from gbfix.lint.parses import Parses, display
from gbfix.lint.project import Module, Project
from gbfix.lint.reach import Reach, reach
from gbfix.lint.report import Finding, Report
from gbfix.lint.roots import assumed, has_compile_sites, regions
from gbfix.lint.workspace import workspace
from gbfix.sources import python_files
from gbfix.suppress import Filter

__all__ = ["Finding", "Report", "lint"]
# torch._dynamo.config options (set to True at module level) that make Dynamo trace a pattern:
# .item()/float(t)/int .tolist() become symbolic scalars, masks give symbolic shapes, RNNs are traced.
_CONFIG_ROUTES = {
    "capture_scalar_outputs": ("GB0124", "GB0033"),
    "capture_dynamic_output_shape_ops": ("GB0036",),
    "allow_rnn": ("GB0014",),
}
_EVERY_CODE = Filter()


def lint(paths: list[Path], cwd: Path | None = None, selection: Filter = _EVERY_CODE) -> Report:
    """Likely breaks in ``paths``: those ``selection`` selects, less the ``# gbfix: ignore``d (counted)."""
    with _no_collector():
        return _lint(paths, cwd, selection)


@contextmanager
def _no_collector() -> Iterator[None]:
    """The cyclic garbage collector off: the parses allocate millions of objects, kept
    to the end and free of cycles, and the collector's passes over them took half the
    CPU time of a cold run (1,000 files of transformers: 1.0 s, 0.5 s without)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _lint(paths: list[Path], cwd: Path | None, selection: Filter) -> Report:
    cwd = (cwd or Path.cwd()).resolve()
    given = _files(paths)
    report = Report(files=len(given))
    if not given:
        return report
    space = workspace(paths, given)
    report.project_files = len(space.files)
    cache = LintCache.of(space.key, space.files)
    facts = {p: f for p in space.files if (f := cache.facts(p)) is not None}
    parses = Parses(cwd)
    index = PathIndex(space.files)
    project = Project(index, parses.module)  # the given files are checked in this one

    found_now: dict[Path, Parsed] = {}  # what this run's parses found, for the cache

    def parsed(path: Path) -> Parsed:
        """What parsing ``path`` finds: known from the cache, or parsed now."""
        known = facts[path].parsed if path in facts else None
        if known is None and path not in found_now:
            found_now[path] = _parsed(project.module(path), parses.done[path], project)
        return known or found_now[path]

    for path in given:  # their syntax errors are reported
        error = parsed(path).error
        if error is not None:
            report.findings.append(Finding(display(path, cwd), *error))
    # The files that may compile something: those whose text says so, less those a parse
    # showed to hold no compile call (a warm run parses only files with compile calls).
    compiling = sorted(p for p, f in facts.items() if f.may_compile and parsed(p).compiles)
    reaches = [_reach_of(p, cache, lambda: Project(index, parses.module)) for p in compiling]
    if not compiling:
        report.assumed = True
        reaches = [reach(assumed([m for p in given if (m := project.module(p))], project), project)]
    # process-wide Dynamo options set in the project make some patterns traceable
    options = {o for p, f in facts.items() if f.mentions_config for o in parsed(p).config}
    silenced = {c for option, codes in _CONFIG_ROUTES.items() if option in options for c in codes}
    # the regions counted are those whose code reaches the files given, not every one in the project
    inside = set(given)
    reaching = {(i, x.region) for i, r in enumerate(reaches) for x in r.reached if Path(x.path) in inside}
    seen = dict.fromkeys((c.label, c.path, c.line) for i, r in enumerate(reaches) for c in r.regions if (i, c.label) in reaching)
    marked = ", assumed" if report.assumed else ""
    report.regions = [f"{name} ({display(Path(path), cwd)}:{line}{marked})" for name, path, line in seen]
    found, report.suppressed = findings(reaches, inside, project, silenced, selection, report.assumed)
    report.findings = sorted(report.findings + found)
    for path in list(parses.done):  # what the parses found, for the next run
        if path in facts:
            parsed(path)
    for path, known in found_now.items():
        cache.parsed(path, known)
    cache.save()
    return report


def _reach_of(path: Path, cache: LintCache, new_project: Callable[[], Project]) -> Reach:
    """What the compile calls of ``path`` reach: from the cache, or found with a Project of
    its own (so that the files it reads are exactly what the result depends on)."""
    known = cache.reach(path)
    if known is None:
        project = new_project()
        m = project.module(path)
        known = reach(regions([m], project) if m is not None else [], project)
        cache.remember_reach(path, known)
    return known


def _parsed(m: Module | None, got: Module | Finding, project: Project) -> Parsed:
    """What the cache keeps of a parse."""
    if isinstance(got, Finding):
        return Parsed((got.line, got.col, got.code, got.message), False, ())
    assert m is not None
    return Parsed(None, has_compile_sites(m, project), tuple(sorted(m.config)))


def _files(paths: list[Path]) -> list[Path]:
    """The files given, resolved: a folder gives its .py files."""
    out: dict[Path, None] = {}
    for p in paths:
        if not p.exists():
            raise GbfixError(f"{p}: no such file or directory")
        # A file named explicitly is linted whatever its suffix (pre-commit passes
        # scripts it recognises by their shebang); folders give their .py files.
        for f in [p] if p.is_file() else python_files(p):
            out.setdefault(f.resolve())
    return list(out)
