"""The findings in the given files: the break patterns in each function compiled code
reaches, with the compiled region it is reached from, as the selection and the
``# gbfix: ignore`` comments allow."""

from __future__ import annotations

import ast
from pathlib import Path

from gbfix.lint.patterns import check, generator_hit, traced_nodes
from gbfix.lint.project import Module, Project
from gbfix.lint.reach import Reach, Reached
from gbfix.lint.report import Finding
from gbfix.lint.roots import functions
from gbfix.suppress import Filter, Suppressions
from gbfix.suppress import of as suppressions_of


def findings(
    reaches: list[Reach], given: set[Path], project: Project, silenced: set[str], selection: Filter, assumed: bool,
) -> tuple[list[Finding], int]:
    """The breaks in the given files' functions that compiled code reaches, and how many a
    ``# gbfix: ignore`` comment silenced. ``assumed``: the regions are only taken as compiled."""
    kept: set[Finding] = set()
    muted: set[tuple] = set()  # (path, line, col, code) of suppressed findings
    comments: dict[int, Suppressions] = {}

    def keep(m: Module, f: Finding) -> None:
        if not selection.selects(f.code):
            return
        if id(m) not in comments:
            comments[id(m)] = suppressions_of("\n".join(m.lines)) if any("gbfix" in ln for ln in m.lines) else Suppressions({}, {})
        if comments[id(m)].covers(f.line, f.code):
            muted.add((f.path, f.line, f.col, f.code))
        else:
            kept.add(f)

    # each function is checked once, with one via: none in a region itself (unless it is
    # only assumed compiled), else the first region reaching it, by name
    best: dict[tuple[str, int, str], tuple[str, Reached]] = {}
    for x in (x for r in reaches for x in r.reached if Path(x.path) in given):
        via = f"{x.region}, assumed compiled" if assumed else "" if x.root else x.region
        key = (x.path, x.line, x.name)
        if key not in best or (via != "", via) < (best[key][0] != "", best[key][0]):
            best[key] = via, x
    funcs: dict[str, dict] = {}
    for (path, line, name), (via, x) in sorted(best.items()):
        m = project.module(Path(path))
        if m is None:
            continue
        if path not in funcs:
            funcs[path] = functions(m, project)
        func = funcs[path].get((line, name))
        if func is None:
            continue
        hit = generator_hit(func.node) if x.root else None
        if hit is not None:
            keep(m, _finding(m, *hit, via))
        scope = project.scope_of(func)
        for node, _stmt in traced_nodes(func.node):
            try:
                hits = list(check(node, scope, project))
            except RecursionError:  # an expression nested too deep to follow: skip it
                continue
            for site, code, message in hits:
                if code not in silenced:
                    keep(m, _finding(m, site, code, message, via))
    return sorted(kept), len(muted)


def _finding(m: Module, site: ast.AST, code: str, message: str, via: str) -> Finding:
    line = site.lineno  # type: ignore[attr-defined]
    return Finding(m.display, line, _char_col(m, line, site.col_offset) + 1, code, message, via)  # type: ignore[attr-defined]


def _char_col(m: Module, line: int, byte_col: int) -> int:
    # ast columns are UTF-8 byte offsets; editors and gbfix count characters
    text = m.lines[line - 1] if line <= len(m.lines) else ""
    return byte_col if text.isascii() else len(text.encode("utf-8")[:byte_col].decode("utf-8", "replace"))
