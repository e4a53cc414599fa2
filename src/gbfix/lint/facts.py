"""What lint needs to know of a project file before (or instead of) parsing it.

A project of a thousand files cannot be parsed on every commit. Its text alone tells
which files may hold a compile call (they call something named ``compile`` or
``optimize``, or decorate with it) or set a Dynamo option; only those files, and what the compiled code reaches from them, are
parsed. What a parse found is kept with the rest (``cache``), so that a file whose text
only mentions compiling is not parsed again until it changes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CONFIG_OPTIONS = (b"capture_scalar_outputs", b"capture_dynamic_output_shape_ops", b"allow_rnn")
_WORD = re.compile(rb"\w")
_IDENT = re.compile(rb"[\w.]")
_CALL = re.compile(rb"[ \t]*\(")


@dataclass(frozen=True)
class Parsed:
    """What parsing the file found."""

    error: tuple[int, int, str, str] | None  # (line, col, code, message) of an E999 / E902
    compiles: bool  # a call or decorator that may be torch.compile (before name resolution)
    config: tuple[str, ...]  # Dynamo options set True at module level


@dataclass(frozen=True)
class Facts:
    may_compile: bool  # calls something named compile/optimize, or decorates with it
    mentions_config: bool  # names a Dynamo option lint honours
    parsed: Parsed | None = None  # None until the file was parsed


def scan(data: bytes) -> Facts:
    """The facts the text gives, without parsing: an over-approximation (a mention in a
    comment counts; a parse decides). Plain substring searches, then a look at each hit:
    regular expressions over the whole text cost several times more."""
    return Facts(_may_compile(data), any(option in data for option in CONFIG_OPTIONS))


def _may_compile(data: bytes) -> bool:
    """A call of something named ``compile`` / ``optimize`` (``torch.compile(m)``,
    ``model.compile()``) or a decorator line naming it; a word in prose does not count."""
    for word in (b"compile", b"optimize"):
        i = data.find(word)
        while i != -1:
            end = i + len(word)
            whole = not (i and _WORD.match(data, i - 1)) and not _WORD.match(data, end)
            if whole and not _is_re(data, i) and (_CALL.match(data, end) or _decorator(data, i)):
                return True
            i = data.find(word, end)
    return False


def _decorator(data: bytes, i: int) -> bool:
    start = data.rfind(b"\n", 0, i) + 1
    return data[start:i].lstrip().startswith(b"@")


def _is_re(data: bytes, i: int) -> bool:
    """``re.compile`` / ``regex.compile`` at ``i``: everywhere, and never a torch.compile call."""
    before = data[max(0, i - 6) : i]
    return before.endswith(b"regex.") or (before.endswith(b"re.") and not (i > 3 and _IDENT.match(data, i - 4)))
