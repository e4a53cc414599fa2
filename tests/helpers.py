"""Test helpers shared by the recipe tests."""

from __future__ import annotations

import os
import shutil
import textwrap
from pathlib import Path

from gbfix import edits
from gbfix.locate import ParsedFile
from gbfix.recipes.base import Recipe, SiteContext
from gbfix.records import Break, Cause, Frame, ObservedCall, Site
from gbfix.sources import SourceFile

ALL_CAPABILITIES = frozenset(
    {"hop_print", "leaf_function", "nonstrict_trace", "custom_op", "cond", "check", "reorderable_logging", "register_fake"}
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
    path: Path = Path("/virtual/example.py"),
) -> str | None:
    """Apply one recipe at a hand-made site (character columns) without running torch.

    ``observed`` maps the first line of a def (decorators included) to the
    calls an uncompiled run would have observed. ``path``: where the file is
    (in a package, the helpers go to its generated module). Returns the
    rewritten source, or None when the recipe declines.
    """
    ctx = site_context(source, line, col, end_col, code, capabilities, observed, path)
    rw = recipe().propose(ctx)
    if rw is None:
        return None
    return edits.apply(ctx.file, [rw.edit(0, ctx.site, recipe, ctx.file)]).decode()


def site_context(
    source: str,
    line: int,
    col: int | None,
    end_col: int | None,
    code: str,
    capabilities: frozenset[str] = ALL_CAPABILITIES,
    observed: dict[int, tuple[ObservedCall, ...]] | None = None,
    path: Path = Path("/virtual/example.py"),
) -> SiteContext:
    """A recipe's view of a hand-made site (see ``rewrite_at``)."""
    source = textwrap.dedent(source)
    parsed = ParsedFile(SourceFile(path, source.encode(), source, "utf-8"))
    brk = Break(causes=(Cause(code, code, ""),), stack=(Frame(str(path), line, col, end_col, "f"),))
    site = Site(path, line, col, end_col, brk)
    seen = {(site.path, ln): calls for ln, calls in (observed or {}).items()}
    return SiteContext(site, parsed.node_at(line, col, end_col), parsed, capabilities, seen)


def line_site(source: str, needle: str, nth: int = 0) -> tuple[int, int, int]:
    """(line, col, end_col) of the nth line holding ``needle``: the span Dynamo gives a call
    (from the needle to the end of its line)."""
    hits = [(i, text) for i, text in enumerate(source.splitlines(), 1) if needle in text]
    line, text = hits[nth]
    return line, text.index(needle), len(text.rstrip())


def rewrite_line(source: str, recipe, needle: str, code: str, nth: int = 0, **kw) -> str | None:
    """``rewrite_at`` the ``line_site`` of ``needle``."""
    source = textwrap.dedent(source)
    return rewrite_at(source, recipe, *line_site(source, needle, nth), code, **kw)


def at(source: str, needle: str, recipe, code: str, nth: int = 0) -> str | None:
    """Rewrite at the nth occurrence of ``needle``, the span Dynamo reports."""
    source = textwrap.dedent(source)
    hits = [(n, line) for n, line in enumerate(source.splitlines(), 1) if needle in line]
    number, line = hits[nth]
    col = line.index(needle)
    return rewrite_at(source, recipe, number, col, col + len(needle), code)


def declined_at(source: str, needle: str, recipe, code: str, nth: int = 0) -> str | None:
    """Why the recipe declines at the nth occurrence of ``needle`` (None: it gave nothing, unsaid)."""
    source = textwrap.dedent(source)
    hits = [(n, line) for n, line in enumerate(source.splitlines(), 1) if needle in line]
    number, line = hits[nth]
    col = line.index(needle)
    r = recipe()
    assert r.propose(site_context(source, number, col, col + len(needle), code)) is None
    return r.declined


def changed(before: str, after: str | None) -> list[str]:
    """The lines of ``after`` that are not in ``before``."""
    assert after is not None, "the recipe declined"
    old = set(textwrap.dedent(before).splitlines())
    return [line.strip() for line in after.splitlines() if line not in old]


def processes_in(folder: Path) -> list[int]:
    """The processes whose working directory is ``folder`` (gbfix's warm worker runs in the entry's)."""
    out = []
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            if os.readlink(f"/proc/{pid}/cwd") == str(folder):
                out.append(int(pid))
        except OSError:
            pass
    return out


def fixture_copy(tmp_path_factory, name: str) -> Path:
    """A copy of the folder tests/fixtures/``name`` for one test module (gbfix runs the
    programs there; the fixture stays clean), resolved: the paths findings carry."""
    root = tmp_path_factory.mktemp(name)
    shutil.copytree(Path(__file__).parent / "fixtures" / name, root, dirs_exist_ok=True)
    return root.resolve()


def generated_function(piece, **namespace):
    """The function a generated piece defines, as the recipe writes it, run with torch
    (and ``namespace``) as its globals."""
    import sys
    import types

    import torch

    from gbfix import generated

    # a module of its own, importable by name: Dynamo looks up a function's module
    module = sys.modules.setdefault(f"_gbfix_test_{piece.name}", types.ModuleType(f"_gbfix_test_{piece.name}"))
    if not hasattr(module, piece.name):
        module.__dict__.update(torch=torch, **namespace)
        for needed in generated.closure([piece.name]):  # the pieces it needs first (an op's library)
            exec(needed.code, module.__dict__)  # noqa: S102 - the helper as the recipe writes it
    return getattr(module, piece.name)


def value_or_error(fn):
    """What ``fn()`` returns, or the type of the exception it raises (outcomes compared)."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - the error is the outcome compared
        return type(e)
