"""The escape hatch a human would try for a break gbfix leaves in place.

A break no recipe fixes is still reported, with what to do about it by hand:
gbfix's advice for the codes real model code hits most, else Dynamo's own
first hint from the installed registry, else the generic way out.
"""

from __future__ import annotations

import os
from pathlib import Path

from gbfix import gbcodes
from gbfix.records import Break, Cause

_ADVICE = {
    "GB0124": "read the number outside the compiled region and pass it in as a Python int/float, "
    "or keep the value a 0-dim tensor",
    "GB0033": "pass the list in from outside the compiled region, or keep the values a tensor",
    "GB0109": "keep the values a tensor (index, gather, where) instead of a Python list",
    "GB0170": "express the branch with torch.where / torch.cond, or decide it outside the compiled function "
    "and pass the result in",
    "GB0036": "keep the shape static: a masked torch.where instead of boolean indexing, or "
    "torch._dynamo.config.capture_dynamic_output_shape_ops = True at import",
    "GB0055": "create the values that need the torch.Generator outside the compiled function and pass them in",
    "GB0003": "compile the function the generator calls for each item, not the generator",
    "GB7000": "fix the break inside the loop (its cause above): Dynamo skips the whole frame for it",
    "GB0092": "return only tensors and plain Python values from the compiled function",
}
_DATA_DEPENDENT = (
    "branching on a value read from a tensor: guard it with torch._check(...) or pass the value in as a Python number"
)
_LAST_RESORT = (
    "move the call out of the compiled function, or wrap the function that makes it in torch.compiler.disable "
    "(the break stays, reported as GB0098, but the code around it compiles)"
)
_UNHELPFUL = ("report an issue", "dynamo bug", "file an issue", "it may be possible to write dynamo tracing rules")


def _sentences(fragments) -> list[str]:
    """Registry hints, with the line-wrapped ones (ending in a space) joined up."""
    out: list[str] = []
    for i, fragment in enumerate(fragments):
        if out and fragments[i - 1][-1:].isspace():
            out[-1] += fragment
        else:
            out.append(fragment)
    return out


def hatch(cause: Cause) -> str:
    """What to try by hand for a break with this root cause."""
    if cause.code in _ADVICE:
        return _ADVICE[cause.code]
    if cause.code is None and cause.gb_type == "Data-dependent expression":
        return _DATA_DEPENDENT
    # The hints of the message Dynamo raised are whole sentences; the registry's
    # are line-wrapped fragments of them.
    entry = gbcodes.entry(cause.code) if cause.code else None
    for hint in [*cause.hints, *_sentences((entry or {}).get("Hints", ()))]:
        text = " ".join(hint.split())
        if text and not any(u in text.lower() for u in _UNHELPFUL):
            return text[0].lower() + text[1:]
    return _LAST_RESORT


def hatch_at(brk: Break, targets: set[Path]) -> str:
    """``hatch`` for the break, saying where it is when that is in code the line calls
    (torch, a package): advice written for the breaking line (remove the
    `graph_break()` call) would misread as advice for the user's own line."""
    leaf = brk.leaf
    # Dynamo's polyfills stand in for builtins the line calls itself (`any(...)`)
    if leaf is None or Path(os.path.realpath(leaf.file)) in targets or _POLYFILLS in leaf.file.replace(os.sep, "/"):
        return hatch(brk.root)
    where = f"{_short(leaf.file)}:{leaf.line}"
    if brk.root.code == "GB0025":  # a graph_break() someone else wrote: only the call can move
        return f"the graph_break() is in {where}, which this line calls: {_LAST_RESORT}"
    return f"it breaks in {where}, which this line calls: {hatch(brk.root)}"


_POLYFILLS = "torch/_dynamo/polyfills/"


def _short(file: str) -> str:
    """A library file as its import path shows it (`torch/optim/optimizer.py`)."""
    head, sep, tail = file.rpartition("site-packages/")
    return tail if sep else Path(file).name
