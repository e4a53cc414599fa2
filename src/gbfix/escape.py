"""The escape hatch a human would try for a break gbfix leaves in place.

A break no recipe fixes is still reported, with what to do about it by hand:
gbfix's advice for the codes real model code hits most, else Dynamo's own
first hint from the installed registry, else the generic way out.
"""

from __future__ import annotations

import os
from pathlib import Path

import libcst as cst

from gbfix import gbcodes, sources
from gbfix.errors import GbfixError
from gbfix.locate import ParsedFile, innermost_in
from gbfix.recipes.tree import nodes
from gbfix.records import Break, Cause, Frame

_ADVICE = {
    "GB0124": "read the number outside the compiled region and pass it in as a Python int/float, "
    "or keep the value a 0-dim tensor",
    # `.tolist()`, float(t), int(t), math.* of a tensor: a Python value read from tensor data
    "GB0033": "read the values outside the compiled region and pass them in, or keep them a tensor "
    "(torch ops instead of math.* or Python lists)",
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
    if leaf is not None and brk.root.code == "GB0003" and leaf.name == "<genexpr>":
        return _eager_generator(leaf)
    if leaf is not None and brk.root.code == "GB0170" and leaf.name in _REDUCTIONS and _POLYFILLS in leaf.file.replace(os.sep, "/"):
        user = innermost_in(brk.stack, targets)
        return _reduce_in_torch(leaf.name, user[1] if user else None)
    # Dynamo's polyfills stand in for builtins the line calls itself (`any(...)`)
    if leaf is None or Path(os.path.realpath(leaf.file)) in targets or _POLYFILLS in leaf.file.replace(os.sep, "/"):
        return hatch(brk.root)
    where = f"{_short(leaf.file)}:{leaf.line}"
    if brk.root.code == "GB0025":  # a graph_break() someone else wrote: only the call can move
        return f"the graph_break() is in {where}, which this line calls: {_LAST_RESORT}"
    return f"it breaks in {where}, which this line calls: {hatch(brk.root)}"


_POLYFILLS = "torch/_dynamo/polyfills/"
_REDUCTIONS = ("any", "all")


def _reduce_in_torch(name: str, frame: Frame | None) -> str:
    """GB0170 in Dynamo's any()/all(): each item is tested with a Python `if`, and
    Dynamo gives up on the whole function there (the frame runs eagerly)."""
    found = _reduction_at(frame) if frame is not None else None
    rewrite = found[1] if found else f"torch.stack([<item> for ...]).{name}()"
    return (
        f"{name}() tests each tensor with a Python `if`, where Dynamo gives up on the whole function: "
        f"reduce in torch instead, `{rewrite}` ({_EXACT}), then express the branch on that tensor with "
        "torch.where / torch.cond, or decide it outside the compiled function and pass the result in"
    )


def _eager_generator(frame: Frame) -> str:
    """GB0003 for a generator expression: nobody compiled it; the code around it ran
    eagerly (its function fell back to eager), and Dynamo saw it as a frame of its own."""
    text = (
        "Dynamo met this generator expression as a frame of its own because the code around it ran eagerly "
        "(its function fell back to eager at a break reported before this one): fix that break"
    )
    found = _reduction_at(frame)
    if found is None:
        return text
    original, rewrite = found
    return f"{text}. `{original}` over tensors is one such break itself: write `{rewrite}` ({_EXACT})"


_EXACT = "the same truth value when each item is a 0-dim tensor, all on one device, and there is at least one; every item is computed, no short-circuit"


def _reduction_at(frame: Frame) -> tuple[str, str] | None:
    """(the call, its torch reduction) for an ``any(<generator>)`` / ``all([<list comprehension>])``
    on the frame's line (the one holding its column when Dynamo gave one), or None."""
    try:
        parsed = ParsedFile(sources.read(Path(frame.file)))
    except (GbfixError, OSError, cst.ParserSyntaxError):
        return None
    col = parsed.char_col(frame.line, frame.col)
    for call in nodes(parsed.module, cst.Call):
        if not (isinstance(call.func, cst.Name) and call.func.value in _REDUCTIONS and len(call.args) == 1):
            continue
        gen = call.args[0].value
        (line, start), (_, end) = parsed.span(call)
        if isinstance(gen, (cst.GeneratorExp, cst.ListComp)) and line == frame.line and (col is None or start <= col < end):
            items = cst.ListComp(elt=gen.elt, for_in=gen.for_in)
            stack = cst.parse_expression("torch.stack(_)").with_changes(args=[cst.Arg(items)])
            reduced = cst.Call(func=cst.Attribute(value=stack, attr=cst.Name(call.func.value)))
            return _EMPTY.code_for_node(call), _EMPTY.code_for_node(reduced)
    return None


_EMPTY = cst.Module(body=[])


def _short(file: str) -> str:
    """A library file as its import path shows it (`torch/optim/optimizer.py`)."""
    head, sep, tail = file.rpartition("site-packages/")
    return tail if sep else Path(file).name
