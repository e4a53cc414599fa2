"""Where a recompiled frame is called, for the recipes of recompile sites (RC codes).

A size (RC003) or a Python number argument (RC002) is fixed where the compiled function
or module is called: this finds that call (the innermost frame of the recompile's user
stack in the site's file or the entry script) and the argument that binds a parameter of
the frame's ``def``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import cast

import libcst as cst
import libcst.matchers as m

from gbfix.locate import ParsedFile
from gbfix.recipes.base import Decline, SiteContext
from gbfix.records import Guard
from gbfix.sources import char_column


def recompile_guards(ctx: SiteContext) -> tuple[Guard, ...]:
    """The failed guards of the site's latest recompile, the most recent compile's first;
    () where the site is no recompile or Dynamo named no guard (nothing to answer)."""
    rc = ctx.recompile
    return rc.guards if rc is not None else ()


def _files(ctx: SiteContext) -> list[ParsedFile]:
    return [ctx.file, *([ctx.entry] if ctx.entry is not None and ctx.entry is not ctx.file else [])]


def _parsed(ctx: SiteContext, file: str) -> ParsedFile | None:
    path = Path(os.path.realpath(file))
    return next((f for f in _files(ctx) if f.source.path == path), None)


def params(ctx: SiteContext) -> list[str]:
    """The frame's parameters as a call passes them (``self`` of a method left out)."""
    rc = ctx.recompile
    parsed = _parsed(ctx, rc.file) if rc else None
    if parsed is None:
        raise Decline("the compiled function is not in the site's file nor the entry script")
    for node in m.findall(parsed.module, m.FunctionDef()):
        first = parsed.span(node.decorators[0] if node.decorators else node)[0][0]
        if node.name.value == rc.function and rc.line in (first, parsed.span(node)[0][0]):
            p = node.params
            if p.star_arg is not cst.MaybeSentinel.DEFAULT or p.star_kwarg is not None:
                raise Decline("the compiled function takes *args or **kwargs")
            names = [x.name.value for x in (*p.posonly_params, *p.params)]
            return names[1:] if names[:1] in (["self"], ["cls"]) else names
    raise Decline(f"no def of `{rc.function}` at line {rc.line}")


def call(ctx: SiteContext) -> tuple[ParsedFile, cst.Call]:
    """The call of the compiled frame (innermost frame of its caller's stack in a file here)."""
    rc = ctx.recompile
    for frame in reversed(rc.stack if rc else ()):
        parsed = _parsed(ctx, frame.file)
        if parsed is None or frame.col is None:
            continue
        lines = parsed.source.text.splitlines()
        col = char_column(lines[frame.line - 1], frame.col) if frame.line <= len(lines) else frame.col
        starting = [c for c in m.findall(parsed.module, m.Call()) if parsed.span(c)[0] == (frame.line, col)]
        if starting:  # `model(x).sum()` starts there too: the innermost is the frame's call
            return parsed, cast(cst.Call, min(starting, key=lambda c: parsed.span(c)[1]))
        break
    raise Decline("the call of the compiled function is not in the site's file nor the entry script")


def argument(node: cst.Call, names: list[str], name: str) -> cst.Arg:
    """The argument of ``node`` that binds parameter ``name``."""
    for arg in node.args:
        if arg.star:
            raise Decline("the call passes *args or **kwargs")
        if arg.keyword is not None and arg.keyword.value == name:
            return arg
    if name in names and names.index(name) < len(node.args) and node.args[names.index(name)].keyword is None:
        return node.args[names.index(name)]
    raise Decline(f"the call does not pass `{name}`")
