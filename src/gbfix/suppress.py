"""Which breaks to report and fix: ``select`` / ``ignore`` by code, and ``# gbfix: ignore`` comments.

Shared by the runtime path (the engine skips the sites, the report drops them) and by
``gbfix lint``, so this module uses the standard library only (no torch, no libcst).

A code selector is a full code (``GB0059``, ``RC001``), a prefix (``GB01``, ``GB``, ``RC``) or ``ALL``. A
break is kept when its code matches ``select`` and does not match ``ignore`` (ruff's rule,
without ruff's specificity ordering). Codes that are not GB codes (a break Dynamo raises
without a registry entry is named by its type) match only ``ALL``.

A comment ``# gbfix: ignore`` (every code) or ``# gbfix: ignore[GB0059, GB0124]`` on the
break's line, or on the first line of the statement the break is in, suppresses it. The
statement is the innermost one: a comment on an ``if`` line covers a break in its
condition, not one in its body. Comments are read with ``tokenize``, so the text inside a
string never counts.
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass
from functools import lru_cache

ALL = "ALL"
_SELECTOR = re.compile(r"ALL|GB\d{0,4}|RC\d{0,3}")  # RC: recompiles (gbfix.recompiles)
_COMMENT = re.compile(r"#\s*gbfix:\s*ignore\b(\[[^\]]*\])?")


def parse_selectors(values) -> tuple[str, ...]:
    """Validate code selectors (``GB0059``, ``GB01``, ``ALL``; any case); ``ValueError`` with a one-line reason."""
    out = []
    for value in values:
        selector = value.strip().upper() if isinstance(value, str) else None
        if selector is None or not _SELECTOR.fullmatch(selector):
            raise ValueError(f"invalid code {value!r} (expected a GB code like GB0059, a prefix like GB01, or ALL)")
        out.append(selector)
    return tuple(out)


def matches(code: str, selectors) -> bool:
    return any(s == ALL or (code.startswith(s) and code.startswith(("GB", "RC"))) for s in selectors)


@dataclass(frozen=True)
class Suppressions:
    """The ``# gbfix: ignore`` comments of one file."""

    comments: dict[int, tuple[str, ...] | None]  # line -> codes (None: every code)
    statement: dict[int, int]  # line -> first line of the (logical) statement it belongs to

    def covers(self, line: int, code: str) -> bool:
        for n in {line, self.statement.get(line, line)}:
            if n in self.comments:
                codes = self.comments[n]
                if codes is None or matches(code, codes):
                    return True
        return False


@lru_cache(maxsize=64)
def of(text: str) -> Suppressions:
    """The suppression comments of a source text (cached: the engine asks once per site)."""
    if "gbfix" not in text:
        return Suppressions({}, {})
    comments: dict[int, tuple[str, ...] | None] = {}
    statement: dict[int, int] = {}
    first: int | None = None  # first line of the logical line being read
    skip = {tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING, tokenize.ENDMARKER}
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                _comment(comments, tok.start[0], tok.string)
            elif tok.type == tokenize.NEWLINE:
                if first is not None:
                    for n in range(first, tok.end[0] + 1):
                        statement[n] = first
                first = None
            elif tok.type not in skip and first is None:
                first = tok.start[0]
    except (tokenize.TokenError, SyntaxError):
        # not Python that tokenizes (the lint reports it as E999 anyway): comments by line only
        comments.clear()
        statement.clear()
        for n, line in enumerate(text.splitlines(), 1):
            if "#" in line:
                _comment(comments, n, line[line.index("#"):])
    return Suppressions(comments, statement)


def _comment(comments: dict, line: int, text: str) -> None:
    m = _COMMENT.search(text) if "gbfix" in text else None
    if m is None:
        return
    if m.group(1) is None:
        comments[line] = None
    else:
        codes = tuple(c.upper() for c in re.split(r"[\s,]+", m.group(1)[1:-1]) if c)
        previous = comments.get(line, ())
        comments[line] = None if previous is None else previous + codes


@dataclass(frozen=True)
class Filter:
    """What to report and fix: selected codes, less ignored codes, less suppressed sites."""

    select: tuple[str, ...] = (ALL,)
    ignore: tuple[str, ...] = ()

    def selects(self, code: str) -> bool:
        return matches(code, self.select) and not matches(code, self.ignore)

    def suppressed(self, code: str, text: str | None, line: int) -> bool:
        """Selected, but a ``# gbfix: ignore`` comment silences it."""
        return text is not None and self.selects(code) and of(text).covers(line, code)

    def keeps(self, code: str, text: str | None, line: int) -> bool:
        """Selected and not suppressed: reported and fixed."""
        return self.selects(code) and not (text is not None and of(text).covers(line, code))
