"""Test helpers shared by the recipe tests."""

from __future__ import annotations

import textwrap
from pathlib import Path

from gbfix import edits
from gbfix.locate import ParsedFile
from gbfix.records import Break, Cause, Edit, Frame, ObservedCall, Site
from gbfix.recipes.base import Recipe, SiteContext
from gbfix.sources import SourceFile

ALL_CAPABILITIES = frozenset(
    {"hop_print", "leaf_function", "nonstrict_trace", "custom_op", "cond", "check", "reorderable_logging", "effectful_op"}
    | {f"config.{option}" for option in ("capture_scalar_outputs", "capture_dynamic_output_shape_ops", "allow_rnn", "trace_autograd_ops")}
)


def rewrite_at(
    source: str,
    recipe: type[Recipe],
    line: int,
    col: int | None,
    end_col: int | None,
    code: str,
    capabilities: frozenset[str] = ALL_CAPABILITIES,
    observed: dict[int, tuple[ObservedCall, ...]] | None = None,
) -> str | None:
    """Apply one recipe at a hand-made site (character columns) without running torch.

    ``observed`` maps the first line of a def (decorators included) to the
    calls an uncompiled run would have observed. Returns the rewritten source,
    or None when the recipe declines.
    """
    source = textwrap.dedent(source)
    data = source.encode()
    parsed = ParsedFile(SourceFile(Path("/virtual/example.py"), data, source, "utf-8"))
    brk = Break(causes=(Cause(code, code, ""),), stack=(Frame("/virtual/example.py", line, col, end_col, "f"),))
    site = Site(Path("/virtual/example.py"), line, col, end_col, brk)
    seen = {(site.path, ln): calls for ln, calls in (observed or {}).items()}
    ctx = SiteContext(site, parsed.node_at(line, col, end_col), parsed, capabilities, seen)
    rw = recipe().propose(ctx)
    if rw is None:
        return None
    (s, e) = parsed.span(rw.original)
    edit = Edit(0, site, recipe.name, recipe.safety, rw.message, s, e, rw.original, rw.replacement, rw.imports)
    return edits.apply(parsed, [edit]).decode()
