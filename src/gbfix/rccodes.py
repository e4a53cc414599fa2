"""The RC codes: why Dynamo compiled a frame again, by the kind of the failed guard.

``RC`` and three digits, so a code can never be taken for one of Dynamo's ``GB`` codes;
rules/RCxxx.md documents each. Standard library only (no torch, no libcst): the output
formats and ``gbfix explain`` use it.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from gbfix.records import Guard

STATUS = "recompile"
LIMIT = "RC100"
LIMIT_BREAK = "GB0039"  # Dynamo's break for the same event: RC100 says more, at the same def

# code -> (title, what a user does about it): the rules pages say more.
CODES: dict[str, tuple[str, str]] = {
    "RC001": ("a number on an object changed between calls", "keep it in a tensor buffer, or out of the compiled code"),
    "RC002": ("a Python number argument changed between calls", "pass it as a tensor"),
    "RC003": ("a tensor's size changed between calls", "mark the dimension dynamic (torch._dynamo.mark_dynamic)"),
    "RC004": ("a flag or constant changed between calls", "expected when it toggles rarely; else hoist the test out of the compiled code"),
    "RC005": ("a global variable changed between calls", "pass it as an argument or keep it in a tensor"),
    "RC006": ("a tensor's dtype, device or other property changed between calls", "convert the input before the call"),
    "RC007": ("a different object or type was passed", "reuse one object, or compile once per kind"),
    "RC008": ("a list, tuple or dict changed length between calls", "pass a tensor, or a container of fixed length"),
    "RC009": ("another guard failed", "see the guard text"),
    LIMIT: ("the frame hit the recompile limit and runs eagerly", "fix the recompiles it names"),
}


@dataclass(frozen=True)
class GuardCause:
    """A failed guard's kind of cause (``code``) and the expression it guards (``source``:
    ``self.calls``, ``lr``, ``x.size()[0]``), for the report and for a recipe."""

    code: str
    source: str
    value: object = None  # the value the guard expected, where the guard is ``source == value``


_TENSOR = re.compile(r"^tensor '(?P<name>.+?)' (?P<what>[\w ]+?) mismatch(?: at index (?P<index>\d+))?")
_EQ = re.compile(r"^(?P<lhs>.+?) == (?P<rhs>.+)$")
_IS_NONE = re.compile(r"^(?P<lhs>.+?) is (?:not )?None$")
_ID = re.compile(r"___check_(?:obj|type)_id\((?P<arg>[^,]+)")
_LOCAL = re.compile(r"\b[LG]\['([^']+)'\]")
_LEN = re.compile(r"^len\((?P<arg>.+)\)$")


def plain(expr: str) -> str:
    """``L['x'].size()[0]`` as the user wrote it: ``x.size()[0]``."""
    return _LOCAL.sub(r"\1", expr).strip()


def cause(guard: Guard) -> GuardCause:
    """The RC code of a failed guard, from its text (Dynamo's, e.g. ``self.calls == 1``)."""
    text = guard.text
    if m := _TENSOR.match(text):
        name, what = plain(m["name"]), m["what"]
        if what in ("size", "stride"):
            return GuardCause("RC003", f"{name}.{what}()[{m['index']}]" if m["index"] else name)
        return GuardCause("RC006", f"{name}.{what.replace(' ', '_')}")
    if m := _EQ.match(text):
        lhs, rhs = m["lhs"].strip(), m["rhs"].strip()
        try:
            value = ast.literal_eval(rhs)
        except (ValueError, SyntaxError):
            value = rhs
        if n := _LEN.match(lhs):
            return GuardCause("RC008", plain(n["arg"]), value)
        if lhs.startswith("G["):
            return GuardCause("RC005", plain(lhs), value)
        if ".size()" in lhs or ".stride()" in lhs:
            return GuardCause("RC003", plain(lhs), value)
        if isinstance(value, bool) or value is None or isinstance(value, str):
            return GuardCause("RC004", plain(lhs), value)
        if isinstance(value, (int, float)):
            # self.calls, self.config.step, cfg['lr']: a value kept on an object; lr: an argument
            attribute = any(c in plain(lhs) for c in ".[")
            return GuardCause("RC001" if attribute else "RC002", plain(lhs), value)
        return GuardCause("RC009", plain(lhs), value)
    if m := _IS_NONE.match(text):
        return GuardCause("RC004", plain(m["lhs"]))
    if m := _ID.search(text):
        return GuardCause("RC007", plain(m["arg"]))
    if ".size()" in text or ".stride()" in text:
        return GuardCause("RC003", plain(text))
    return GuardCause("RC009", plain(text))


def describe(code: str, recompiles) -> dict:
    """A recompile finding's facts as JSON (``recompiles``: its ``records.Recompile``s, oldest first)."""
    last = recompiles[-1]
    guard = last.guards[0] if last.guards else None
    why = cause(guard) if guard else None
    return {
        "function": last.function,
        "file": last.file,
        "def_line": last.line,
        "count": len(recompiles),
        "guard": guard.text if guard else None,
        "source": why.source if why else None,
        "cause": why.code if why else None,
        "limit": last.limit,
        "title": CODES.get(code, ("", ""))[0],
    }
