"""What lint needs to know of a project file before (or instead of) parsing it.

A project of a thousand files cannot be parsed on every commit. Its text alone tells
which files may hold a compile call (they name ``compile`` or ``optimize``) or set a
Dynamo option; only those files, and what the compiled code reaches from them, are
parsed. What a parse found is kept with the rest (``cache``), so that a file whose text
only mentions compiling is not parsed again until it changes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CONFIG_OPTIONS = (b"capture_scalar_outputs", b"capture_dynamic_output_shape_ops", b"allow_rnn")
_WORD = re.compile(rb"\w")
_IDENT = re.compile(rb"[\w.]")


@dataclass(frozen=True)
class Parsed:
    """What parsing the file found."""

    error: tuple[int, int, str, str] | None  # (line, col, code, message) of an E999 / E902
    compiles: bool  # a call or decorator that may be torch.compile (before name resolution)
    config: tuple[str, ...]  # Dynamo options set True at module level


@dataclass(frozen=True)
class Facts:
    mentions_compile: bool
    mentions_config: bool
    parsed: Parsed | None = None  # None until the file was parsed


def scan(data: bytes) -> Facts:
    """The facts the text gives, without parsing: an over-approximation (a mention in a
    comment counts; a parse decides). Plain substring searches, then a look at each hit:
    regular expressions over the whole text cost several times more."""
    return Facts(_mentions_compile(data), any(option in data for option in CONFIG_OPTIONS))


def _mentions_compile(data: bytes) -> bool:
    for word in (b"compile", b"optimize"):
        i = data.find(word)
        while i != -1:
            end = i + len(word)
            whole = not (i and _WORD.match(data, i - 1)) and not _WORD.match(data, end)
            if whole and not _is_re(data, i):
                return True
            i = data.find(word, end)
    return False


def _is_re(data: bytes, i: int) -> bool:
    """``re.compile`` / ``regex.compile`` at ``i``: everywhere, and never a torch.compile call."""
    before = data[max(0, i - 6) : i]
    return before.endswith(b"regex.") or (before.endswith(b"re.") and not (i > 3 and _IDENT.match(data, i - 4)))
