"""Compound edits: an edit that moves its break to the next line of the same code, joined
with the fix of that next break, and verified as one.

An edit can be right and still fail verification on its own: taking an `.item()` out
of an expression leaves the `if` on its value to break (k-diffusion's churn factor,
a flag read once per forward), and a Dynamo option that traces `nonzero` shows the
guard on the length next. The trial of the first edit says where the break went; the
recipes then propose for that break in the edited text, and each proposal is joined
with the first edit:

- in the same function: one edit of the whole function (``joined``), both changes in
  it, so that it applies to the unedited file like any other edit;
- a Dynamo setting in the entry script (``pair``): the two edits as a group, verified in
  one trial; the first alone fails again (its break only moved), so it is kept only with
  the setting. An `.item()` written where a size takes a tensor needs
  ``capture_scalar_outputs`` this way. The other way round, a setting that moved its
  breaks (``capture_dynamic_output_shape_ops``: `x[mask]` traced, then `if len(...) == 0:`
  breaks, in each function that selects) is kept with the fixes of those tests (torch.conds),
  each counted for the setting's site: alone, none removes a break.

The verifier then judges the pair as it judges any edit: the first edit's site gone, no
break new, the program's behaviour unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import libcst as cst

from gbfix import generated, recipes
from gbfix.edits import Replace
from gbfix.locate import ParsedFile
from gbfix.recipes.tree import walk
from gbfix.records import Edit


def joined(first: Edit, then: Edit, before: ParsedFile, middle: ParsedFile, edit_id: int) -> Edit | None:
    """``first`` (computed on ``before``) and ``then`` (computed on ``middle``, which is
    ``before`` with ``first`` applied) as one edit of the function that holds both, or
    None where they are not in one function of one file."""
    if first.path != then.path or first.file is not None or then.file is not None:
        return None
    if not generated.imports_torch(before.module):
        # edits.apply puts a torch-free module's helper imports first in the function,
        # which the function taken from ``middle`` would then hold twice
        return None
    fn = _function(before, first.original)
    if fn is None:
        return None
    path = _path(before, fn)
    again = _find(middle.module, path)
    if again is None or (_function(middle, then.original) is not again and then.original is not again):
        return None
    new = again.visit(Replace({id(then.original): then.replacement}))
    start, end = before.span(fn)
    return Edit(
        edit_id, first.site, first.recipe, "unsafe" if "unsafe" in (first.safety, then.safety) else "safe",
        f"{first.message}; then {then.message[:1].lower()}{then.message[1:]}", start, end, fn, new,
        _union(first.imports, then.imports), _union(first.helpers, then.helpers), None, (*first.also, *then.recipes),
    )


def pair(first: Edit, then: Edit, before: ParsedFile) -> list[Edit]:
    """``first`` and a process-wide ``then`` (a Dynamo setting in the entry script) as a
    group verified in one trial, ``then`` counted for ``first``'s site; a process-wide
    ``first`` and the fix of the break it moved to, in another file, likewise; [] for any
    other ``then``, which must share ``first``'s function (``joined``).

    ``then`` was computed on the text with ``first`` applied; in ``first``'s own file (a
    script that is its own entry) it is tied to the same node of ``before``, which it
    must lie above."""
    if recipes.named(first.recipe).process_wide and not recipes.named(then.recipe).process_wide:
        # a setting that moved the break (`nonzero` traced, the guard on its length next):
        # the fix of that guard, in the script below the setting, tied back to the unedited text
        if then.path == first.path:
            same = _twins(before, then.original)
            if len(same) != 1 or before.span(same[0])[0] < first.end:
                return []
            start, end = before.span(same[0])
            then = replace(then, original=same[0], start=start, end=end)
        # counted for the setting's site: alone, where the setting is not on, it removes no break
        return [replace(then, site=first.site), first]
    if not recipes.named(then.recipe).process_wide:
        return []
    if then.path == first.path:
        if then.end > first.start:
            return []
        original = next((n for n in _twins(before, then.original) if before.span(n) == (then.start, then.end)), None)
        if original is None:
            return []
        then = replace(then, original=original)
    return [first, replace(then, site=first.site)]


def _twins(before: ParsedFile, node: cst.CSTNode) -> list[cst.CSTNode]:
    """The nodes of ``before`` equal to ``node`` (computed on an edited text)."""
    return [n for n in walk(before.module) if type(n) is type(node) and n.deep_equals(node)]


def _union(a: Sequence, b: Sequence) -> tuple:
    return tuple(dict.fromkeys((*a, *b)))


def _function(parsed: ParsedFile, node: cst.CSTNode) -> cst.FunctionDef | None:
    """The outermost function around ``node`` (or ``node`` itself): a nested function's
    break may move to the function that calls it."""
    found = [a for a in (node, *parsed.ancestors(node)) if isinstance(a, cst.FunctionDef)]
    return found[-1] if found else None


def _path(parsed: ParsedFile, fn: cst.FunctionDef) -> tuple[str, ...]:
    """The names of the classes around ``fn``, then its own."""
    outer = [a.name.value for a in parsed.ancestors(fn) if isinstance(a, cst.ClassDef)]
    return (*reversed(outer), fn.name.value)


def _find(module: cst.Module, path: tuple[str, ...]) -> cst.FunctionDef | None:
    """The only module-level function (or method of module-level classes) at ``path``."""
    body: Sequence[cst.CSTNode] = module.body
    for i, name in enumerate(path):
        last = i == len(path) - 1
        kind = cst.FunctionDef if last else cst.ClassDef
        hits = [n for n in body if isinstance(n, kind) and n.name.value == name]
        if len(hits) != 1:
            return None  # a redefinition: which one is meant is not clear
        hit = hits[0]
        if isinstance(hit, cst.FunctionDef):
            return hit if last else None
        assert isinstance(hit, cst.ClassDef)
        if not isinstance(hit.body, cst.IndentedBlock):
            return None
        body = hit.body.body
    return None
