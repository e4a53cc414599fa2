"""Map line numbers of an edited file back to the original.

A trial run reports breaks against the edited text. Lines the edits left alone
map to their original number; lines the edits wrote map to the original lines
they replaced, flagged as rewritten.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass


@dataclass(frozen=True)
class Mapped:
    line: int  # original line (first line of the replaced region for rewritten lines)
    last: int  # last original line covered (== line for untouched lines)
    rewritten: bool


class LineMap:
    def __init__(self, original: str, edited: str) -> None:
        a, b = original.splitlines(), edited.splitlines()
        self._edited = b
        self._map: dict[int, Mapped] = {}
        matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            for j in range(j1, j2):
                if tag == "equal":
                    self._map[j + 1] = Mapped(i1 + (j - j1) + 1, i1 + (j - j1) + 1, False)
                else:
                    # Inserted lines (i1 == i2) belong to the line before them.
                    first = i1 + 1 if i2 > i1 else max(i1, 1)
                    self._map[j + 1] = Mapped(first, max(i2, first), True)

    def __call__(self, line: int) -> Mapped:
        return self._map.get(line, Mapped(line, line, False))

    def text(self, line: int) -> str:
        """The edited file's line ``line``, stripped ("" past its end)."""
        return self._edited[line - 1].strip() if 0 < line <= len(self._edited) else ""
