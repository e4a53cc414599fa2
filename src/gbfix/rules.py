"""The rules/ catalog: one markdown page per GB code, with runnable before/after examples."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_SECTION = re.compile(r"^## (Example|Not fixed): *(.+)$", re.MULTILINE)
_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class RuleExample:
    code: str
    title: str
    before: str
    after: str | None  # None: gbfix must leave `before` unchanged


def parse(path: Path) -> list[RuleExample]:
    text = path.read_text(encoding="utf-8")
    code = path.stem
    heads = list(_SECTION.finditer(text))
    out = []
    for i, head in enumerate(heads):
        body = text[head.end() : heads[i + 1].start() if i + 1 < len(heads) else len(text)]
        blocks = _BLOCK.findall(body)
        kind, title = head.group(1), head.group(2).strip()
        expected = 2 if kind == "Example" else 1
        if len(blocks) != expected:
            raise ValueError(f"{path}: section {title!r} needs {expected} python block(s), has {len(blocks)}")
        out.append(RuleExample(code, title, blocks[0], blocks[1] if kind == "Example" else None))
    return out
